"""What a transition records: an attempt's success or failure, the run's advance, its end, and
the start of its compensation.

Every function here runs inside the transition's transaction, under the run's lease; the audit
events it writes commit with the change they describe.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import record_audit
from engine.platform.ids import new_id
from engine.runs import approvals
from engine.runs.decisions import (
    AuditEntry,
    run_compensating_entry,
    run_succeeded_entry,
    step_failed_entry,
    step_succeeded_entry,
)
from engine.runs.holder import Holder, run_actor
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.outcome_events import emit_run_outcome
from engine.runs.retry import delay_ms
from engine.runs.runstore import moves
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_SUCCEEDED,
    AWAITING_APPROVAL,
    COMPENSATING,
    RUNNING,
    SUCCEEDED,
)
from engine.runs.steps import Outcome, StepFailure, StepType
from engine.workflows.definitions.canonical import input_version
from engine.workflows.models import WorkflowRevision


def new_attempt(
    h: Holder, run: WorkflowRun, revision: WorkflowRevision, step: dict[str, Any], step_type: StepType, number: int
) -> StepAttempt:
    """An attempt of a step that is never retried (approval, wait)."""
    return StepAttempt(
        id=new_id("wsa"),
        run_id=run.id,
        realm_id=run.realm_id,
        step_id=step["id"],
        step_index=run.step_index,
        step_type=step_type.name,
        number=number,
        idempotency_key=f"{run.id}.{step['id']}",
        input={"step": step, "subject_id": run.subject_id, "organization_id": run.organization_id},
        input_version=input_version(revision.number, revision.hash, run.input_version),
        max_attempts=1,
        backoff_ms=0,
        started_at=h.clock.now(),
    )


async def write_entry(session: AsyncSession, run: WorkflowRun, entry: AuditEntry) -> None:
    """Write an audit event built by one of the executors' shared builders (engine/runs/decisions.py)."""
    await record_audit(
        session,
        run_actor(run),
        entry.type,
        category=entry.category,
        subject_type=entry.subject_type,
        subject_id=entry.subject_id,
        details=entry.details,
    )


async def audit_step_succeeded(session: AsyncSession, run: WorkflowRun, attempt: StepAttempt) -> None:
    """Audit a succeeded attempt, as every executor does."""
    entry = step_succeeded_entry(run.id, attempt.step_id, attempt.number, attempt.idempotency_key)
    await write_entry(session, run, entry)


async def step_succeeded(
    h: Holder, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt, outcome: Outcome, steps: int
) -> None:
    """Record the succeeded attempt, audit it and advance the run (or finish it)."""
    now = h.clock.now()
    attempt.state = ATTEMPT_SUCCEEDED
    attempt.result = outcome.result
    attempt.compensation_strategy = outcome.strategy
    attempt.compensation_state = outcome.compensation_state
    attempt.finished_at = now
    await moves.record_attempt(session, attempt)
    await audit_step_succeeded(session, run, attempt)
    if outcome.ends_run or run.step_index + 1 >= steps:
        await succeed_run(h, session, run, step_index=run.step_index + 1)
    else:
        await moves.move_run(
            session, run, RUNNING, worker_id=h.worker_id, due_at=now, now=now, step_index=run.step_index + 1
        )


async def record_failure(
    h: Holder,
    session: AsyncSession,
    run: WorkflowRun,
    attempt: StepAttempt,
    failure: StepFailure,
    *,
    context: dict[str, Any] | None = None,
) -> None:
    """A failed attempt: retried by the policy the attempt recorded (its ``max_attempts`` and
    ``backoff_ms``), or the run compensates."""
    now = h.clock.now()
    attempt.state = ATTEMPT_FAILED
    attempt.error_category = failure.category
    attempt.error_message = failure.message[:2000]
    attempt.finished_at = now
    await moves.record_attempt(session, attempt)
    entry = step_failed_entry(run.id, attempt.step_id, attempt.number, failure.category)
    await write_entry(session, run, entry)
    if failure.permanent:
        await start_compensating(h, session, run, failure.category, failure.message, context=context)
    elif attempt.number >= attempt.max_attempts:
        await start_compensating(h, session, run, "retries_exhausted", failure.message)
    else:
        wait = delay_ms(attempt.backoff_ms, attempt.number, rand=h.clock.random)
        await moves.move_run(
            session,
            run,
            RUNNING,
            worker_id=h.worker_id,
            due_at=now + timedelta(milliseconds=wait),
            now=now,
            error_category=failure.category,
            last_error=failure.message[:2000],
        )


async def start_compensating(
    h: Holder,
    session: AsyncSession,
    run: WorkflowRun,
    category: str,
    message: str,
    *,
    reason: str | None = None,
    context: dict[str, Any] | None = None,
) -> None:
    now = h.clock.now()
    more: dict[str, Any] = {} if context is None else {"context": context}
    # A call recorded as started and never finished is over: the run no longer waits for it.
    await moves.interrupt_started_attempts(session, run.id, now)
    if run.state == AWAITING_APPROVAL:
        await approvals.cancel_pending(session, run.id, now=now)
    await moves.move_run(
        session,
        run,
        COMPENSATING,
        worker_id=h.worker_id,
        due_at=now,
        now=now,
        error_category=category,
        last_error=message[:2000],
        **more,
    )
    entry = run_compensating_entry(run.id, category, reason)
    await write_entry(session, run, entry)


async def fail_run(h: Holder, session: AsyncSession, run: WorkflowRun, category: str, message: str) -> None:
    await start_compensating(h, session, run, category, message)


async def succeed_run(h: Holder, session: AsyncSession, run: WorkflowRun, **values: Any) -> None:
    now = h.clock.now()
    await moves.move_run(session, run, SUCCEEDED, worker_id=h.worker_id, due_at=None, now=now, **values)
    await emit_run_outcome(session, run)
    await write_entry(session, run, run_succeeded_entry(run.id))
