"""What the runner records when an approval step resumes and when a wait ends: the decision kept in
the run's context, the attempt and its result, the audit events, the failure per approval status,
and the due times the run sleeps until (user guide "Approvals, waits and notices"; api.md "The run
document")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import text

from engine.directory.models import User
from engine.runs.models import StepAttempt
from engine.runs.runner import Runner
from engine.runs.runstore import leases
from testing.approvals import approval_row, decide
from testing.factories import RealmHandle
from testing.runs import advance_once, clock_now, drain, load, make_runner, rows, start
from testing.workflows import manual, publish

LEASE = timedelta(seconds=30)


def approval_step(step_id: str, approver: User, expires_in: str = "2h") -> dict[str, Any]:
    return {"id": step_id, "type": "approval", "approvers": [approver.id], "expires_in": expires_in}


async def execute(realm: RealmHandle, sql: str, **params: Any) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text(sql), params)


async def step_events(realm: RealmHandle, run_id: str) -> list[tuple[str, str, str | None, str | None, Any]]:
    """(type, category, subject type, subject id, details) of the run's step and run events, oldest first."""
    return [
        (t, c, st, sid, d)
        for t, c, st, sid, d in await rows(
            realm,
            "SELECT type, category, subject_type, subject_id, details FROM audit_events"
            " WHERE correlation_id = :r AND (type LIKE 'workflow.step.%' OR type LIKE 'workflow.run.%') ORDER BY id",
            r=run_id,
        )
    ]


async def requests_sent(realm: RealmHandle, approver: User) -> int:
    [(count,)] = await rows(
        realm,
        "SELECT count(*) FROM workflow_notices WHERE user_id = :u AND notice = 'approval_requested'",
        u=approver.id,
    )
    return int(count)


async def claim(r: Runner, realm: RealmHandle) -> list[str]:
    async with realm.sessions() as session, session.begin():
        claimed = await leases.claim_due_runs(
            session, r.worker_id, now=r.clock.now(), lease=LEASE, batch_size=10, tenant_share=10
        )
    return [c.run_id for c in claimed]


def by_step(attempts: list[StepAttempt]) -> dict[str, StepAttempt]:
    return {a.step_id: a for a in attempts}


# --- An approval decided: the context, the attempt, the audit ---------------------------------------


async def test_each_decision_is_appended_to_the_runs_context_with_when_and_why(realm: RealmHandle) -> None:
    """Every approval step that is approved adds its decision (id, step, status, decider, time,
    comment) to ``context["approvals"]``, after the decisions of earlier steps."""
    subject, first, second = await realm.user(), await realm.user(), await realm.user()
    wid = await publish(
        realm,
        manual(approval_step("manager", first), approval_step("security", second), {"id": "done", "type": "end"}),
    )
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    first_at = clock.now()
    first_id = await decide(realm, first, run_id, "manager", approve=True, comment="Looks right", now=first_at)
    await drain(r)
    run, _ = await load(realm, run_id)
    assert (run.state, run.step_index) == ("awaiting_approval", 1)
    clock.advance(minutes=7)
    second_at = clock.now()
    second_id = await decide(realm, second, run_id, "security", approve=True, comment=None, now=second_at)
    await drain(r)

    run, _ = await load(realm, run_id)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    assert run.context == {
        "approvals": [
            {
                "approval_id": first_id,
                "step_id": "manager",
                "status": "approved",
                "decided_by": first.id,
                "decided_at": first_at.isoformat(),
                "comment": "Looks right",
            },
            {
                "approval_id": second_id,
                "step_id": "security",
                "status": "approved",
                "decided_by": second.id,
                "decided_at": second_at.isoformat(),
                "comment": None,
            },
        ]
    }


