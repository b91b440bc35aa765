"""Endpoint calls (call_webhook): started in a transition, sent outside any transaction, recorded
in a transaction of their own.

A transition that starts a call commits the attempt ``started`` and returns the prepared call;
``complete_call`` sends it and records its outcome under the run's lease (a step's success or
failure, or a compensation's try).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from engine.endpoints import transport
from engine.endpoints.calls import PreparedCall
from engine.endpoints.transport import CallOutcome
from engine.runs import metrics
from engine.runs.compensation import compensation_done, compensation_failed_try
from engine.runs.holder import Holder
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.outcomes import record_failure, step_succeeded
from engine.runs.runstore import leases, moves
from engine.runs.states import ATTEMPT_STARTED, COMP_PENDING, COMPENSATING, FINISHED, RUNNING, TransitionRefused
from engine.runs.steps import StepContext, StepFailure, StepType
from engine.runs.steps.call_webhook import CallWebhook
from engine.workflows.models import WorkflowRevision


async def complete_call(h: Holder, call: PreparedCall) -> bool:
    """Send the call (no transaction open), then record its outcome under the lease."""
    async with transport.new_client(h.settings.endpoints.ca_bundle) as client:
        result = await transport.post(
            client,
            call.url,
            call.body,
            call.headers,
            timeout_s=call.timeout_s,
            allow_private_network=call.allow_private_network,
            operator_allows_private=h.settings.endpoints.allow_private_egress,
        )
    now = h.clock.now()
    async with h.sessions() as session, session.begin():
        run = await leases.lock_leased_run(session, call.run_id, h.worker_id, now=now, lease=h.settings.lease)
        before = run.state
        attempt = await moves.lock_attempt(session, call.attempt_id)
        if call.action == "execute":
            await record_call(h, session, run, attempt, result)
        else:
            await record_compensation_call(h, session, run, attempt, result)
    metrics.run_finished(before, run.state)  # committed: count a run that ended failing
    return run.state in FINISHED


async def start_call(
    h: Holder,
    session: AsyncSession,
    run: WorkflowRun,
    step: dict[str, Any],
    step_type: StepType,
    attempt: StepAttempt,
    ctx: StepContext,
) -> PreparedCall | bool:
    """Record the attempt ``started`` (committed with this transaction) and return the prepared call
    (True: refused, the failure recorded instead)."""
    assert isinstance(step_type, CallWebhook)
    try:
        async with session.begin_nested():
            await step_type.decide_call(ctx, h.settings.endpoints)
            call = await step_type.prepare(ctx, attempt, h.settings.endpoints)
    except StepFailure as failure:
        await record_failure(h, session, run, attempt, failure)
        return True
    attempt.state = ATTEMPT_STARTED
    await moves.record_attempt(session, attempt)
    return call


async def record_call(
    h: Holder, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt | None, result: CallOutcome
) -> None:
    if attempt is None or attempt.state != ATTEMPT_STARTED:
        return  # recorded already (interrupted by another holder of the run)
    if run.state != RUNNING or run.step_index != attempt.step_index:
        raise TransitionRefused(f"run {run.id} moved on while its endpoint call was in flight")
    if result.succeeded:
        steps = await step_count(session, run)
        outcome = CallWebhook.succeeded(attempt.input.get("step", {}), result.status_code, result.latency_ms)
        await step_succeeded(h, session, run, attempt, outcome, steps)
        return
    attempt.result = {"status_code": result.status_code, "latency_ms": result.latency_ms}
    failure = StepFailure(result.category or "error", result.message, permanent=result.permanent)
    await record_failure(h, session, run, attempt, failure)


async def record_compensation_call(
    h: Holder, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt | None, result: CallOutcome
) -> None:
    if attempt is None or attempt.compensation_state != COMP_PENDING or run.state != COMPENSATING:
        return
    if result.succeeded:
        await compensation_done(
            h, session, run, attempt, {"status_code": result.status_code, "latency_ms": result.latency_ms}
        )
        return
    failure = StepFailure(result.category or "error", result.message, permanent=result.permanent)
    await compensation_failed_try(h, session, run, attempt, failure)


async def step_count(session: AsyncSession, run: WorkflowRun) -> int:
    revision = await session.get(WorkflowRevision, run.revision_id)
    return len(revision.definition.get("steps", [])) if revision is not None else run.step_index + 1
