"""Diagnostics pages: a workflow's health with its charts, and the realm's runs that need a person.

- ``/realms/{realm}/workflows/{id}/diagnostics``: health badge with its reason, runs by state,
  failure categories by step, run durations with p50/p95, recent failures linking to their runs,
  pending approvals and the oldest due run — drawn as server-rendered SVG.
- ``/realms/{realm}/attention``: the workflows whose health is degraded or worse (as the realm
  home lists them: a degraded one links to its diagnostics, a failed compensation to its run),
  then every run that ended ``compensation_failed``, with what is left to undo by hand (step,
  strategy, last error), and a form to mark it resolved with a note.

Permissions are those of the API: ``realm.workflows.read`` to read, ``realm.workflows.run`` to
mark a run resolved.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit import health_cache
from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages import charts
from cockpit.pages.common import form_errors, may, page
from cockpit.state import AnyRequest, DbSession
from engine.platform.errors import EngineError, NotFound
from engine.runs import attention, diagnostics
from engine.runs.retention import last_retention_cleanup

READ = {"permission": "realm.workflows.read"}
RUN = {"permission": "realm.workflows.run"}
ATTENTION_ID = "attention-list"

SHOW_LABELS = {"open": "Not resolved", "resolved": "Resolved", "all": "All"}
STRATEGY_WORDS = {
    "undo": "reverse the step's own effect (remove the role assignment or group membership it made)",
    "notify_endpoint": "tell the endpoint to compensate (call it again with action “compensate”)",
    "impossible": "cannot be undone automatically",
    "none": "nothing to undo",
}


class ResolveForm(msgspec.Struct):
    note: str = ""


class DiagnosticsPages(Controller):
    path = "/realms/{realm:str}"
    include_in_schema = False

    @get(
        "/workflows/{workflow_id:str}/diagnostics",
        operation_id="workflowDiagnosticsPage",
        opt=READ | {"reads_only": True},
    )
    async def workflow(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        diag = await diagnostics.workflow_diagnostics(db_session, principal.realm.id, workflow_id)
        health_cache.remember(principal.realm.id, workflow_id, diag.health)
        view = diag.view()
        return page(
            request,
            "pages/diagnostics/workflow.html",
            nav="workflows",
            diag=diag,
            retention=await last_retention_cleanup(db_session),
            d=view,
            labels=diagnostics.HEALTH_LABELS,
            over_time=charts.runs_over_time(diag),
            outcomes=charts.OUTCOMES,
            failures=charts.failure_chart(diag),
            durations=charts.duration_histogram(diag),
            human_ms=charts.human_ms,
        )

    async def _attention(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        show: str,
        cursor: str | None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        runs, next_cursor = await attention.needs_attention(db_session, realm_id, show=show, cursor=cursor)
        # The same workflows the realm home's attention card lists, so the two always agree.
        workflows, _open = await diagnostics.realm_attention(db_session, realm_id, health=health_cache.health_of)
        return page(
            request,
            "pages/diagnostics/attention.html",
            nav="attention",
            status_code=status_code,
            runs=runs,
            workflows=workflows,
            next_cursor=next_cursor,
            show=show,
            show_labels=SHOW_LABELS,
            strategy_words=STRATEGY_WORDS,
            can_resolve=may(principal, "realm.workflows.run"),
            **context,
        )

    @get("/attention", operation_id="needsAttentionPage", opt=READ | {"reads_only": True})
    async def attention(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        show: FromQuery[str] = "open",
        cursor: FromQuery[str | None] = None,
        done: FromQuery[str | None] = None,
    ) -> Template:
        if show not in attention.ATTENTION_FILTERS:
            show = "open"
        flash = (
            "Marked resolved. The run keeps its state; the note is in the audit log." if done == "resolved" else None
        )
        return await self._attention(request, db_session, principal, show=show, cursor=cursor, flash=flash)

    @post("/attention/{run_id:str}/resolve", operation_id="needsAttentionResolve", opt=RUN, status_code=303)
    async def resolve(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[ResolveForm],
    ) -> Response[Any]:
        try:
            await health_cache.resolve_run(db_session, principal.actor(request_id_of(request)), run_id, note=data.note)
        except NotFound:
            raise
        except EngineError as exc:
            return await self._attention(
                request,
                db_session,
                principal,
                show="open",
                cursor=None,
                status_code=exc.status,
                failed_run=run_id,
                note=data.note,
                **form_errors(exc),
            )
        return Redirect(f"/realms/{principal.realm.slug}/attention?done=resolved", status_code=303)