async def test_an_approved_step_succeeds_once_with_the_decider_as_its_result_and_is_audited_on_the_run(
    realm: RealmHandle,
) -> None:
    """The approval step's one attempt succeeds with ``{"approval_id", "decided_by"}``, is never
    retried (at most 1 attempt, no backoff), runs from the request to the resume, and its
    ``workflow.step.succeeded`` event is a workflow event about the run."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    requested = await approval_row(realm, run_id, "approve")
    clock.advance(minutes=3)
    approval_id = await decide(realm, approver, run_id, "approve", approve=True, comment="ok", now=clock.now())
    clock.advance(seconds=4)
    await drain(r)

    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    attempt = by_step(attempts)["approve"]
    assert (attempt.step_type, attempt.number, attempt.state, attempt.result) == (
        "approval",
        1,
        "succeeded",
        {"approval_id": approval_id, "decided_by": approver.id},
    )
    assert (attempt.max_attempts, attempt.backoff_ms) == (1, 0)
    assert attempt.input == {
        "step": approval_step("approve", approver),
        "subject_id": subject.id,
        "organization_id": run.organization_id,
    }
    assert (attempt.started_at, attempt.finished_at) == (requested.created_at, clock.now())
    assert (attempt.error_category, attempt.error_message) == (None, None)
    assert [e for e in await step_events(realm, run_id) if e[0] == "workflow.step.succeeded"] == [
        (
            "workflow.step.succeeded",
            "workflow",
            "workflow_run",
            run_id,
            {"step_id": "approve", "attempt": 1, "idempotency_key": f"{run_id}.approve"},
        ),
        (
            "workflow.step.succeeded",
            "workflow",
            "workflow_run",
            run_id,
            {"step_id": "done", "attempt": 1, "idempotency_key": f"{run_id}.done"},
        ),
    ]


# --- An approval not approved: one failure per status ---------------------------------------------


async def test_a_rejection_fails_the_step_for_good_with_the_rejection_message(realm: RealmHandle) -> None:
    """Rejected: the attempt fails ``approval_rejected`` / "The approval was rejected.", never
    retried, and the run fails with that reason."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    await decide(realm, approver, run_id, "approve", approve=False, comment="No", now=clock.now())
    await drain(r)

    run, attempts = await load(realm, run_id)
    [attempt] = attempts
    assert (attempt.step_id, attempt.step_type, attempt.number, attempt.state) == ("approve", "approval", 1, "failed")
    assert (attempt.error_category, attempt.error_message) == ("approval_rejected", "The approval was rejected.")
    assert (attempt.max_attempts, attempt.backoff_ms, attempt.result) == (1, 0, None)
    assert (run.state, run.error_category, run.last_error) == (
        "failed",
        "approval_rejected",
        "The approval was rejected.",
    )
    events = await step_events(realm, run_id)
    assert [e[0] for e in events] == [
        "workflow.run.started",
        "workflow.step.failed",
        "workflow.run.failed",
        "workflow.run.failed",
    ]
    assert [e for e in events if e[0] == "workflow.step.failed"] == [
        (
            "workflow.step.failed",
            "workflow",
            "workflow_run",
            run_id,
            {"step_id": "approve", "attempt": 1, "error_category": "approval_rejected"},
        )
    ]


async def test_an_expiry_fails_the_step_for_good_with_the_expiry_message(realm: RealmHandle) -> None:
    """Nobody decided before ``expires_in``: the attempt fails ``approval_expired`` / "The approval
    expired before anyone decided.", and the run fails with that reason."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver, "1h"), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    clock.advance(minutes=61)
    await drain(r)

    run, attempts = await load(realm, run_id)
    [attempt] = attempts
    assert (attempt.step_id, attempt.number, attempt.state, attempt.max_attempts) == ("approve", 1, "failed", 1)
    assert (attempt.error_category, attempt.error_message) == (
        "approval_expired",
        "The approval expired before anyone decided.",
    )
    assert (run.state, run.error_category, run.last_error) == (
        "failed",
        "approval_expired",
        "The approval expired before anyone decided.",
    )
    assert (await approval_row(realm, run_id, "approve")).status == "expired"


async def test_an_approval_closed_without_a_decision_fails_the_step_as_cancelled(realm: RealmHandle) -> None:
    """An approval the run finds neither pending, approved, rejected nor expired fails the step
    ``cancelled`` / "The approval was cancelled.", for good."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    await execute(
        realm,
        "UPDATE workflow_approvals SET status = 'cancelled', decided_at = :t WHERE run_id = :r",
        t=clock.now(),
        r=run_id,
    )
    clock.advance(minutes=61)  # the run wakes at its reminder time
    await drain(r)

    run, attempts = await load(realm, run_id)
    [attempt] = attempts
    assert (attempt.step_id, attempt.number, attempt.state) == ("approve", 1, "failed")
    assert (attempt.error_category, attempt.error_message) == ("cancelled", "The approval was cancelled.")
    assert (run.state, run.error_category, run.last_error) == ("failed", "cancelled", "The approval was cancelled.")
    assert await requests_sent(realm, approver) == 1  # no reminder for a closed approval


