"""Run pages: the runs of the realm or of one workflow, a run's timeline, cancelling, starting by hand.

The timeline shows the steps of the revision the run is pinned to, in order, with every attempt;
while the run has not finished it asks for itself again every two seconds (htmx, the same URL
with ``HX-Target: run-timeline``) and once it has finished it is rendered without the trigger,
so the polling stops by itself. Polling pauses while the cancel confirmation is open, and an
answer to a poll already in flight when it opened is dropped (``static/js/cockpit.js``), so the
reason being typed is never replaced.

The manual start form lives on the workflow's page: a placeholder there loads it from
``…/workflows/{id}/runs/start`` (a full page without JavaScript). Errors of the service
(``self_action``, ``forbidden`` with the steps it names, a workflow that is not active, fields)
are shown in the form; a run that started opens its timeline.

Permissions are those of the API: ``realm.workflows.read`` to read, ``realm.workflows.run`` to
start and cancel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, QueryParameter, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, page
from cockpit.state import AnyRequest, DbSession
from engine.directory import identity, organizations
from engine.directory import principals as directory
from engine.directory.identity import now as utc_now
from engine.directory.models import User
from engine.platform.errors import EngineError, Issue, NotFound, ValidationFailed
from engine.runs import approvals as approval_records
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_STARTED,
    ATTEMPT_SUCCEEDED,
    AWAITING_APPROVAL,
    CANCELLED,
    COMPENSATED,
    COMPENSATING,
    COMPENSATION_FAILED,
    FAILED,
    FINISHED,
    PENDING,
    RUN_STATES,
    RUNNING,
    WAITING,
)
from engine.workflows import service as workflows
from engine.workflows.models import Workflow

TABLE_ID = "runs-table"
TIMELINE_ID = "run-timeline"
START_ID = "run-start"
PICKER_LIMIT = 200
POLL_SECONDS = 2

READ = {"permission": "realm.workflows.read"}
READ_ONLY = READ | {"reads_only": True}  # pages that never write: no transaction control
RUN = {"permission": "realm.workflows.run"}

FLASHES = {
    "started": "Run started. It runs in the background; this page follows it.",
    "rerun-started": "Re-run started: a new run of the published revision for the same subject.",
    "retry-now": "The retry is due now: a worker takes the run within a second or two.",
    "cancel-requested": "Cancellation requested: the run undoes what it did and ends cancelled.",
}

# A run in one of these states has entered (or finished) undoing what it did.
COMPENSATION_PHASE = frozenset({COMPENSATING, FAILED, COMPENSATED, COMPENSATION_FAILED, CANCELLED})

_STEP_PATH = re.compile(r"^/definition/steps/(\d+)")


class StartRunForm(msgspec.Struct):
    subject: str = ""
    organization_id: str = ""


class CancelRunForm(msgspec.Struct):
    reason: str = ""


class EmptyForm(msgspec.Struct):
    pass


class BulkForm(msgspec.Struct):
    """The runs list's bulk form, and each follow-up request while it works through its runs."""

    action: str = ""
    scope: str = "selected"  # selected | filter
    ids: list[str] = msgspec.field(default_factory=list)
    reason: str = ""
    state: str = ""
    workflow_id: str = ""
    subject: str = ""
    trigger_type: str = ""
    created_after: str = ""
    created_before: str = ""
    pending: str = ""  # run ids still to do, comma-separated (follow-up requests)
    total: int = 0
    matched: int = 0
    done: int = 0
    refused: int = 0


BULK_CHUNK = 50
STATE_GROUP_PREFIX = "group:"
STATE_GROUP_LABELS = {
    "failed_any": "Failed in any way (incl. compensated)",
    "in_flight": "In flight (not finished)",
    "finished": "Finished",
}
TRIGGER_LABELS = {"manual": "Manual (or re-run)", "event": "Event", "schedule": "Schedule"}


