"""One transition: one step of progress of one run, in one transaction under its lease.

For an internal step that transaction holds the lease check, the accountable publisher's authority
re-check, the effect, the succeeded attempt, the run's advance and the audit events — so a crash
rolls all of it back, a step that runs again after a crash never repeats an effect, and a worker
that lost its lease cannot commit. A step that calls an endpoint commits its started attempt and
returns the prepared call, sent after the commit (engine/runs/endpoint_calls.py).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.authz import load_authority
from engine.endpoints.calls import PreparedCall
from engine.platform.errors import error_summary
from engine.platform.ids import new_id
from engine.runs import approval_models, approvals, metrics
from engine.runs.compensation import compensate
from engine.runs.decisions import Effect, Refusal, decide, publisher_refusal
from engine.runs.endpoint_calls import start_call
from engine.runs.holder import Holder, run_actor
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.outcomes import (
    audit_step_succeeded,
    fail_run,
    new_attempt,
    record_failure,
    start_compensating,
    step_succeeded,
    succeed_run,
)
from engine.runs.retry import policy_for
from engine.runs.runstore import leases, moves
from engine.runs.snapshots import RunFacts, load_snapshot
from engine.runs.states import (
    ATTEMPT_STARTED,
    ATTEMPT_SUCCEEDED,
    AWAITING_APPROVAL,
    COMPENSATING,
    FINISHED,
    FORWARD,
    PENDING,
    RUNNING,
    WAITING,
    TransitionRefused,
)
from engine.runs.steps import APPROVAL, EXTERNAL, STEP_TYPES, WAIT, StepContext, StepFailure
from engine.workflows.definitions.canonical import input_version
from engine.workflows.models import Workflow, WorkflowRevision

log = logging.getLogger("cockpit.engine")

# What a transition made: progress (True), nothing to do now (False), or progress and a call to
# send once its transaction has committed.
Made = bool | PreparedCall


class Transitioned(NamedTuple):
    """What one transition did."""

    progressed: bool
    finished: bool  # the run reached a final state
    call: PreparedCall | None  # the endpoint call to send once the transaction has committed


async def transition(h: Holder, run_id: str) -> Transitioned:
    """(progress made, run finished, the endpoint call to send).

    A transition that starts an endpoint call commits the started attempt first and returns the
    prepared call: it is made outside any transaction, by the caller, and its outcome recorded in a
    transaction of its own (``complete_call``). A transaction that fails returns no call, so a
    call whose started attempt did not commit is never sent.
    """
    now = h.clock.now()
    async with h.sessions() as session, session.begin():
        run = await leases.lock_leased_run(session, run_id, h.worker_id, now=now, lease=h.settings.lease)
        before = run.state
        made = await dispatch(h, session, run, now)
    metrics.run_finished(before, run.state)  # committed: count a run that ended failing
    if isinstance(made, PreparedCall):
        return Transitioned(progressed=True, finished=False, call=made)
    return Transitioned(progressed=made, finished=run.state in FINISHED, call=None)


async def dispatch(h: Holder, session: AsyncSession, run: WorkflowRun, now: datetime) -> Made:
    if run.state in FINISHED or run.due_at is None or run.due_at > now:
        return False
    revision = await session.get(WorkflowRevision, run.revision_id)
    if revision is None:
        if run.state == COMPENSATING:
            return await compensate(h, session, run, None)
        await fail_run(h, session, run, "definition_unavailable", "The run's revision no longer exists.")
        return True
    if run.state in FORWARD and run.cancel_requested_at is None:
        workflow_state = await session.scalar(select(col(Workflow.state)).where(col(Workflow.id) == run.workflow_id))
        if workflow_state == "disabled":
            return False  # paused while its workflow is disabled; compensation and cancellation go on
    if run.cancel_requested_at is not None and run.state != COMPENSATING:
        await start_compensating(h, session, run, "cancelled", run.cancel_reason or "Cancelled.", reason="cancelled")
        return True
    if run.state == PENDING:
        # Starting and the first step share one transaction (one commit less per run).
        await moves.move_run(session, run, RUNNING, worker_id=h.worker_id, due_at=now, now=now)
    if run.state == RUNNING:
        return await run_step(h, session, run, revision)
    if run.state == AWAITING_APPROVAL:
        return await resume_approval(h, session, run, revision)
    if run.state == WAITING:
        return await end_wait(h, session, run, revision)
    if run.state == COMPENSATING:
        return await compensate(h, session, run, revision)
    return False


async def run_step(h: Holder, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision) -> Made:
    now = h.clock.now()
    definition = revision.definition
    steps: list[dict[str, Any]] = definition.get("steps", [])
    if run.step_index >= len(steps):
        await succeed_run(h, session, run)
        return True
    step = steps[run.step_index]
    step_type = STEP_TYPES.get(step.get("type", ""))
    attempts = await moves.attempts_of_step(session, run.id, step["id"])
    if any(a.state == ATTEMPT_SUCCEEDED for a in attempts):
        # Already applied (by an earlier transaction that committed): skip, never apply again.
        if step.get("type") == "end" or run.step_index + 1 >= len(steps):
            await succeed_run(h, session, run, step_index=run.step_index + 1)
            return True
        await moves.move_run(
            session, run, RUNNING, worker_id=h.worker_id, due_at=now, now=now, step_index=run.step_index + 1
        )
        return True
    if step_type is None:
        await fail_run(h, session, run, "definition_unavailable", f"No step type {step.get('type')!r} here.")
        return True
    if step_type.kind == APPROVAL:
        return await request_approval(h, session, run, revision, step, len(attempts) + 1)
    if step_type.kind == WAIT:
        wait = decide(await load_snapshot(session, RunFacts.of(run), step, now=now))
        assert isinstance(wait, Effect)  # a wait is never refused
        until = wait.values["until"]
        context = {**run.context, "wait": {"step_id": step["id"], "since": now.isoformat()}}
        await moves.move_run(session, run, WAITING, worker_id=h.worker_id, due_at=until, now=now, context=context)
        return True
    policy = policy_for(definition, step)
    started = [a for a in attempts if a.state == ATTEMPT_STARTED]
    if started:
        # A worker recorded a call as started and stopped before recording its outcome: the
        # endpoint may or may not have acted. Transient and counted; the retry carries the same
        # Idempotency-Key, so the endpoint can tell.
        interrupted = StepFailure(
            "interrupted",
            "The worker stopped between the endpoint call and its outcome; retried with the same Idempotency-Key.",
            permanent=False,
        )
        await record_failure(h, session, run, started[-1], interrupted)
        return True
    number = len(attempts) + 1
    attempt = StepAttempt(
        id=new_id("wsa"),
        run_id=run.id,
        realm_id=run.realm_id,
        step_id=step["id"],
        step_index=run.step_index,
        step_type=step_type.name,
        number=number,
        idempotency_key=f"{run.id}.{step['id']}",
        # The resolved input: the step as published, for this subject, in this organization.
        input={
            "step": step,
            "subject_id": run.subject_id,
            "organization_id": step.get("organization_id") or run.organization_id,
        },
        input_version=input_version(revision.number, revision.hash, run.input_version),
        max_attempts=policy.max_attempts if step_type.retried else 1,
        backoff_ms=policy.backoff_ms if step_type.retried else 0,
        started_at=now,
    )
    actor = run_actor(run)
    ctx = StepContext(
        session=session,
        run=run,
        step=step,
        step_index=run.step_index,
        organization_id=step.get("organization_id") or run.organization_id,
        actor=actor,
        authority=await load_authority(session, run.realm_id, "user", run.publisher_id, now=now),
        now=now,
        mail_configured=h.settings.mail_configured,
    )
    if step_type.kind == EXTERNAL:
        return await start_call(h, session, run, step, step_type, attempt, ctx)
    try:
        async with session.begin_nested():
            # The publisher's re-check on the step's snapshot; the step type decides the rest.
            refused = publisher_refusal(await step_type.snapshot(ctx))
            if refused is not None:
                raise StepFailure(refused.category, refused.message, permanent=refused.permanent)
            try:
                outcome = await step_type.perform(ctx)
            except IntegrityError as exc:
                # The directory refused the change (a concurrent duplicate, a vanished row):
                # a permanent conflict, not a reason to retry the transaction forever.
                raise StepFailure("conflict", error_summary(exc), permanent=True) from exc
    except StepFailure as failure:
        await record_failure(h, session, run, attempt, failure)
        return True
    except (TransitionRefused, IntegrityError):
        raise
    except Exception as exc:  # infrastructure: transient
        log.warning("step failed unexpectedly", exc_info=exc, extra={"run_id": run.id, "step_id": step["id"]})
        await record_failure(h, session, run, attempt, StepFailure("error", error_summary(exc), permanent=False))
        return True
    await step_succeeded(h, session, run, attempt, outcome, len(steps))
    return True


async def request_approval(
    h: Holder, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision, step: dict[str, Any], number: int
) -> bool:
    now = h.clock.now()
    decision = decide(await load_snapshot(session, RunFacts.of(run), step, now=now))
    if isinstance(decision, Refusal):
        attempt = new_attempt(h, run, revision, step, STEP_TYPES["approval"], number)
        failure = StepFailure(decision.category, decision.message, permanent=decision.permanent)
        await record_failure(h, session, run, attempt, failure)
        return True
    approval = await approvals.request_approval(
        session,
        run,
        step,
        run.step_index,
        actor=run_actor(run),
        now=now,
        mail_configured=h.settings.mail_configured,
        approvers=decision.values["approvers"],
    )
    due = min(d for d in (approval.remind_at, approval.expires_at) if d is not None)
    await moves.move_run(session, run, AWAITING_APPROVAL, worker_id=h.worker_id, due_at=due, now=now)
    return True


async def resume_approval(h: Holder, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision) -> bool:
    """The approval was decided, expired, or is due a reminder: act on it."""
    now = h.clock.now()
    steps: list[dict[str, Any]] = revision.definition.get("steps", [])
    step = steps[run.step_index]
    approval = await approvals.for_step(session, run.id, step["id"])
    if approval is None:
        attempt = new_attempt(h, run, revision, step, STEP_TYPES["approval"], 1)
        failure = StepFailure("approval_missing", "The run's approval record is missing.", permanent=True)
        await record_failure(h, session, run, attempt, failure)
        return True
    if approval.status == approval_models.PENDING:
        if approval.expires_at <= now:
            await approvals.expire(session, approval, now=now, correlation_id=run.id)
        elif approval.reminded_at is None and approval.remind_at is not None and approval.remind_at <= now:
            await approvals.remind(session, approval, now=now, mail_configured=h.settings.mail_configured)
            await moves.set_due(session, run, worker_id=h.worker_id, due_at=approval.expires_at, now=now)
            return True
        else:
            due = approval.expires_at if approval.reminded_at else (approval.remind_at or approval.expires_at)
            await moves.set_due(session, run, worker_id=h.worker_id, due_at=due, now=now)
            return False
    attempt = new_attempt(h, run, revision, step, STEP_TYPES["approval"], 1)
    attempt.started_at = approval.created_at
    decision = {
        "approval_id": approval.id,
        "step_id": approval.step_id,
        "status": approval.status,
        "decided_by": approval.decided_by,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "comment": approval.comment,
    }
    context = {**run.context, "approvals": [*(run.context.get("approvals") or []), decision]}
    if approval.status == approval_models.APPROVED:
        attempt.state = ATTEMPT_SUCCEEDED
        attempt.result = {"approval_id": approval.id, "decided_by": approval.decided_by}
        attempt.finished_at = now
        await moves.record_attempt(session, attempt)
        await audit_step_succeeded(session, run, attempt)
        await moves.move_run(
            session,
            run,
            RUNNING,
            worker_id=h.worker_id,
            due_at=now,
            now=now,
            step_index=run.step_index + 1,
            context=context,
        )
        return True
    category = {approval_models.REJECTED: "approval_rejected", approval_models.EXPIRED: "approval_expired"}.get(
        approval.status, "cancelled"
    )
    words = {
        "approval_rejected": "The approval was rejected.",
        "approval_expired": "The approval expired before anyone decided.",
    }.get(category, "The approval was cancelled.")
    # The decision goes into the context as an approval does, so the run's outcome names who
    # said no and why (engine/runs/outcome.py).
    await record_failure(h, session, run, attempt, StepFailure(category, words, permanent=True), context=context)
    return True


async def end_wait(h: Holder, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision) -> bool:
    """The wait is over (the claim only takes a run once it is due): record it and go on."""
    now = h.clock.now()
    steps: list[dict[str, Any]] = revision.definition.get("steps", [])
    step = steps[run.step_index]
    attempt = new_attempt(h, run, revision, step, STEP_TYPES["wait"], 1)
    waited = run.context.get("wait") or {}
    if waited.get("since"):
        attempt.started_at = datetime.fromisoformat(waited["since"])
    attempt.state = ATTEMPT_SUCCEEDED
    attempt.result = {"waited": step.get("duration")}
    attempt.finished_at = now
    await moves.record_attempt(session, attempt)
    await audit_step_succeeded(session, run, attempt)
    context = {k: v for k, v in run.context.items() if k != "wait"}
    await moves.move_run(
        session,
        run,
        RUNNING,
        worker_id=h.worker_id,
        due_at=now,
        now=now,
        step_index=run.step_index + 1,
        context=context,
    )
    return True