async def test_a_missing_approval_record_fails_the_step_for_good_as_approval_missing(realm: RealmHandle) -> None:
    """A run awaiting an approval whose record is gone fails the approval step ``approval_missing``
    / "The run's approval record is missing." — permanently (the run's reason is
    ``approval_missing``, not ``retries_exhausted``) — and undoes what it did."""
    subject, approver = await realm.user(), await realm.user()
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": viewer.id, "scope": "realm"},
            approval_step("approve", approver),
            {"id": "done", "type": "end"},
        ),
    )
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    await execute(realm, "DELETE FROM workflow_approvals WHERE run_id = :r", r=run_id)
    clock.advance(minutes=61)
    await drain(r)

    run, attempts = await load(realm, run_id)
    assert [(a.step_id, a.state) for a in attempts] == [("grant", "succeeded"), ("approve", "failed")]
    attempt = by_step(attempts)["approve"]
    assert (attempt.step_type, attempt.number, attempt.step_index) == ("approval", 1, 1)
    assert (attempt.error_category, attempt.error_message) == (
        "approval_missing",
        "The run's approval record is missing.",
    )
    assert (attempt.max_attempts, attempt.backoff_ms, attempt.idempotency_key) == (1, 0, f"{run_id}.approve")
    assert attempt.finished_at == clock.now()
    assert (run.state, run.error_category, run.last_error) == (
        "compensated",
        "approval_missing",
        "The run's approval record is missing.",
    )
    assert by_step(attempts)["grant"].compensation_state == "done"
    events = await step_events(realm, run_id)
    assert [e for e in events if e[0] == "workflow.step.failed"] == [
        (
            "workflow.step.failed",
            "workflow",
            "workflow_run",
            run_id,
            {"step_id": "approve", "attempt": 1, "error_category": "approval_missing"},
        )
    ]
    assert [e[4] for e in events if e[0] == "workflow.run.failed"] == [
        {"reason": "approval_missing", "error_category": "approval_missing", "phase": "compensating"}
    ]


# --- While the approval is pending: the reminder and the due times --------------------------------


async def test_the_reminder_moves_the_runs_next_wake_to_the_expiry_in_the_same_transition(
    realm: RealmHandle,
) -> None:
    """Half the time to expiry passed: one transition sends the reminder and, under the worker's
    lease, makes the run due again only at the approval's expiry (the run keeps waiting for its
    approver; the run's ``updated_at`` is the reminder's time)."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    approval = await approval_row(realm, run_id, "approve")
    run, _ = await load(realm, run_id)
    assert run.due_at == approval.remind_at
    clock.current = approval.remind_at
    assert await claim(r, realm) == [run_id]
    assert await advance_once(r, run_id)

    run, attempts = await load(realm, run_id)
    assert (run.state, run.lease_owner, attempts) == ("awaiting_approval", r.worker_id, [])
    assert (run.due_at, run.updated_at) == (approval.expires_at, clock.now())
    assert (await approval_row(realm, run_id, "approve")).reminded_at == clock.now()
    assert await requests_sent(realm, approver) == 2


async def test_a_run_woken_before_the_reminder_goes_back_to_sleep_until_it_without_reminding(
    realm: RealmHandle,
) -> None:
    """A run found due while its approval is pending, not expired and not yet due a reminder makes
    no transition: it sleeps again until the reminder time, and nobody is reminded early."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    approval = await approval_row(realm, run_id, "approve")
    clock.advance(minutes=20)
    await execute(realm, "UPDATE workflow_runs SET due_at = :t WHERE id = :r", t=clock.now(), r=run_id)

    assert await r.run_pass() == 0
    run, attempts = await load(realm, run_id)
    assert (run.state, run.due_at, run.updated_at, attempts) == (
        "awaiting_approval",
        approval.remind_at,
        clock.now(),
        [],
    )
    assert (run.lease_owner, run.lease_expires_at) == (None, None)
    assert (await approval_row(realm, run_id, "approve")).reminded_at is None
    assert await requests_sent(realm, approver) == 1


