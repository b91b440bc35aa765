"""One workflow (``pages/workflows/detail.html``): its state, schedules, health and revisions, and
the controls that change its state (``_state.html``): enable, disable, delete."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import may, page, targets
from cockpit.pages.workflows.shared import PUBLISH, READ, WRITE, display_names, flash_of
from cockpit.state import AnyRequest, DbSession
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import EngineError
from engine.runs import controls as run_controls
from engine.runs import schedules
from engine.workflows import publication as workflow_publication
from engine.workflows.catalog import delete_workflow
from engine.workflows.lookup import get_workflow
from engine.workflows.references import validate_for_realm
from engine.workflows.revisions import list_revisions

STATE_ID = "workflow-state"


class WorkflowPages(Controller):
    path = "/realms/{realm:str}/workflows"
    include_in_schema = False

    # --- One workflow -----------------------------------------------------------------------------

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await get_workflow(db_session, realm_id, workflow_id)
        await db_session.refresh(workflow)  # current values, also after a change that was undone
        approval_needed = await workflow_publication.approval_needed(db_session, workflow)
        can_write = may(principal, "realm.workflows.write")
        can_publish = may(principal, "realm.workflows.publish")
        if targets(request, STATE_ID):
            return page(
                request,
                "pages/workflows/_state.html",
                nav="workflows",
                status_code=status_code,
                workflow=workflow,
                approval_needed=approval_needed,
                can_write=can_write,
                can_publish=can_publish,
                **context,
            )
        revisions = await list_revisions(db_session, realm_id, workflow.id)
        names = await display_names(
            db_session,
            principal.realm,
            [workflow.owner_id, workflow.created_by]
            + [r.author_id for r in revisions]
            + [r.decided_by for r in revisions],
        )
        context.setdefault("flash", flash_of(request))
        published = next((r for r in revisions if r.number == workflow.published_revision), None)
        schedule_lines = await schedules.schedule_status(db_session, workflow, published, SYSTEM_CLOCK.now())
        # Health: what the published revision names must still be there, or its runs fail at that step.
        health = (
            [i for i in await validate_for_realm(db_session, realm_id, published.definition)]
            if published is not None and workflow.state != "deleted"
            else []
        )
        return page(
            request,
            "pages/workflows/detail.html",
            health_issues=health,
            nav="workflows",
            status_code=status_code,
            revisions=revisions,
            names=names,
            schedules=schedule_lines,
            schedule_names=await schedules.selector_names(db_session, realm_id, [s.selector for s in schedule_lines]),
            workflow=workflow,
            approval_needed=approval_needed,
            can_write=can_write,
            can_publish=can_publish,
            **context,
        )

    @get("/{workflow_id:str}", operation_id="workflowPage", opt=READ)
    async def detail(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        return await self._detail(request, db_session, principal, workflow_id)

    async def _set_enabled(
        self, request: AnyRequest, workflow_id: str, db_session: DbSession, principal: Principal, enabled: bool
    ) -> Response[Any]:
        await get_workflow(db_session, principal.realm.id, workflow_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                workflow = await run_controls.set_workflow_enabled(
                    db_session, principal.actor(request_id_of(request)), workflow_id, enabled
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, workflow_id, status_code=exc.status, state_error=exc.detail
            )
        if targets(request, STATE_ID):
            done = "Enabled." if enabled else "Disabled: nothing fires, and runs in flight pause."
            return await self._detail(request, db_session, principal, workflow.id, state_flash=done)
        return Redirect(f"/realms/{principal.realm.slug}/workflows/{workflow.id}", status_code=303)

    @post("/{workflow_id:str}/enable", operation_id="workflowPageEnable", opt=PUBLISH)
    async def enable(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        return await self._set_enabled(request, workflow_id, db_session, principal, True)

    @post("/{workflow_id:str}/disable", operation_id="workflowPageDisable", opt=WRITE)
    async def disable(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        return await self._set_enabled(request, workflow_id, db_session, principal, False)

    @post("/{workflow_id:str}/delete", operation_id="workflowPageDelete", opt=PUBLISH, status_code=303)
    async def remove(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        try:  # an unknown workflow: the engine's look-up refuses it (404), and the page drawn for it too
            async with db_session.begin_nested():  # an error undoes only this change
                await delete_workflow(db_session, principal.actor(request_id_of(request)), workflow_id)
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, workflow_id, status_code=exc.status, error=exc.detail
            )
        return Redirect(f"/realms/{principal.realm.slug}/workflows?done=deleted", status_code=303)
