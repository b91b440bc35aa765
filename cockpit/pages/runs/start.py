"""Starting a run by hand (``pages/runs/start.html``; the form ``_start_form.html``).

The form lives on the workflow's page: a placeholder there loads it from
``…/workflows/{id}/runs/start`` (a full page without JavaScript). Errors of the service
(``self_action``, ``forbidden`` with the steps it names, a workflow that is not active, fields)
are shown in the form; a run that started opens its timeline.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import PICKER_LIMIT, form_errors, page, targets
from cockpit.pages.runs.shared import RUN
from cockpit.state import AnyRequest, DbSession
from engine.directory import identity, organizations
from engine.directory import principals as directory
from engine.platform.errors import EngineError, Issue, NotFound, ValidationFailed
from engine.runs import service as runs
from engine.workflows import service as workflows

START_ID = "run-start"

_STEP_PATH = re.compile(r"^/definition/steps/(\d+)")


class StartRunForm(msgspec.Struct):
    subject: str = ""
    organization_id: str = ""


async def definition_steps(db_session: DbSession, realm_id: str, workflow_id: str, number: int) -> list[dict[str, Any]]:
    try:
        revision = await workflows.get_revision(db_session, realm_id, workflow_id, number)
    except NotFound:
        return []
    steps = revision.definition.get("steps", [])
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


class RunStartPages(Controller):
    path = "/realms/{realm:str}"
    include_in_schema = False

    # --- Starting by hand -------------------------------------------------------------------------

    async def _start_form(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        *,
        status_code: int = 200,
        form: dict[str, str] | None = None,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        people_page = await directory.list_users(db_session, realm_id, status="active", limit=PICKER_LIMIT)
        orgs = await organizations.list_organizations(db_session, realm_id, state="active", limit=PICKER_LIMIT)
        template = "pages/runs/_start_form.html" if targets(request, START_ID) else "pages/runs/start.html"
        return page(
            request,
            template,
            nav="workflows",
            status_code=status_code,
            workflow=workflow,
            start={
                "users": sorted(people_page.items, key=lambda u: u.email),
                "organizations": sorted(orgs.items, key=lambda o: o.name.lower()),
                "form": form or {"subject": "", "organization_id": ""},
            },
            **context,
        )

    @get("/workflows/{workflow_id:str}/runs/start", operation_id="runStartPage", opt=RUN)
    async def start_page(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        return await self._start_form(request, db_session, principal, workflow_id)

    @post("/workflows/{workflow_id:str}/runs/start", operation_id="runPageStart", opt=RUN, status_code=303)
    async def start(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[StartRunForm],
    ) -> Response[Any]:
        subject = data.subject.strip()[:254]
        organization_id = data.organization_id.strip()
        form = {"subject": subject, "organization_id": organization_id}
        realm_id = principal.realm.id
        subject_id = subject
        subject_issue: Issue | None = None
        if not subject:
            subject_issue = Issue("/subject_id", "required", "Give the subject's email or user id.")
        elif "@" in subject:
            user = await identity.user_by_email(db_session, realm_id, subject)
            subject_id = user.id if user is not None else ""
            if user is None:
                subject_issue = Issue("/subject_id", "not_found", f"There is no user {subject} in this realm.")
        try:
            run = await runs.start_manual_run(
                db_session,
                principal.actor(request_id_of(request)),
                workflow_id,
                subject_id=subject_id,
                organization_id=organization_id or None,
            )
        except NotFound:
            raise
        except EngineError as exc:
            if isinstance(exc, ValidationFailed) and subject_issue is not None:
                others = [i for i in exc.issues if i.path != "/subject_id"]
                exc = ValidationFailed(exc.detail, issues=[subject_issue, *others])
            return await self._start_form(
                request,
                db_session,
                principal,
                workflow_id,
                status_code=exc.status,
                form=form,
                **await self._start_errors(db_session, realm_id, workflow_id, exc),
            )
        url = f"/realms/{principal.realm.slug}/runs/{run.id}?done=started"
        if targets(request, START_ID):
            # htmx follows a 303 by itself and would put the timeline into the form: navigate instead.
            return Response(content=b"", status_code=200, headers={"HX-Redirect": url})
        return Redirect(url, status_code=303)

    async def _start_errors(
        self, db_session: DbSession, realm_id: str, workflow_id: str, exc: EngineError
    ) -> dict[str, Any]:
        """The form's errors: fields by name, and the steps the starter's authority does not cover."""
        errors = form_errors(exc)
        fields: dict[str, str] = errors["field_errors"]
        if "subject_id" in fields:
            fields["subject"] = fields.pop("subject_id")
        step_errors: list[dict[str, Any]] = []
        step_issues = [(i, _STEP_PATH.match(i.path)) for i in exc.issues]
        if any(m for _, m in step_issues):
            workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
            steps = (
                await definition_steps(db_session, realm_id, workflow_id, workflow.published_revision)
                if workflow.published_revision
                else []
            )
            for issue, match in step_issues:
                if match is None:
                    continue
                index = int(match.group(1))
                step_id = str(steps[index].get("id")) if index < len(steps) else None
                step_errors.append(
                    {
                        "number": index + 1,
                        "step_id": step_id,
                        "path": issue.path,
                        "code": issue.code,
                        "message": issue.message,
                    }
                )
            fields.pop("definition", None)
        errors["step_errors"] = step_errors
        return errors