def parse_time(value: str) -> datetime | None:
    """A ``datetime-local`` value (read as UTC) or ISO 8601; None when empty, ValueError when not a time."""
    value = value.strip()
    if not value:
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def split_state(state: str) -> tuple[str | None, str | None]:
    """The State picker holds single states and groups (``group:failed_any``)."""
    if state.startswith(STATE_GROUP_PREFIX):
        return None, state[len(STATE_GROUP_PREFIX) :]
    return state or None, None


def retry_waiting(run: WorkflowRun) -> bool:
    """A run that waits for a retry of a step or a compensation (what "retry now" acts on)."""
    return (
        run.state in (RUNNING, COMPENSATING)
        and run.error_category is not None
        and runs.next_attempt_at(run) is not None
        and run.lease_owner is None
    )


def targets(request: AnyRequest, element_id: str) -> bool:
    """An htmx request for one component (not a boosted page load)."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-target") == element_id


def may(principal: Principal, permission: str) -> bool:
    return principal.authority is not None and principal.authority.holds(permission)


def human_duration(start: datetime | None, end: datetime | None) -> str | None:
    """``850 ms``, ``12.4 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if start is None or end is None:
        return None
    seconds = max((end - start).total_seconds(), 0.0)
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def paused(run: WorkflowRun, workflow: Workflow) -> bool:
    """A run the runner leaves where it is: going forward on a disabled workflow, not being cancelled."""
    return (
        workflow.state == "disabled"
        and run.state not in FINISHED
        and run.state != COMPENSATING
        and run.cancel_requested_at is None
    )


def cancellable(run: WorkflowRun) -> bool:
    return run.state not in FINISHED and run.state != COMPENSATING and run.cancel_requested_at is None


# --- What the pages show --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRow:
    run: WorkflowRun
    workflow_name: str
    subject: str
    current_step: str | None
    duration: str | None
    finished: bool


@dataclass(frozen=True)
class AttemptLine:
    attempt: StepAttempt
    duration: str | None


@dataclass
class StepLine:
    index: int
    id: str
    type: str
    status: str
    attempts: list[AttemptLine] = field(default_factory=list)
    current: bool = False
    next_attempt_at: datetime | None = None
    note: str | None = None
    error_category: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class CompensationLine:
    attempt: StepAttempt
    when: datetime | None


def step_lines(run: WorkflowRun, steps: Sequence[dict[str, Any]], attempts: Sequence[StepAttempt]) -> list[StepLine]:
    """Every step of the definition in order, with its attempts and where the run stands."""
    by_step: dict[str, list[StepAttempt]] = {}
    for attempt in attempts:
        by_step.setdefault(attempt.step_id, []).append(attempt)
    finished = run.state in FINISHED
    retry_at = runs.next_attempt_at(run)
    lines: list[StepLine] = []
    for index, step in enumerate(steps):
        step_id = str(step.get("id", f"step-{index}"))
        own = sorted(by_step.get(step_id, []), key=lambda a: a.number)
        current = not finished and run.state != COMPENSATING and index == run.step_index
        line = StepLine(
            index=index,
            id=step_id,
            type=str(step.get("type", "")),
            status="not reached",
            attempts=[AttemptLine(a, human_duration(a.started_at, a.finished_at)) for a in own],
            current=current,
        )
        last = own[-1] if own else None
        if any(a.state == ATTEMPT_SUCCEEDED for a in own):
            line.status = "succeeded"
        elif last is not None and last.state == ATTEMPT_STARTED:
            line.status = "in progress"
        elif last is not None and last.state == ATTEMPT_FAILED:
            if current and run.state == RUNNING and retry_at is not None:
                line.status = "retrying"
                line.next_attempt_at = retry_at
            elif current and run.state in (PENDING, RUNNING):
                line.status = "retrying"
                line.note = "The next attempt is due now."
            else:
                line.status = "failed"
                line.error_category, line.error = last.error_category, last.error_message
        elif current:
            if run.state == WAITING:
                line.status = "waiting"
                line.next_attempt_at = retry_at
            elif run.state == AWAITING_APPROVAL:
                line.status = "awaiting approval"
            else:
                line.status = "up next"
        if index == run.step_index and line.status == "not reached":
            # Where a run that stopped short stopped: a cancellation stops before this step; a
            # failure that left no attempt of it (its definition or authority gone) failed here.
            if run.cancel_requested_at is not None:
                line.status = "cancelled"
                line.note = "The run was cancelled before this step."
            elif run.state in (FAILED, COMPENSATING, COMPENSATED, COMPENSATION_FAILED) and run.error_category:
                line.status = "failed"
                line.error_category, line.error = run.error_category, run.last_error
        lines.append(line)
    return lines


