"""Revisions: the list (``pages/workflows/revisions.html``), one revision (``revision.html``) with
its diff (``_diff.html``, also alone for ``HX-Target: revision-diff``), and the review actions.

A revision's page compares it with the published revision (or any other, ``?against=``), step
by step and line by line, and offers the decisions its status allows: approve, reject, publish,
roll back. Service errors (separation of duties, approval required, the delegation ceiling with
the steps it names, conflicts) are shown on the page with the API's codes and paths.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.names import ids_in
from cockpit.pages.common import PICKER_LIMIT, field, may, no_user_with, page, person_named, subject_id_of, targets
from cockpit.pages.workflows.diff import default_against, side_by_side
from cockpit.pages.workflows.editor_text import EditorIssue, place
from cockpit.pages.workflows.shared import PUBLISH, READ, RUN, as_authored, compact, display_names, flash_of
from cockpit.state import AnyRequest, DbSession, context_of, preview_settings
from engine.directory import organizations
from engine.platform.errors import EngineError, NotFound, invalid
from engine.runs.preview import preview_run
from engine.workflows import publication as workflow_publication
from engine.workflows.definitions import authored_json
from engine.workflows.definitions.diff import line_diff, structured_diff
from engine.workflows.lookup import get_revision, get_workflow
from engine.workflows.publication import approval_needed, publish_revision
from engine.workflows.revisions import decide_revision, list_revisions

DIFF_ID = "revision-diff"


def action_error(exc: EngineError, definition: Any | None = None) -> dict[str, Any]:
    """A service error as the revision page shows it: the API's code, detail and paths."""
    text = authored_json(definition) if definition is not None else ""
    issues = place(exc.issues, text) if text else tuple(EditorIssue(i.path, i.code, i.message) for i in exc.issues)
    return {"status": exc.status, "code": exc.code, "detail": exc.detail, "issues": issues}


