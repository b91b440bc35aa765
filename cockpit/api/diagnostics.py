"""Diagnostics of a workflow, and the realm's runs that need a person (SPEC §5, seed 000 "Diagnostics").

The response types are declared as structs so the OpenAPI document states their shape.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit import health_cache
from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.runs import attention, diagnostics
from engine.runs.read_models import Resolution, WorkflowDiagnostics


class LeftToUndoLine(msgspec.Struct):
    attempt_id: str
    step_id: str
    step_type: str
    strategy: str
    compensation_state: str
    compensation_attempts: int
    last_error: str | None


class ResolutionLine(msgspec.Struct):
    resolved_by: str | None
    resolved_at: str
    note: str | None


class AttentionLine(msgspec.Struct):
    run_id: str
    workflow_id: str
    subject_id: str
    error_category: str | None
    finished_at: str | None
    left_to_undo: list[LeftToUndoLine]
    resolution: ResolutionLine | None


class AttentionPage(msgspec.Struct):
    items: list[AttentionLine]
    next_cursor: str | None


class ResolveRun(Body):
    note: str


def attention_line(run: attention.AttentionRun) -> AttentionLine:
    return AttentionLine(
        run_id=run.id,
        workflow_id=run.workflow_id,
        subject_id=run.subject_id,
        error_category=run.error_category,
        finished_at=run.finished_at.isoformat() if run.finished_at else None,
        left_to_undo=[
            LeftToUndoLine(
                attempt_id=left.attempt_id,
                step_id=left.step_id,
                step_type=left.step_type,
                strategy=left.strategy,
                compensation_state=left.compensation_state,
                compensation_attempts=left.compensation_attempts,
                last_error=left.last_error,
            )
            for left in run.left
        ],
        resolution=None
        if run.resolved_at is None
        else ResolutionLine(resolved_by=run.resolved_by, resolved_at=run.resolved_at.isoformat(), note=run.note),
    )


class DiagnosticsController(Controller):
    path = REALM_BASE
    tags = ["diagnostics"]

    @get(
        "/workflows/{workflow_id:str}/diagnostics",
        operation_id="getWorkflowDiagnostics",
        opt={"permission": "realm.workflows.read", "reads_only": True},
    )
    async def show(
        self, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> WorkflowDiagnostics:
        """Health, runs by state, failure categories per step, recent attempts and failures, p50/p95."""
        found = await diagnostics.workflow_diagnostics(db_session, principal.realm.id, workflow_id)
        health_cache.remember(principal.realm.id, workflow_id, found.health)
        return found.view()

    @get(
        "/needs-attention",
        operation_id="listRunsNeedingAttention",
        opt={"permission": "realm.workflows.read", "reads_only": True},
    )
    async def attention(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        show: Annotated[str, QueryParameter(name="show")] = "open",
        cursor: FromQuery[str | None] = None,
    ) -> AttentionPage:
        """Runs that ended ``compensation_failed``, with what is left to undo by hand (``show=open|resolved|all``)."""
        runs, next_cursor = await attention.needs_attention(db_session, principal.realm.id, show=show, cursor=cursor)
        return AttentionPage(items=[attention_line(r) for r in runs], next_cursor=next_cursor)

    @post(
        "/workflow-runs/{run_id:str}/resolve",
        operation_id="resolveWorkflowRun",
        status_code=200,
        opt={"permission": "realm.workflows.run"},
    )
    async def resolve(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        data: JSONBody[ResolveRun],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Resolution:
        """Mark a ``compensation_failed`` run resolved, with a note on what was undone by hand (audited)."""
        resolution = await attention.resolve_run(
            db_session, principal.actor(request_id_of(request)), run_id, note=data.note
        )
        health_cache.forget(principal.realm.id)
        return attention.resolution_view(resolution)