def compensation_lines(attempts: Sequence[StepAttempt]) -> list[CompensationLine]:
    """Succeeded steps that have something to compensate, newest first (the order they are undone in)."""
    chosen = [a for a in attempts if a.state == ATTEMPT_SUCCEEDED and a.compensation_strategy != "none"]
    chosen.sort(key=lambda a: (a.step_index, a.number), reverse=True)
    return [CompensationLine(a, a.compensated_at) for a in chosen]


async def people(db_session: DbSession, realm_id: str, ids: Iterable[str | None]) -> dict[str, User]:
    """The users among ``ids`` (others, such as service principals, are left out), in one query."""
    return await directory.users_by_id(db_session, realm_id, ids)


async def definition_steps(db_session: DbSession, realm_id: str, workflow_id: str, number: int) -> list[dict[str, Any]]:
    try:
        revision = await workflows.get_revision(db_session, realm_id, workflow_id, number)
    except NotFound:
        return []
    steps = revision.definition.get("steps", [])
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


class RunsPages(Controller):
    path = "/realms/{realm:str}"
    include_in_schema = False

    # --- Lists ------------------------------------------------------------------------------------

    async def _list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        workflow: Workflow | None,
        workflow_id: str | None,
        state: str | None,
        subject: str | None,
        cursor: str | None,
        trigger_type: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
    ) -> Template:
        realm_id = principal.realm.id
        state = (state or "").strip()
        trigger_type = (trigger_type or "").strip()
        created_after = (created_after or "").strip()[:40]
        created_before = (created_before or "").strip()[:40]
        subject = (subject or "").strip()[:254]
        workflow_id = workflow.id if workflow is not None else (workflow_id or "").strip() or None
        status_code = 200
        list_error: str | None = None
        subject_note: str | None = None
        subject_id: str | None = None
        if subject:
            if "@" in subject:
                user = await identity.user_by_email(db_session, realm_id, subject)
                subject_id = user.id if user is not None else None
                if user is None:
                    subject_note = f"There is no user {subject} in this realm."
            else:
                subject_id = subject
        items: list[runs.RunLine] = []
        next_cursor: str | None = None
        one_state, state_group = split_state(state)
        if subject_note is None:
            try:
                try:
                    after, before = parse_time(created_after), parse_time(created_before)
                except ValueError:
                    raise ValidationFailed(
                        "The request is not valid.",
                        issues=[Issue("query:created_after", "invalid", "times look like 2026-12-01T09:30")],
                    ) from None
                found = await runs.list_run_lines(
                    db_session,
                    realm_id,
                    workflow_id=workflow_id,
                    state=one_state,
                    subject_id=subject_id,
                    cursor=cursor,
                    where=runs.RunFilter(
                        state_group=state_group,
                        trigger_type=trigger_type or None,
                        created_after=after,
                        created_before=before,
                    ),
                )
                items, next_cursor = found.items, found.next_cursor
            except EngineError as exc:
                list_error = exc.detail + " " + "; ".join(i.message for i in exc.issues)
                status_code = exc.status
        choices = (await workflows.list_workflows(db_session, realm_id, limit=PICKER_LIMIT)).items
        rows = self._rows(items)
        base = f"/realms/{principal.realm.slug}" + (f"/workflows/{workflow.id}/runs" if workflow else "/runs")
        template = "pages/runs/_table.html" if targets(request, TABLE_ID) else "pages/runs/list.html"
        return page(
            request,
            template,
            nav="workflows" if workflow else "runs",
            status_code=status_code,
            rows=rows,
            next_cursor=next_cursor,
            workflow=workflow,
            workflow_choices=sorted(choices, key=lambda w: w.name.lower()),
            states=RUN_STATES,
            state_groups=STATE_GROUP_LABELS,
            trigger_types=TRIGGER_LABELS,
            filters={
                "state": state,
                "workflow_id": "" if workflow else (workflow_id or ""),
                "subject": subject,
                "trigger_type": trigger_type,
                "created_after": created_after,
                "created_before": created_before,
            },
            base_url=base,
            list_error=list_error,
            subject_note=subject_note,
            can_run=may(principal, "realm.workflows.run"),
            bulk_workflow_id=workflow.id if workflow else (workflow_id or ""),
        )

    @staticmethod
    def _rows(items: Sequence[runs.RunLine]) -> list[RunRow]:
        moment = utc_now()
        rows: list[RunRow] = []
        for line in items:
            run = line.run
            finished = run.state in FINISHED
            rows.append(
                RunRow(
                    run=run,
                    workflow_name=line.workflow_name,
                    subject=line.subject,
                    current_step=line.current_step,
                    duration=human_duration(run.created_at, run.finished_at if finished else moment),
                    finished=finished,
                )
            )
        return rows

    @get("/runs", operation_id="runsPage", opt=READ_ONLY)
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        run_state: Annotated[str | None, QueryParameter(name="state")] = None,
        workflow_id: FromQuery[str | None] = None,
        subject: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        trigger_type: FromQuery[str | None] = None,
        created_after: FromQuery[str | None] = None,
        created_before: FromQuery[str | None] = None,
    ) -> Template:
        return await self._list(
            request,
            db_session,
            principal,
            workflow=None,
            workflow_id=workflow_id,
            state=run_state,
            subject=subject,
            cursor=cursor,
            trigger_type=trigger_type,
            created_after=created_after,
            created_before=created_before,
        )

    @get("/workflows/{workflow_id:str}/runs", operation_id="workflowRunsPage", opt=READ_ONLY)
    async def workflow_list_page(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        run_state: Annotated[str | None, QueryParameter(name="state")] = None,
        subject: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        trigger_type: FromQuery[str | None] = None,
        created_after: FromQuery[str | None] = None,
        created_before: FromQuery[str | None] = None,
    ) -> Template:
        workflow = await workflows.get_workflow(db_session, principal.realm.id, workflow_id)
        return await self._list(
            request,
            db_session,
            principal,
            workflow=workflow,
            workflow_id=None,
            state=run_state,
            subject=subject,
            cursor=cursor,
            trigger_type=trigger_type,
            created_after=created_after,
            created_before=created_before,
        )

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
        found = await runs.get_run_context(db_session, realm_id, run_id)
        run, workflow, steps = found.run, found.workflow, found.steps
        attempts = await runs.run_attempts(db_session, run.id)
        approvals = [approval_records.approval_view(a) for a in await approval_records.for_run(db_session, run.id)]
        users = await people(
            db_session,
            realm_id,
            [run.subject_id, run.publisher_id, run.starter_id, run.cancel_requested_by]
            + [str(a.get("decided_by") or "") for a in approvals]
            + [p for a in approvals for p in a["approvers"]],
        )
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
            steps=step_lines(run, steps, attempts),
            compensations=compensation_lines(attempts),
            compensation_started=run.state in COMPENSATION_PHASE or run.cancel_requested_at is not None,
            approvals=approvals,
            users=users,
            organization_name=org_names.get(run.organization_id or "", run.organization_id),
            finished=finished,
            duration=human_duration(run.created_at, run.finished_at if finished else utc_now()),
            next_attempt_at=runs.next_attempt_at(run),
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

    # --- Bulk -------------------------------------------------------------------------------------

    @post("/runs/bulk", operation_id="runsPageBulk", opt=RUN)
    async def bulk(
        self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal, data: URLEncodedBody[BulkForm]
    ) -> Template:
        """Works through the chosen runs :data:`BULK_CHUNK` at a time; each answer shows the progress
        and, while runs remain, asks for the next part by itself (``hx-trigger="load"``; without
        JavaScript, a Continue button)."""
        actor = principal.actor(request_id_of(request))
        realm_id = principal.realm.id
        reason = data.reason.strip() or None
        error: str | None = None
        refused_rows: list[dict[str, Any]] = []
        status_code = 200
        if data.pending or data.total:
            todo = [i for i in data.pending.split(",") if i][: run_controls.BULK_LIMIT]
            total, matched = data.total, data.matched
        else:
            todo, total, matched = [], 0, 0
            try:
                if data.action not in run_controls.BULK_ACTIONS:
                    raise ValidationFailed(
                        "The request is not valid.", issues=[Issue("/action", "invalid", "Choose cancel or re-run.")]
                    )
                if data.scope == "filter":
                    one_state, group = split_state(data.state.strip())
                    subject_id: str | None = data.subject.strip() or None
                    if subject_id and "@" in subject_id:
                        user = await identity.user_by_email(db_session, realm_id, subject_id)
                        subject_id = user.id if user is not None else "usr_none"
                    try:
                        after, before = parse_time(data.created_after), parse_time(data.created_before)
                    except ValueError:
                        raise ValidationFailed(
                            "The request is not valid.",
                            issues=[Issue("/filter/created_after", "invalid", "times look like 2026-12-01T09:30")],
                        ) from None
                    where = runs.RunFilter(
                        workflow_id=data.workflow_id.strip() or None,
                        state=one_state,
                        state_group=group,
                        subject_id=subject_id,
                        trigger_type=data.trigger_type.strip() or None,
                        created_after=after,
                        created_before=before,
                    )
                    issues = where.issues("/filter/")
                    if issues:
                        raise ValidationFailed("The request is not valid.", issues=issues)
                    todo, matched = await run_controls.bulk_select(db_session, realm_id, where)
                else:
                    todo = list(dict.fromkeys(i.strip() for i in data.ids if i.strip()))
                    matched = len(todo)
                    if not todo:
                        raise ValidationFailed(
                            "The request is not valid.",
                            issues=[
                                Issue("/ids", "required", "Tick the runs to act on, or choose all matching the filter.")
                            ],
                        )
                    todo = todo[: run_controls.BULK_LIMIT]
                total = len(todo)
            except EngineError as exc:
                error = exc.detail + " " + " ".join(i.message for i in exc.issues)
                status_code = exc.status
        chunk, rest = todo[:BULK_CHUNK], todo[BULK_CHUNK:]
        done, refused = data.done, data.refused
        if chunk and error is None:
            outcome = await run_controls.bulk_action(
                db_session, actor, data.action, ids=chunk, reason=reason if data.action == "cancel" else None
            )
            for result in outcome.results:
                if result["status"] == "done":
                    done += 1
                else:
                    refused += 1
                    refused_rows.append(result)
        return page(
            request,
            "pages/runs/bulk.html",
            fragment="pages/runs/_bulk_progress.html",
            nav="runs",
            status_code=status_code,
            bulk={
                "action": data.action,
                "reason": data.reason,
                "pending": ",".join(rest),
                "total": total,
                "matched": matched,
                "done": done,
                "refused": refused,
                "finished": not rest,
                "refused_rows": refused_rows,
                "error": error,
                "first": not (data.pending or data.total),
            },
        )

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
