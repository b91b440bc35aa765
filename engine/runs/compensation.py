"""Compensation: a failed or cancelled run undoes its succeeded steps, newest first.

Each undo is one transition under the run's lease; an endpoint's compensation is prepared here
(its try counted and committed first) and returned, to be sent outside any transaction
(engine/runs/endpoint_calls.py).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import record_audit
from engine.directory.authz import load_authority
from engine.endpoints.calls import PreparedCall
from engine.platform.errors import error_summary
from engine.runs.holder import CATEGORY, Holder, run_actor
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.outcome_events import emit_run_outcome
from engine.runs.retry import COMPENSATION_BACKOFF_MS, COMPENSATION_MAX_ATTEMPTS, delay_ms
from engine.runs.runstore import moves
from engine.runs.states import (
    CANCELLED,
    COMP_DONE,
    COMP_FAILED,
    COMPENSATED,
    COMPENSATION_FAILED,
    FAILED,
    STRATEGY_NOTIFY_ENDPOINT,
    TransitionRefused,
)
from engine.runs.steps import STEP_TYPES, StepContext, StepFailure
from engine.runs.steps.call_webhook import CallWebhook
from engine.workflows.models import WorkflowRevision

log = logging.getLogger("cockpit.engine")


async def compensate(
    h: Holder, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision | None
) -> PreparedCall | bool:
    """Undo the newest step not yet undone (True), or return the endpoint's compensation call to send."""
    now = h.clock.now()
    summary = await moves.compensation_summary(session, run.id)
    if summary.get(COMP_FAILED):
        await finish_compensation(h, session, run, summary)
        return True
    attempt = await moves.next_compensation(session, run.id)
    if attempt is None:
        await finish_compensation(h, session, run, summary)
        return True
    step_type = STEP_TYPES.get(attempt.step_type)
    actor = run_actor(run)
    ctx = StepContext(
        session=session,
        run=run,
        step=attempt.input.get("step", attempt.input),
        step_index=attempt.step_index,
        organization_id=attempt.input.get("organization_id") or run.organization_id,
        actor=actor,
        authority=await load_authority(session, run.realm_id, "user", run.publisher_id, now=now),
        now=now,
    )
    attempt.compensation_attempts += 1
    if attempt.compensation_strategy == STRATEGY_NOTIFY_ENDPOINT and isinstance(step_type, CallWebhook):
        # The try is counted (and committed) before the call; not re-checked for authority.
        try:
            call = await step_type.prepare_compensation(ctx, attempt, h.settings.endpoints)
        except StepFailure as failure:
            await compensation_failed_try(h, session, run, attempt, failure)
            return True
        await session.flush()
        return call
    try:
        if step_type is None:
            raise StepFailure("definition_unavailable", f"No step type {attempt.step_type!r} here.", permanent=True)
        async with session.begin_nested():
            result = await step_type.undo(ctx, attempt)
    except StepFailure as failure:
        await compensation_failed_try(h, session, run, attempt, failure)
        return True
    except (TransitionRefused, IntegrityError):
        raise
    except Exception as exc:
        log.warning("compensation failed unexpectedly", exc_info=exc, extra={"run_id": run.id})
        await compensation_failed_try(
            h, session, run, attempt, StepFailure("error", error_summary(exc), permanent=False)
        )
        return True
    await compensation_done(h, session, run, attempt, result)
    return True


async def compensation_done(
    h: Holder, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt, result: dict[str, Any]
) -> None:
    now = h.clock.now()
    attempt.compensation_state = COMP_DONE
    attempt.compensation_result = result
    attempt.compensated_at = now
    await session.flush()
    await record_audit(
        session,
        run_actor(run),
        "workflow.step.compensated",
        category=CATEGORY,
        subject_type="workflow_run",
        subject_id=run.id,
        details={"step_id": attempt.step_id, "attempt": attempt.number, "result": result},
    )
    await moves.set_due(session, run, worker_id=h.worker_id, due_at=now, now=now)


async def compensation_failed_try(
    h: Holder, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt, failure: StepFailure
) -> None:
    now = h.clock.now()
    attempt.compensation_error = f"{failure.category}: {failure.message}"[:2000]
    if failure.permanent or attempt.compensation_attempts >= COMPENSATION_MAX_ATTEMPTS:
        attempt.compensation_state = COMP_FAILED
        await session.flush()
        await record_audit(
            session,
            run_actor(run),
            "workflow.step.compensation_failed",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
            details={
                "step_id": attempt.step_id,
                "error_category": failure.category,
                "tries": attempt.compensation_attempts,
            },
        )
        await moves.set_due(session, run, worker_id=h.worker_id, due_at=now, now=now)
        return
    await session.flush()
    wait = delay_ms(COMPENSATION_BACKOFF_MS, attempt.compensation_attempts, rand=h.clock.random)
    await moves.set_due(session, run, worker_id=h.worker_id, due_at=now + timedelta(milliseconds=wait), now=now)


async def finish_compensation(h: Holder, session: AsyncSession, run: WorkflowRun, summary: dict[str, int]) -> None:
    now = h.clock.now()
    actor = run_actor(run)
    if summary.get(COMP_FAILED):
        final, event = COMPENSATION_FAILED, "workflow.run.compensation_failed"
    elif run.cancel_requested_at is not None:
        final, event = CANCELLED, "workflow.run.cancelled"
    elif summary.get(COMP_DONE):
        final, event = COMPENSATED, "workflow.run.compensated"
    else:
        final, event = FAILED, "workflow.run.failed"
    await moves.move_run(session, run, final, worker_id=h.worker_id, due_at=None, now=now)
    await emit_run_outcome(session, run)
    details: dict[str, Any] = {"error_category": run.error_category}
    if final == FAILED:
        details["phase"] = "finished"
        details["reason"] = run.error_category
    await record_audit(
        session, actor, event, category=CATEGORY, subject_type="workflow_run", subject_id=run.id, details=details
    )
