"""Workflow runs (SPEC §5 "Runs"): manual start, list, timeline, cancel."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit.api.common import REALM_BASE, Body, page_view
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.runs import service as runs


class StartRun(Body):
    subject_id: str
    organization_id: str | None = None


class CancelRun(Body):
    reason: str | None = None


class ManualRunsController(Controller):
    path = REALM_BASE + "/workflows/{workflow_id:str}/runs"
    tags = ["runs"]

    @post("/", operation_id="startWorkflowRun", status_code=202, opt={"permission": "realm.workflows.run"})
    async def start(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        data: JSONBody[StartRun],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> dict[str, Any]:
        """Start a run by hand for one subject; it runs asynchronously (202)."""
        run = await runs.start_manual_run(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            subject_id=data.subject_id,
            organization_id=data.organization_id,
        )
        return runs.run_view(run, [])


class RunsController(Controller):
    path = REALM_BASE + "/workflow-runs"
    tags = ["runs"]

    @get("/", operation_id="listWorkflowRuns", opt={"permission": "realm.workflows.read", "reads_only": True})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        workflow_id: FromQuery[str | None] = None,
        run_state: Annotated[str | None, QueryParameter(name="state")] = None,
        subject_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> dict[str, Any]:
        page = await runs.list_runs(
            db_session,
            principal.realm.id,
            workflow_id=workflow_id,
            state=run_state,
            subject_id=subject_id,
            cursor=cursor,
            limit=limit,
        )
        return page_view(page, runs.run_view)

    @get("/{run_id:str}", operation_id="getWorkflowRun", opt={"permission": "realm.workflows.read", "reads_only": True})
    async def show(self, run_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal) -> dict[str, Any]:
        run = await runs.get_run(db_session, principal.realm.id, run_id)
        out = runs.run_view(run, await runs.run_attempts(db_session, run.id))
        out["next_attempt_at"] = runs.next_attempt_at(run)
        return out

    @post(
        "/{run_id:str}/cancel",
        operation_id="cancelWorkflowRun",
        status_code=202,
        opt={"permission": "realm.workflows.run"},
    )
    async def cancel(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[CancelRun | None] = None,
    ) -> dict[str, Any]:
        """Ask the run to stop: it compensates like a failure and ends cancelled."""
        run = await runs.cancel_run(
            db_session, principal.actor(request_id_of(request)), run_id, reason=data.reason if data else None
        )
        return runs.run_view(run, await runs.run_attempts(db_session, run.id))
