"""One run: its timeline (``pages/runs/detail.html``), the poll fragment (``_timeline.html``) and
the controls (``_run_controls.html``): cancel, re-run, retry now.

The timeline shows the steps of the revision the run is pinned to, in order, with every attempt;
while the run has not finished it asks for itself again every two seconds (htmx, the same URL
with ``HX-Target: run-timeline``) and once it has finished it is rendered without the trigger,
so the polling stops by itself. Polling pauses while the cancel confirmation is open, and an
answer to a poll already in flight when it opened is dropped (``static/js/cockpit.js``), so the
reason being typed is never replaced.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, may, page, targets
from cockpit.pages.runs.shared import FLASHES, READ_ONLY, RUN, human_duration, people
from cockpit.pages.runs.timeline import (
    COMPENSATION_PHASE,
    cancellable,
    compensation_lines,
    paused,
    retry_waiting,
    step_lines,
)
from cockpit.state import AnyRequest, DbSession
from engine.directory import organizations
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import EngineError, NotFound
from engine.runs import approval_views, run_reads
from engine.runs import approvals as approval_records
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs.outcome import run_outcome, run_title, trigger_words
from engine.runs.states import ATTEMPT_FAILED, FINISHED

TIMELINE_ID = "run-timeline"
POLL_SECONDS = 2


class CancelRunForm(msgspec.Struct):
    reason: str = ""


class EmptyForm(msgspec.Struct):
    pass


class RunPages(Controller):
    path = "/realms/{realm:str}"
    include_in_schema = False

    # --- One run ----------------------------------------------------------------------------------

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        run_id: str,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        found = await run_reads.get_run_context(db_session, realm_id, run_id)
        run, workflow, steps = found.run, found.workflow, found.steps
        attempts = await run_reads.run_attempts(db_session, run.id)
        approvals = [approval_views.approval_view(a) for a in await approval_records.for_run(db_session, run.id)]
        users = await people(
            db_session,
            realm_id,
            [run.subject_id, run.publisher_id, run.starter_id, run.cancel_requested_by]
            + [a.decided_by or "" for a in approvals]
            + [p for a in approvals for p in a.approvers],
        )
        names = {k: u.display_name or u.email for k, u in users.items()}
        subject = users.get(run.subject_id)
        org_names = await organizations.organization_names(db_session, realm_id, [run.organization_id])
        finished = run.state in FINISHED
        context.setdefault("flash", FLASHES.get(request.query_params.get("done") or ""))
        template = "pages/runs/_timeline.html" if targets(request, TIMELINE_ID) else "pages/runs/detail.html"
        return page(
            request,
            template,
            nav="runs",
            status_code=status_code,
            run=run,
            workflow=workflow,
            title=run_title(workflow.name, (subject.display_name or subject.email) if subject else None),
            outcome=run_outcome(run, names, limit=None),
            trigger=trigger_words(
                run.trigger_type,
                starter=names.get(run.starter_id, "a former user") if run.starter_id else None,
                rerun=run.rerun_of is not None,
                event_type=str((run.input or {}).get("event_type") or "") or None,
                slot=str((run.input or {}).get("slot") or "") or None,
            ),
            steps=step_lines(run, steps, attempts),
            compensations=compensation_lines(attempts),
            compensation_started=run.state in COMPENSATION_PHASE or run.cancel_requested_at is not None,
            approvals=approvals,
            users=users,
            organization_name=org_names.get(run.organization_id or "", run.organization_id),
            finished=finished,
            duration=human_duration(run.created_at, run.finished_at if finished else SYSTEM_CLOCK.now()),
            next_attempt_at=run_reads.next_attempt_at(run),
            cancellable=cancellable(run),
            can_cancel=may(principal, "realm.workflows.run"),
            paused=paused(run, workflow),
            can_enable=may(principal, "realm.workflows.publish"),
            poll_seconds=POLL_SECONDS,
            reruns=found.reruns,
            retry_waiting=retry_waiting(run),
            last_failure=next((a for a in reversed(attempts) if a.state == ATTEMPT_FAILED), None),
            **context,
        )

    @get("/runs/{run_id:str}", operation_id="runPage", opt=READ_ONLY)
    async def detail(
        self, request: AnyRequest, run_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        return await self._detail(request, db_session, principal, run_id)

    @post("/runs/{run_id:str}/cancel", operation_id="runPageCancel", opt=RUN, status_code=303)
    async def cancel(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[CancelRunForm],
    ) -> Response[Any]:
        reason = data.reason.strip()
        try:
            await runs.cancel_run(db_session, principal.actor(request_id_of(request)), run_id, reason=reason or None)
        except NotFound:
            raise
        except EngineError as exc:
            return await self._detail(
                request,
                db_session,
                principal,
                run_id,
                status_code=exc.status,
                cancel_form={"reason": reason, "open": bool(exc.issues)},
                **form_errors(exc),
            )
        if targets(request, TIMELINE_ID):
            return await self._detail(request, db_session, principal, run_id, flash=FLASHES["cancel-requested"])
        return Redirect(f"/realms/{principal.realm.slug}/runs/{run_id}?done=cancel-requested", status_code=303)

    async def _control(
        self, request: AnyRequest, db_session: DbSession, principal: Principal, run_id: str, exc: EngineError
    ) -> Template:
        """The timeline with a refused control's message (409, 403) in place."""
        return await self._detail(
            request, db_session, principal, run_id, status_code=exc.status, error=exc.detail, error_code=exc.code
        )

    @post("/runs/{run_id:str}/rerun", operation_id="runPageRerun", opt=RUN, status_code=303)
    async def rerun(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[EmptyForm],
    ) -> Response[Any]:
        try:
            new = await run_controls.rerun_run(db_session, principal.actor(request_id_of(request)), run_id)
        except NotFound:
            raise
        except EngineError as exc:
            return await self._control(request, db_session, principal, run_id, exc)
        url = f"/realms/{principal.realm.slug}/runs/{new.id}?done=rerun-started"
        if targets(request, TIMELINE_ID):
            return Response(content=b"", status_code=200, headers={"HX-Redirect": url})
        return Redirect(url, status_code=303)

    @post("/runs/{run_id:str}/retry-now", operation_id="runPageRetryNow", opt=RUN, status_code=303)
    async def retry_now(
        self,
        request: AnyRequest,
        run_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[EmptyForm],
    ) -> Response[Any]:
        try:
            await run_controls.retry_now(db_session, principal.actor(request_id_of(request)), run_id)
        except NotFound:
            raise
        except EngineError as exc:
            return await self._control(request, db_session, principal, run_id, exc)
        if targets(request, TIMELINE_ID):
            return await self._detail(request, db_session, principal, run_id, flash=FLASHES["retry-now"])
        return Redirect(f"/realms/{principal.realm.slug}/runs/{run_id}?done=retry-now", status_code=303)
