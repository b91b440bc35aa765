"""Workflow runs (SPEC §5 "Runs"): manual start, list, timeline, cancel, re-run, retry now, bulk."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.runs import approval_views, approvals, read_models, run_reads, views
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs.models import WorkflowRun


class StartRun(Body):
    subject_id: str
    organization_id: str | None = None


class CancelRun(Body):
    reason: str | None = None


class BulkFilter(Body):
    workflow_id: str | None = None
    state: str | None = None
    state_group: str | None = None
    subject_id: str | None = None
    trigger_type: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    organization_id: str | None = None
    starter_id: str | None = None


class BulkRequest(Body):
    action: str
    ids: list[str] | None = None
    filter: BulkFilter | None = None
    reason: str | None = None


class ManualRunsController(Controller):
    path = REALM_BASE + "/workflows/{workflow_id:str}/runs"
    tags = ["runs"]

    @post(
        "/",
        operation_id="startWorkflowRun",
        status_code=202,
        opt={"permission": "realm.workflows.run", "location": "/workflow-runs/{id}"},
    )
    async def start(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        data: JSONBody[StartRun],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.RunWithAttempts:
        """Start a run by hand for one subject; it runs asynchronously (202)."""
        run = await runs.start_manual_run(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            subject_id=data.subject_id,
            organization_id=data.organization_id,
        )
        return views.run_with_attempts(run, [], [])


async def run_approvals(session: DbSession, run: WorkflowRun) -> list[read_models.Approval]:
    return [approval_views.approval_view(a) for a in await approvals.for_run(session, run.id)]


async def run_document(session: DbSession, run: WorkflowRun) -> read_models.RunWithAttempts:
    """A run with its attempts, what was undone and its approvals (the ``Approval`` shape, as everywhere)."""
    return views.run_with_attempts(
        run, await run_reads.run_attempts(session, run.id), await run_approvals(session, run)
    )


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
        state_group: FromQuery[str | None] = None,
        trigger_type: FromQuery[str | None] = None,
        created_after: FromQuery[datetime | None] = None,
        created_before: FromQuery[datetime | None] = None,
        organization_id: FromQuery[str | None] = None,
        starter_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.WorkflowRunPage:
        """Newest first.

        ``state_group``: ``failed_any`` (failed, compensated, compensation_failed), ``in_flight`` or
        ``finished``; ``trigger_type``: manual, event or schedule; ``created_after``/``created_before``;
        ``organization_id``; ``starter_id`` (who started it by hand).
        """
        page = await run_reads.list_runs(
            db_session,
            principal.realm.id,
            workflow_id=workflow_id,
            state=run_state,
            subject_id=subject_id,
            cursor=cursor,
            limit=limit,
            where=run_reads.RunFilter(
                state_group=state_group,
                trigger_type=trigger_type,
                created_after=created_after,
                created_before=created_before,
                organization_id=organization_id,
                starter_id=starter_id,
            ),
        )
        return read_models.WorkflowRunPage(items=[views.run_view(r) for r in page.items], next_cursor=page.next_cursor)

    @get("/{run_id:str}", operation_id="getWorkflowRun", opt={"permission": "realm.workflows.read", "reads_only": True})
    async def show(
        self, run_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.RunTimeline:
        """The run's timeline: every attempt, what was undone, its approvals and re-runs."""
        run = await run_reads.get_run(db_session, principal.realm.id, run_id)
        return views.run_timeline(
            run,
            await run_reads.run_attempts(db_session, run.id),
            await run_approvals(db_session, run),
            next_attempt_at=run_reads.next_attempt_at(run),
            reruns=await run_reads.reruns_of(db_session, principal.realm.id, run.id),
        )

    @post(
        "/{run_id:str}/cancel",
        operation_id="cancelWorkflowRun",
        status_code=202,
        opt={"permission": "realm.workflows.run", "location": "/workflow-runs/{id}"},
    )
    async def cancel(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[CancelRun | None] = None,
    ) -> read_models.RunWithAttempts:
        """Ask the run to stop: it compensates like a failure and ends cancelled."""
        run = await runs.cancel_run(
            db_session, principal.actor(request_id_of(request)), run_id, reason=data.reason if data else None
        )
        return await run_document(db_session, run)

    @post(
        "/{run_id:str}/rerun",
        operation_id="rerunWorkflowRun",
        status_code=202,
        opt={"permission": "realm.workflows.run", "location": "/workflow-runs/{id}"},
    )
    async def rerun(
        self, request: AnyRequest, run_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.RunWithAttempts:
        """Start a new run of the published revision for the same subject and organization (links both ways)."""
        run = await run_controls.rerun_run(db_session, principal.actor(request_id_of(request)), run_id)
        return views.run_with_attempts(run, [], [])

    @post(
        "/{run_id:str}/retry-now",
        operation_id="retryWorkflowRunNow",
        status_code=202,
        opt={"permission": "realm.workflows.run", "location": "/workflow-runs/{id}"},
    )
    async def retry_now(
        self, request: AnyRequest, run_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.RunWithAttempts:
        """Make a run that waits for a retry due now (409 ``nothing_waits`` when it waits for none)."""
        run = await run_controls.retry_now(db_session, principal.actor(request_id_of(request)), run_id)
        return views.run_with_attempts(
            run,
            await run_reads.run_attempts(db_session, run.id),
            await run_approvals(db_session, run),
            next_attempt_at=run_reads.next_attempt_at(run),
        )

    @post("/bulk", operation_id="bulkWorkflowRuns", status_code=200, opt={"permission": "realm.workflows.run"})
    async def bulk(
        self, request: AnyRequest, data: JSONBody[BulkRequest], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.BulkOutcome:
        """Cancel or re-run up to 1,000 runs (by ids or by a filter): one result per run, done or refused."""
        where = None
        if data.filter is not None:
            f = data.filter
            where = run_reads.RunFilter(
                workflow_id=f.workflow_id,
                state=f.state,
                state_group=f.state_group,
                subject_id=f.subject_id,
                trigger_type=f.trigger_type,
                created_after=f.created_after,
                created_before=f.created_before,
                organization_id=f.organization_id,
                starter_id=f.starter_id,
            )
        return await run_controls.bulk_action(
            db_session,
            principal.actor(request_id_of(request)),
            data.action,
            ids=data.ids,
            where=where,
            reason=data.reason,
        )