async def test_a_run_woken_after_the_reminder_goes_back_to_sleep_until_the_expiry_without_reminding_again(
    realm: RealmHandle,
) -> None:
    """The reminder is sent once: a run found due between the reminder and the expiry makes no
    transition and sleeps again until the approval expires."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    approval = await approval_row(realm, run_id, "approve")
    clock.current = approval.remind_at
    await drain(r)
    assert await requests_sent(realm, approver) == 2
    clock.advance(minutes=10)
    await execute(realm, "UPDATE workflow_runs SET due_at = :t WHERE id = :r", t=clock.now(), r=run_id)

    assert await r.run_pass() == 0
    run, _ = await load(realm, run_id)
    assert (run.state, run.due_at, run.updated_at) == ("awaiting_approval", approval.expires_at, clock.now())
    assert (await approval_row(realm, run_id, "approve")).reminded_at == approval.remind_at
    assert await requests_sent(realm, approver) == 2


# --- Waits -----------------------------------------------------------------------------------------


async def test_the_end_of_a_wait_is_audited_on_the_run_and_drops_only_the_wait_from_the_context(
    realm: RealmHandle,
) -> None:
    """A wait ends with one succeeded attempt (``{"waited": duration}``, from the wait's start, never
    retried), a ``workflow.step.succeeded`` event about the run, and a context that no longer holds
    the wait but keeps the decisions made before it."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(
        realm,
        manual(
            approval_step("approve", approver),
            {"id": "pause", "type": "wait", "duration": "1h"},
            {"id": "done", "type": "end"},
        ),
    )
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    await drain(r)
    approval_id = await decide(realm, approver, run_id, "approve", approve=True, comment="fine", now=clock.now())
    decision = {
        "approval_id": approval_id,
        "step_id": "approve",
        "status": "approved",
        "decided_by": approver.id,
        "decided_at": clock.now().isoformat(),
        "comment": "fine",
    }
    clock.advance(seconds=30)
    since = clock.now()
    await drain(r)
    run, _ = await load(realm, run_id)
    assert run.state == "waiting"
    assert run.context == {"approvals": [decision], "wait": {"step_id": "pause", "since": since.isoformat()}}
    clock.advance(hours=1)
    await drain(r)

    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    assert run.context == {"approvals": [decision]}
    pause = by_step(attempts)["pause"]
    assert (pause.step_type, pause.number, pause.state, pause.result) == ("wait", 1, "succeeded", {"waited": "1h"})
    assert (pause.max_attempts, pause.backoff_ms) == (1, 0)
    assert pause.input == {
        "step": {"id": "pause", "type": "wait", "duration": "1h"},
        "subject_id": subject.id,
        "organization_id": run.organization_id,
    }
    assert (pause.started_at, pause.finished_at) == (since, clock.now())
    assert [e for e in await step_events(realm, run_id) if e[0] == "workflow.step.succeeded"] == [
        (
            "workflow.step.succeeded",
            "workflow",
            "workflow_run",
            run_id,
            {"step_id": step, "attempt": 1, "idempotency_key": f"{run_id}.{step}"},
        )
        for step in ("approve", "pause", "done")
    ]


async def test_a_pass_counts_the_transitions_it_made(realm: RealmHandle) -> None:
    """A pass counts one per transition: starting into a wait is one; ending the wait and
    then the end step are two more, after which the run is finished."""
    subject = await realm.user()
    wid = await publish(realm, manual({"id": "pause", "type": "wait", "duration": "1h"}, {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    assert await r.run_pass() == 1
    run, _ = await load(realm, run_id)
    assert (run.state, run.lease_owner) == ("waiting", None)
    clock.advance(hours=1)
    assert await r.run_pass() == 2
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded"
    assert [(a.step_id, a.state) for a in attempts] == [("pause", "succeeded"), ("done", "succeeded")]


async def test_a_pass_counts_the_request_for_an_approval_as_a_transition(realm: RealmHandle) -> None:
    """Starting a run into its approval step is one transition; the run then sleeps without a lease."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(realm, manual(approval_step("approve", approver), {"id": "done", "type": "end"}))
    clock = clock_now()
    r = make_runner(realm, clock)
    run_id = await start(realm, wid, subject.id)
    assert await r.run_pass() == 1
    run, attempts = await load(realm, run_id)
    assert (run.state, run.lease_owner, attempts) == ("awaiting_approval", None, [])
    assert await requests_sent(realm, approver) == 1