class WorkflowRevisionPages(Controller):
    path = "/realms/{realm:str}/workflows"
    include_in_schema = False

    # --- Revisions --------------------------------------------------------------------------------

    @get("/{workflow_id:str}/revisions", operation_id="workflowRevisionsPage", opt=READ)
    async def revisions(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await get_workflow(db_session, realm_id, workflow_id)
        revisions = await list_revisions(db_session, realm_id, workflow.id)
        names = await display_names(
            db_session, principal.realm, [r.author_id for r in revisions] + [r.decided_by for r in revisions]
        )
        return page(
            request,
            "pages/workflows/revisions.html",
            nav="workflows",
            workflow=workflow,
            approval_needed=await approval_needed(db_session, workflow),
            revisions=revisions,
            names=names,
            can_write=may(principal, "realm.workflows.write"),
        )

    async def _revision(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        number: int,
        *,
        against: int | None = None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await get_workflow(db_session, realm_id, workflow_id)
        await db_session.refresh(workflow)  # current values, also after a change that was undone
        revision = await get_revision(db_session, realm_id, workflow.id, number)
        await db_session.refresh(revision)
        all_revisions = await list_revisions(db_session, realm_id, workflow.id)
        compare_to = against if against is not None else default_against(workflow, number)
        diff: dict[str, Any] | None = None
        other_definition: Any = None
        if compare_to is not None:
            other = await get_revision(db_session, realm_id, workflow.id, compare_to)
            diff = {
                "against": compare_to,
                "against_status": other.status,
                "structured": structured_diff(other.definition, revision.definition),
                "rows": side_by_side(line_diff(other.definition, revision.definition)),
            }
            other_definition = other.definition
        definition_text = authored_json(as_authored(revision))
        fragment = targets(request, DIFF_ID)
        names = await display_names(
            db_session,
            principal.realm,
            [
                revision.author_id,
                revision.decided_by,
                revision.published_by,
                *ids_in(revision.definition),
                *ids_in(other_definition),
            ],
        )
        context.setdefault("flash", flash_of(request))
        can_run = may(principal, "realm.workflows.run")
        if can_run and not fragment:  # the preview form offers the realm's organizations by name
            found = await organizations.list_organizations(db_session, realm_id, state="active", limit=PICKER_LIMIT)
            context["preview_organizations"] = sorted(found.items, key=lambda o: o.name.lower())
        return page(
            request,
            "pages/workflows/_diff.html" if fragment else "pages/workflows/revision.html",
            nav="workflows",
            status_code=status_code,
            workflow=workflow,
            approval_needed=await approval_needed(db_session, workflow),
            revision=revision,
            revisions=all_revisions,
            diff=diff,
            definition_lines=definition_text.splitlines(),
            names=names,
            is_author=revision.author_id == principal.id,
            can_publish=may(principal, "realm.workflows.publish"),
            can_write=may(principal, "realm.workflows.write"),
            can_run=can_run,
            compact=compact,
            **context,
        )

    @post("/{workflow_id:str}/revisions/{n:int}/preview", operation_id="workflowRevisionPagePreview", opt=RUN)
    async def preview(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Template:
        """The revision's page with what a run of it would do to one person (writes nothing)."""
        form = await request.form()
        subject, organization_id = field(form, "subject").strip()[:254], field(form, "organization_id").strip()
        shown = {"subject": subject, "organization_id": organization_id}
        try:
            subject_id = await subject_id_of(db_session, principal.realm.id, subject)
            if subject_id is None:
                raise invalid("/subject_id", no_user_with(subject), "not_found")
            found = await preview_run(
                db_session,
                principal.actor(request_id_of(request)),
                workflow_id,
                subject_id=subject_id,
                organization_id=organization_id or None,
                revision_number=n,
                settings=preview_settings(context_of(request.app).settings),
            )
        except NotFound:
            raise  # the workflow or the revision
        except EngineError as exc:
            return await self._revision(
                request,
                db_session,
                principal,
                workflow_id,
                n,
                status_code=exc.status,
                preview_error=exc,
                preview_form=shown,
            )
        return await self._revision(
            request,
            db_session,
            principal,
            workflow_id,
            n,
            run_preview=found,
            preview_form=shown,
            preview_person=await person_named(db_session, principal.realm.id, subject_id),
        )

    @get("/{workflow_id:str}/revisions/{n:int}", operation_id="workflowRevisionPage", opt=READ)
    async def revision(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
        against: FromQuery[int | None] = None,
    ) -> Template:
        return await self._revision(request, db_session, principal, workflow_id, n, against=against)

    async def _decide(
        self, request: AnyRequest, workflow_id: str, number: int, db_session: DbSession, principal: Principal, verb: str
    ) -> Response[Any]:
        realm_id = principal.realm.id
        workflow = await get_workflow(db_session, realm_id, workflow_id)
        revision = await get_revision(db_session, realm_id, workflow.id, number)
        definition = as_authored(revision)
        comment = field(await request.form(), "comment").strip() or None
        actor = principal.actor(request_id_of(request))
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                if verb in ("approve", "reject"):
                    await decide_revision(
                        db_session, actor, workflow.id, number, approve=verb == "approve", comment=comment
                    )
                elif verb == "publish":
                    await publish_revision(db_session, actor, workflow.id, number, comment=comment)
                else:
                    await workflow_publication.rollback(db_session, actor, workflow.id, number)
        except EngineError as exc:
            return await self._revision(
                request,
                db_session,
                principal,
                workflow.id,
                number,
                status_code=exc.status,
                action=verb,
                action_error=action_error(exc, definition),
                comment=comment or "",
            )
        done = {"approve": "approved", "reject": "rejected", "publish": "published", "rollback": "rolled-back"}[verb]
        return Redirect(
            f"/realms/{principal.realm.slug}/workflows/{workflow.id}/revisions/{number}?done={done}", status_code=303
        )

    @post("/{workflow_id:str}/revisions/{n:int}/approve", operation_id="workflowRevisionPageApprove", opt=PUBLISH)
    async def approve(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "approve")

    @post("/{workflow_id:str}/revisions/{n:int}/reject", operation_id="workflowRevisionPageReject", opt=PUBLISH)
    async def reject(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "reject")

    @post("/{workflow_id:str}/revisions/{n:int}/publish", operation_id="workflowRevisionPagePublish", opt=PUBLISH)
    async def publish(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "publish")

    @post("/{workflow_id:str}/revisions/{n:int}/rollback", operation_id="workflowRevisionPageRollback", opt=PUBLISH)
    async def rollback(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "rollback")
