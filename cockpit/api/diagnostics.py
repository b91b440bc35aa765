"""Diagnostics of a workflow, and the realm's runs that need a person (SPEC §5, seed 000 "Diagnostics").

The answers are the engine's read models (``engine/runs/read_models.py``).
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit import health_cache
from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.runs import attention, diagnostics
from engine.runs.read_models import AttentionPage, Resolution, WorkflowDiagnostics


class ResolveRun(Body):
    note: str


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
        return AttentionPage(items=[attention.attention_view(r) for r in runs], next_cursor=next_cursor)

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
        resolution = await health_cache.resolve_run(
            db_session, principal.actor(request_id_of(request)), run_id, note=data.note
        )
        return attention.resolution_view(resolution)
