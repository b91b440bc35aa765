"""Starting a run by hand (``pages/runs/start.html``; the form ``_start_form.html``).

The form lives on the workflow's page: a placeholder there loads it from
``…/workflows/{id}/runs/start`` (a full page without JavaScript). Errors of the service
(``self_action``, ``forbidden`` with the steps it names, a workflow that is not active, fields)
are shown in the form; a run that started opens its timeline.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import (
    PICKER_LIMIT,
    field,
    form_errors,
    no_user_with,
    page,
    person_named,
    subject_id_of,
    targets,
)
from cockpit.pages.runs.shared import RUN
from cockpit.state import AnyRequest, DbSession, context_of, preview_settings
from engine.directory import organizations
from engine.directory import principals as directory
from engine.directory.accounts import user_by_email
from engine.directory.models import Organization, User
from engine.platform.errors import EngineError, Issue, NotFound, ValidationFailed
from engine.runs import service as runs
from engine.runs.preview import WOULD_FAIL, preview_run
from engine.runs.read_models import PreviewStep, RunPreview
from engine.workflows.lookup import get_revision, get_workflow
from engine.workflows.models import Workflow

START_ID = "run-start"


@dataclass(frozen=True)
class StartChoices:
    """What a start form offers: the workflow, the active people by email and the active organizations by name."""

    workflow: Workflow
    users: list[User]
    organizations: list[Organization]


async def start_choices(db_session: DbSession, realm_id: str, workflow_id: str) -> StartChoices:
    """The choices of both start forms (one person, several people), each list cut at PICKER_LIMIT."""
    workflow = await get_workflow(db_session, realm_id, workflow_id)
    people_page = await directory.list_users(db_session, realm_id, status="active", limit=PICKER_LIMIT)
    orgs = await organizations.list_organizations(db_session, realm_id, state="active", limit=PICKER_LIMIT)
    return StartChoices(
        workflow,
        sorted(people_page.items, key=lambda u: u.email),
        sorted(orgs.items, key=lambda o: o.name.lower()),
    )


_STEP_PATH = re.compile(r"^/definition/steps/(\d+)")


async def many_form(request: AnyRequest) -> tuple[dict[str, Any], list[str]]:
    """The form of a start for several people, and its entries in order: the user ids ticked in the
    list (``picked``), then the emails or ids typed (``people``)."""
    data = await request.form()
    picked = [v for v in data.getall("picked", []) if isinstance(v, str) and v][:100]
    people = field(data, "people")
    form = {"people": people, "picked": picked, "organization_id": field(data, "organization_id").strip()}
    return form, picked + people_of(people)


_PEOPLE_SPLIT = re.compile(r"[\s,;]+")


def people_of(text: str) -> list[str]:
    """The entries of the people field, in order, as typed (emails or ids)."""
    return [p for p in _PEOPLE_SPLIT.split(text.strip()[:20_000]) if p][:100]


class StartRunForm(msgspec.Struct):
    subject: str = ""
    organization_id: str = ""
    confirm: str = ""  # "yes": start although the preview says a step will fail
    submission: str = ""  # the form's one-time key: sent twice, it starts one run


def certain_failure(preview: RunPreview) -> PreviewStep | None:
    """The step a previewed run is certain to fail at (a permanent refusal), or None."""
    for step in preview.steps:
        if step.outcome == WOULD_FAIL and step.refusal is not None and step.refusal.permanent:
            return step
    return None


async def subject_of(db_session: DbSession, realm_id: str, subject: str) -> tuple[str, Issue | None]:
    """The user id a form's subject names (an email or an id), and the field's issue when none."""
    if not subject:
        return "", Issue("/subject_id", "required", "Give the subject's email or user id.")
    subject_id = await subject_id_of(db_session, realm_id, subject)
    if subject_id is None:
        return "", Issue("/subject_id", "not_found", no_user_with(subject))
    return subject_id, None


async def definition_steps(db_session: DbSession, realm_id: str, workflow_id: str, number: int) -> list[dict[str, Any]]:
    try:
        revision = await get_revision(db_session, realm_id, workflow_id, number)
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
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        choices = await start_choices(db_session, principal.realm.id, workflow_id)
        template = "pages/runs/_start_form.html" if targets(request, START_ID) else "pages/runs/start.html"
        return page(
            request,
            template,
            nav="workflows",
            status_code=status_code,
            workflow=choices.workflow,
            start={
                "users": choices.users,
                "organizations": choices.organizations,
                "form": form or {"subject": "", "organization_id": ""},
                # One key per rendered form: the same form sent twice starts one run.
                "submission": secrets.token_hex(13),
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
        subject_id, subject_issue = await subject_of(db_session, realm_id, subject)
        try:
            if subject_issue is None and data.confirm != "yes":
                # Previewed before it starts: a run certain to fail starts only once confirmed.
                found = await self._preview(request, db_session, principal, workflow_id, subject_id, organization_id)
                failing = certain_failure(found)
                if failing is not None:
                    return await self._start_form(
                        request,
                        db_session,
                        principal,
                        workflow_id,
                        status_code=409,
                        form=form,
                        run_preview=found,
                        preview_person=await person_named(db_session, realm_id, subject_id),
                        confirm_failure=failing,
                    )
            run = await runs.start_manual_run(
                db_session,
                principal.actor(request_id_of(request)),
                workflow_id,
                subject_id=subject_id,
                organization_id=organization_id or None,
                submission=data.submission.strip() or None,
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

    async def _preview(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        subject_id: str,
        organization_id: str,
    ) -> RunPreview:
        return await preview_run(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            subject_id=subject_id,
            organization_id=organization_id or None,
            revision_number=None,
            settings=preview_settings(context_of(request.app).settings),
        )

    @post("/workflows/{workflow_id:str}/runs/start/preview", operation_id="runPagePreview", opt=RUN, status_code=200)
    async def preview(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[StartRunForm],
    ) -> Template:
        """The start form with what the run would do to the chosen person (writes nothing)."""
        subject = data.subject.strip()[:254]
        organization_id = data.organization_id.strip()
        form = {"subject": subject, "organization_id": organization_id}
        subject_id, subject_issue = await subject_of(db_session, principal.realm.id, subject)
        try:
            if subject_issue is not None:
                raise ValidationFailed("The request is not valid.", issues=[subject_issue])
            found = await self._preview(request, db_session, principal, workflow_id, subject_id, organization_id)
        except NotFound:
            raise
        except EngineError as exc:
            return await self._start_form(
                request,
                db_session,
                principal,
                workflow_id,
                status_code=exc.status,
                form=form,
                **await self._start_errors(db_session, principal.realm.id, workflow_id, exc),
            )
        return await self._start_form(
            request,
            db_session,
            principal,
            workflow_id,
            form=form,
            run_preview=found,
            preview_person=await person_named(db_session, principal.realm.id, subject_id),
        )

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
            workflow = await get_workflow(db_session, realm_id, workflow_id)
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


class RunStartManyPages(Controller):
    """Starting a workflow for several people at once (``pages/runs/start_many.html``): up to
    ``runs.MANY_AT_ONCE`` people, a preview per person, then one result per person."""

    path = "/realms/{realm:str}"
    include_in_schema = False

    async def _page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        *,
        status_code: int = 200,
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        choices = await start_choices(db_session, principal.realm.id, workflow_id)
        return page(
            request,
            "pages/runs/start_many.html",
            nav="workflows",
            status_code=status_code,
            workflow=choices.workflow,
            limit=runs.MANY_AT_ONCE,
            users=choices.users,
            organizations=choices.organizations,
            form=form or {"people": "", "picked": [], "organization_id": ""},
            **context,
        )

    async def _people(self, db_session: DbSession, realm_id: str, entries: list[str]) -> list[dict[str, Any]]:
        """Each entry with the user it names (an email or an id), or None."""
        by_id = await directory.users_by_id(db_session, realm_id, [e for e in entries if "@" not in e])
        found = []
        for entry in entries:
            user = await user_by_email(db_session, realm_id, entry) if "@" in entry else by_id.get(entry)
            found.append({"entry": entry, "user": user, "subject_id": user.id if user is not None else entry})
        return found

    @get("/workflows/{workflow_id:str}/runs/start-many", operation_id="runStartManyPage", opt=RUN)
    async def start_many_page(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        return await self._page(request, db_session, principal, workflow_id)

    @post(
        "/workflows/{workflow_id:str}/runs/start-many/preview",
        operation_id="runStartManyPagePreview",
        opt=RUN,
        status_code=200,
    )
    async def preview_many(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Template:
        """What the run would do to each person (writes nothing)."""
        form, entries = await many_form(request)
        people = await self._people(db_session, principal.realm.id, entries)
        issues = runs.many_subjects_issues([p["subject_id"] for p in people])
        if issues:
            return await self._page(
                request, db_session, principal, workflow_id, status_code=422, form=form, people_error=issues[0].message
            )
        previews = []
        for person in people:
            try:
                found = await preview_run(
                    db_session,
                    principal.actor(request_id_of(request)),
                    workflow_id,
                    subject_id=person["subject_id"],
                    organization_id=form["organization_id"] or None,
                    revision_number=None,
                    settings=preview_settings(context_of(request.app).settings),
                )
            except NotFound:
                raise
            except EngineError as exc:
                previews.append({**person, "refused": _refusal(exc)})
            else:
                previews.append({**person, "preview": found, "failing": certain_failure(found)})
        return await self._page(request, db_session, principal, workflow_id, form=form, previews=previews)

    @post(
        "/workflows/{workflow_id:str}/runs/start-many", operation_id="runStartManyPageStart", opt=RUN, status_code=200
    )
    async def start_many(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Template:
        """One result per person: their run, or why it did not start."""
        form, entries = await many_form(request)
        people = await self._people(db_session, principal.realm.id, entries)
        try:
            started = await runs.start_manual_runs(
                db_session,
                principal.actor(request_id_of(request)),
                workflow_id,
                subject_ids=[p["subject_id"] for p in people],
                organization_id=form["organization_id"] or None,
            )
        except NotFound:
            raise
        except EngineError as exc:
            message = exc.issues[0].message if exc.issues else exc.detail
            return await self._page(
                request, db_session, principal, workflow_id, status_code=exc.status, form=form, people_error=message
            )
        results = [
            {**person, "run": result.run, "refused": _refusal(result.refused) if result.refused else None}
            for person, result in zip(people, started, strict=True)
        ]
        # Nothing started for anyone: the answer carries the (first) refusal's status.
        refusals = [r.refused for r in started if r.refused is not None]
        status_code = refusals[0].status if len(refusals) == len(started) else 200
        return await self._page(
            request, db_session, principal, workflow_id, status_code=status_code, form=form, results=results
        )


def _refusal(exc: EngineError) -> str:
    """Why a person's run did not start (or would not), in one sentence."""
    messages = [i.message for i in exc.issues]
    return "; ".join(messages) if messages else exc.detail
