"""What endpoint calls, their compensation and the run store's lease and due-time verbs write.

Endpoint calls go to a real receiver on 127.0.0.1 (testing/receiver.py) with both private-egress
switches on. Each test pins the exact records: an attempt's ``result``, a compensation's result,
error and tries, the audit event and its details, and a run's due time, update time and lease.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from engine.platform.clock import FixedClock
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs.endpoint_calls import complete_call
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.runner import Runner
from engine.runs.runstore import leases, moves, scheduling
from engine.runs.states import TransitionRefused
from testing.directory import in_group, joins_then_fails, outage, outage_over
from testing.factories import RealmHandle
from testing.receiver import Received, Receiver
from testing.runs import drain, load, start, transition_once
from testing.webhooks import call_runner, calling, run_one, subscribe
from testing.workflows import manual, publish

LEASE = timedelta(seconds=30)


def undone_by_the_endpoint(hook: str) -> dict[str, Any]:
    """A call the endpoint can undo, then a call the endpoint rejects for good (so the first is undone)."""
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "sync", "type": "call_webhook", "subscription_id": hook, "compensate": True},
            {"id": "reject", "type": "call_webhook", "subscription_id": hook},
        ],
    }


def answering(compensation_tries: dict[int, int]) -> Any:
    """The receiver's answers: 400 to ``reject``, the given status to each compensation try, else 200."""

    def answer(r: Received) -> int:
        body = r.json
        if body["step_id"] == "reject":
            return 400
        if body["action"] == "compensate":
            return compensation_tries[body["attempt"]]
        return 200

    return answer


async def claim(realm: RealmHandle, worker: Runner, clock: FixedClock) -> list[str]:
    async with realm.sessions() as session, session.begin():
        claimed = await leases.claim_due_runs(
            session, worker.worker_id, now=clock.now(), lease=LEASE, batch_size=10, tenant_share=10
        )
    return [c.run_id for c in claimed]


async def trail(realm: RealmHandle, run_id: str) -> list[tuple[str, str | None, str | None, Any]]:
    """(type, subject type, subject id, details) of the run's workflow audit events, oldest first."""
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, subject_type, subject_id, details FROM audit_events "
                "WHERE correlation_id = :r AND type LIKE 'workflow.%' ORDER BY id"
            ),
            {"r": run_id},
        )
        return [(t, st, si, d) for t, st, si, d in rows]


def timing(result: dict[str, Any] | None, status: int, within_ms: tuple[float, float] = (0, 10_000)) -> None:
    """An endpoint answer as recorded: exactly its status code and its latency in milliseconds, which
    lies in ``within_ms`` (by default no longer than the test runner's 10 s call timeout)."""
    assert result is not None
    assert sorted(result) == ["latency_ms", "status_code"], result
    assert result["status_code"] == status
    low, high = within_ms
    assert isinstance(result["latency_ms"], int) and low <= result["latency_ms"] <= high, (result, within_ms)


def the(attempts: list[StepAttempt], step_id: str) -> StepAttempt:
    [attempt] = [a for a in attempts if a.step_id == step_id]
    return attempt


# --- an endpoint call's attempt ----------------------------------------------------------------------


async def test_a_failed_call_records_the_answers_status_and_latency_on_its_attempt(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """An answer that fails the step still leaves its status code and latency on the attempt, beside
    the error category and message; the retry that succeeds records the same two keys. The latency
    is the time the endpoint took, in milliseconds: a 300 ms answer records 300 ms or a little more."""
    answers = iter([(500, 0.3), 200])
    receiver.respond = lambda _r: next(answers)
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = call_runner(realm, clock=clock)
    before = time.monotonic()
    await drain(worker)
    elapsed_ms = (time.monotonic() - before) * 1000
    run, attempts = await load(realm, run_id)
    [failed] = attempts
    assert (failed.state, failed.error_category, failed.error_message) == ("failed", "http_500", "HTTP 500")
    timing(failed.result, 500, within_ms=(300, elapsed_ms))
    assert (run.state, run.error_category, run.last_error) == ("running", "http_500", "HTTP 500")
    clock.advance(seconds=5)
    await drain(worker)
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded"
    first, second = (a for a in attempts if a.step_id == "sync")
    timing(first.result, 500, within_ms=(300, elapsed_ms))
    assert (second.number, second.state, second.error_category) == (2, "succeeded", None)
    timing(second.result, 200)


# --- compensation by the endpoint ---------------------------------------------------------------------


async def test_a_failed_compensation_call_is_recorded_and_waits_its_backoff_then_the_next_try_completes_it(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """A compensation call answered 503 is one failed try: its category and message on the attempt,
    the run due again after the 30 s backoff; the try that gets through records the endpoint's
    answer as the compensation result and audits it on the run."""
    receiver.respond = answering({1: 503, 2: 200})
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, undone_by_the_endpoint(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    failed_at = clock.now()
    worker = call_runner(realm, clock=clock)
    await drain(worker)
    run, attempts = await load(realm, run_id)
    sync = the(attempts, "sync")
    assert (run.state, run.error_category) == ("compensating", "http_400")
    assert (run.due_at, run.updated_at, run.lease_owner) == (failed_at + timedelta(seconds=30), failed_at, None)
    assert (sync.compensation_state, sync.compensation_attempts, sync.compensation_error) == (
        "pending",
        1,
        "http_503: HTTP 503",
    )
    assert sync.compensation_result is None and sync.compensated_at is None
    kinds = [kind for kind, _, _, _ in await trail(realm, run_id)]
    assert "workflow.step.compensated" not in kinds and "workflow.step.compensation_failed" not in kinds

    clock.advance(seconds=29)
    await drain(worker)  # not due yet: no second try
    assert [r.json["attempt"] for r in receiver.requests() if r.json["action"] == "compensate"] == [1]
    clock.advance(seconds=1)
    await drain(worker)
    run, attempts = await load(realm, run_id)
    sync = the(attempts, "sync")
    assert run.state == "compensated"
    assert (sync.compensation_state, sync.compensation_attempts, sync.compensated_at) == ("done", 2, clock.now())
    timing(sync.compensation_result, 200)
    compensated = [(st, si, d) for kind, st, si, d in await trail(realm, run_id) if kind == "workflow.step.compensated"]
    assert compensated == [
        ("workflow_run", run_id, {"step_id": "sync", "attempt": 1, "result": sync.compensation_result})
    ]


async def test_a_compensation_call_rejected_for_good_fails_the_compensation_at_once(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """410 to a compensation call is permanent: no further try. The attempt records the category
    and message, the audit event the step, category and tries, and the run is due at that moment
    (written then) so the next transition ends it compensation_failed."""
    receiver.respond = answering({1: 410})
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, undone_by_the_endpoint(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    worker = call_runner(realm, clock=clock)
    assert await claim(realm, worker, clock) == [run_id]
    assert await transition_once(worker, run_id) == (True, False)  # sync called and succeeded
    assert await transition_once(worker, run_id) == (True, False)  # reject answered 400: compensating
    run, _ = await load(realm, run_id)
    assert (run.state, run.due_at, run.updated_at) == ("compensating", clock.now(), clock.now())
    clock.advance(seconds=5)
    assert await transition_once(worker, run_id) == (True, False)  # the compensation call, answered 410
    run, attempts = await load(realm, run_id)
    sync = the(attempts, "sync")
    assert (sync.compensation_state, sync.compensation_attempts, sync.compensation_error) == (
        "failed",
        1,
        "gone: HTTP 410",
    )
    assert sync.compensation_result is None
    assert (run.state, run.due_at, run.updated_at, run.lease_owner) == (
        "compensating",
        clock.now(),
        clock.now(),
        worker.worker_id,
    )
    failed = [
        (st, si, d) for kind, st, si, d in await trail(realm, run_id) if kind == "workflow.step.compensation_failed"
    ]
    assert failed == [("workflow_run", run_id, {"step_id": "sync", "error_category": "gone", "tries": 1})]
    assert await transition_once(worker, run_id) == (True, True)
    run, _ = await load(realm, run_id)
    assert (run.state, run.error_category, run.due_at) == ("compensation_failed", "http_400", None)
    assert (await trail(realm, run_id))[-1][0::3] == (
        "workflow.run.compensation_failed",
        {"error_category": "http_400"},
    )
    assert len([r for r in receiver.requests() if r.json["action"] == "compensate"]) == 1


async def test_a_compensation_answer_arriving_after_the_compensation_was_recorded_changes_nothing(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """Two tries of one compensation in flight: the second gets through and is recorded; the first
    one's late rejection is ignored — the step stays compensated, its result is the second answer,
    nothing more is audited and the run ends compensated."""
    receiver.respond = answering({1: 410, 2: 200})
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, undone_by_the_endpoint(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    worker = call_runner(realm, clock=clock)
    assert await claim(realm, worker, clock) == [run_id]
    assert await transition_once(worker, run_id) == (True, False)
    assert await transition_once(worker, run_id) == (True, False)
    in_flight: list[Any] = []
    assert await transition_once(worker, run_id, in_flight) == (True, False)  # try 1 counted, not answered yet
    [late] = in_flight
    assert await transition_once(worker, run_id) == (True, False)  # try 2 sent and answered 200
    run, attempts = await load(realm, run_id)
    done_at = clock.now()
    assert run.state == "compensating"
    recorded = the(attempts, "sync").compensation_result
    timing(recorded, 200)
    clock.advance(seconds=2)
    assert await complete_call(worker, late) is False  # try 1 answered 410, after the fact
    assert [r.json["attempt"] for r in receiver.requests() if r.json["action"] == "compensate"] == [2, 1]
    run, attempts = await load(realm, run_id)
    sync = the(attempts, "sync")
    assert (sync.compensation_state, sync.compensation_attempts, sync.compensation_error) == ("done", 2, None)
    assert (sync.compensation_result, sync.compensated_at) == (recorded, done_at)
    assert (run.state, run.due_at, run.updated_at) == ("compensating", done_at, done_at)
    assert await transition_once(worker, run_id) == (True, True)
    run, _ = await load(realm, run_id)
    assert run.state == "compensated"
    kinds = [kind for kind, _, _, _ in await trail(realm, run_id)]
    assert kinds.count("workflow.step.compensated") == 1 and "workflow.step.compensation_failed" not in kinds
    assert kinds[-1] == "workflow.run.compensated"


# --- recording a call's outcome: trouble, and what the pass learns --------------------------------


async def test_an_outcome_that_cannot_be_recorded_hands_the_lease_back_and_the_next_pass_takes_the_run(
    realm: RealmHandle, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """The endpoint answered but writing its outcome failed: one error line names the run, the
    lease goes back at once (not after it expires), and the next pass closes the started attempt
    as interrupted."""
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = call_runner(realm, clock=clock)
    assert await claim(realm, worker, clock) == [run_id]
    calls: list[Any] = []
    assert await transition_once(worker, run_id, calls) == (True, False)
    [call] = calls
    await outage(realm, "step_attempts", "UPDATE")
    with caplog.at_level(logging.WARNING, logger="cockpit.engine"):
        assert await worker.complete_call_alone(call) == "lost"
    assert len(receiver.requests()) == 1
    lines = [r for r in caplog.records if r.name == "cockpit.engine" and getattr(r, "run_id", None) == run_id]
    assert [(r.levelno, r.exc_info is not None) for r in lines] == [(logging.ERROR, True)]
    assert "endpoint call" in lines[0].getMessage()
    run, attempts = await load(realm, run_id)
    assert (run.state, run.lease_owner, run.lease_expires_at, run.due_at) == ("running", None, None, clock.now())
    assert [(a.state, a.result) for a in attempts] == [("started", None)]
    await outage_over(realm, "step_attempts")
    await drain(worker)  # the same moment: the lease was handed back, not left to expire
    run, attempts = await load(realm, run_id)
    assert [(a.state, a.error_category) for a in attempts] == [("failed", "interrupted")]
    assert run.state == "running"


async def test_when_the_lease_cannot_be_handed_back_either_the_run_is_left_to_its_expiry(
    realm: RealmHandle, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """The database refuses every change to the run: the outcome is not recorded and the lease not
    handed back — an error and a warning, both naming the run — and the pass goes on."""
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, calling(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = call_runner(realm, clock=clock)
    assert await claim(realm, worker, clock) == [run_id]
    calls: list[Any] = []
    assert await transition_once(worker, run_id, calls) == (True, False)
    [call] = calls
    await outage(realm, "workflow_runs", "UPDATE")
    with caplog.at_level(logging.WARNING, logger="cockpit.engine"):
        assert await worker.complete_call_alone(call) == "lost"
    await outage_over(realm, "workflow_runs")
    lines = [r for r in caplog.records if r.name == "cockpit.engine" and getattr(r, "run_id", None) == run_id]
    assert [(r.levelno, r.exc_info is not None) for r in lines] == [(logging.ERROR, True), (logging.WARNING, True)]
    run, attempts = await load(realm, run_id)
    assert (run.state, run.lease_owner, run.lease_expires_at) == ("running", worker.worker_id, clock.now() + LEASE)
    assert [a.state for a in attempts] == ["started"]


async def test_a_run_its_endpoint_call_finished_is_done_for_the_pass(
    realm: RealmHandle, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """A call that is the run's last step ends the run: the pass counts one transition and does not
    look for the run again (no "lease lost" line); recorded alone, the outcome says finished."""
    hook = await subscribe(realm, receiver)
    last_step = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "sync", "type": "call_webhook", "subscription_id": hook}],
    }
    _, run_id = await run_one(realm, last_step)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = call_runner(realm, clock=clock)
    with caplog.at_level(logging.WARNING, logger="cockpit.engine"):
        assert await worker.run_pass() == 1
    assert [r.getMessage() for r in caplog.records if r.name == "cockpit.engine"] == []
    run, _ = await load(realm, run_id)
    assert (run.state, run.lease_owner) == ("succeeded", None)

    _, other_id = await run_one(realm, last_step)
    _, going_on_id = await run_one(realm, calling(hook))
    clock.current = datetime.now(UTC) + timedelta(seconds=1)  # both due, however long the first pass took
    assert sorted(await claim(realm, worker, clock)) == sorted([other_id, going_on_id])
    calls: list[Any] = []
    assert await transition_once(worker, other_id, calls) == (True, False)
    assert await transition_once(worker, going_on_id, calls) == (True, False)
    assert [await worker.complete_call_alone(c) for c in calls] == ["finished", "moved"]
    assert [(await load(realm, r))[0].state for r in (other_id, going_on_id)] == ["succeeded", "running"]


# --- the run store: due times, leases, cancellation --------------------------------------------------


async def three_claimed_runs(realm: RealmHandle) -> tuple[datetime, str, str, str]:
    """Two runs leased by worker A and one by worker B (due, nothing done yet), and the moment of
    the claims: a second after the runs were made, so they are due then however slow the making."""
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    for _ in range(3):
        await start(realm, wid, subject.id)
    now = datetime.now(UTC) + timedelta(seconds=1)
    async with realm.sessions() as session, session.begin():
        a = await leases.claim_due_runs(session, "worker-a-1-aaaa", now=now, lease=LEASE, batch_size=2, tenant_share=2)
        b = await leases.claim_due_runs(session, "worker-b-1-bbbb", now=now, lease=LEASE, batch_size=1, tenant_share=1)
    (a1, a2), (b1,) = [c.run_id for c in a], [c.run_id for c in b]
    return now, a1, a2, b1


async def rows(realm: RealmHandle, *run_ids: str) -> list[tuple[Any, ...]]:
    """(due_at, updated_at, lease_owner, lease_expires_at) of each run."""
    found = []
    for run_id in run_ids:
        run, _ = await load(realm, run_id)
        found.append((run.due_at, run.updated_at, run.lease_owner, run.lease_expires_at))
    return found


async def test_set_due_moves_only_the_named_run_and_is_refused_without_this_workers_lease(realm: RealmHandle) -> None:
    """A later due time, written with its update time, for the one run named, held by this worker;
    the worker's other run keeps its own. A run another worker holds is refused and keeps its due
    time, though it was loaded in the refused transaction."""
    now, a1, a2, b1 = await three_claimed_runs(realm)
    before = await rows(realm, a1, a2, b1)
    later, moment = now + timedelta(hours=1), now + timedelta(seconds=2)
    async with realm.sessions() as session, session.begin():
        mine = await session.get(WorkflowRun, a1)
        assert mine is not None
        await moves.set_due(session, mine, worker_id="worker-a-1-aaaa", due_at=later, now=moment)
    with pytest.raises(TransitionRefused, match=f"^run {b1} is not held by worker-a-1-aaaa$"):
        async with realm.sessions() as session, session.begin():
            theirs = await session.get(WorkflowRun, b1)
            assert theirs is not None
            await moves.set_due(session, theirs, worker_id="worker-a-1-aaaa", due_at=later, now=moment)
    assert await rows(realm, a1, a2, b1) == [
        (later, moment, "worker-a-1-aaaa", now + LEASE),
        before[1],
        before[2],
    ]


async def test_release_lease_hands_back_only_the_named_run_and_only_this_workers_lease(realm: RealmHandle) -> None:
    """One run's lease goes back; the worker's other run and another worker's run keep theirs."""
    now, a1, a2, b1 = await three_claimed_runs(realm)
    async with realm.sessions() as session, session.begin():
        await leases.release_lease(session, a1, "worker-a-1-aaaa")
        await leases.release_lease(session, b1, "worker-a-1-aaaa")
    held = [row[2:] for row in await rows(realm, a1, a2, b1)]
    assert held == [(None, None), ("worker-a-1-aaaa", now + LEASE), ("worker-b-1-bbbb", now + LEASE)]


async def test_release_leases_hands_back_only_the_named_runs_and_only_this_workers_leases(realm: RealmHandle) -> None:
    """The end of a round hands back the leases of the runs named (one of this worker's, one of
    another's); the worker's other run, still going, keeps its lease, and so does the other worker."""
    now, a1, a2, b1 = await three_claimed_runs(realm)
    async with realm.sessions() as session, session.begin():
        await leases.release_leases(session, [a1, b1], "worker-a-1-aaaa")
    held = [row[2:] for row in await rows(realm, a1, a2, b1)]
    assert held == [(None, None), ("worker-a-1-aaaa", now + LEASE), ("worker-b-1-bbbb", now + LEASE)]


async def test_cancelling_a_paused_run_makes_it_due_now_and_drops_its_kept_due_time(realm: RealmHandle) -> None:
    """Disabling the workflow keeps the run's due time in its context; cancelling makes it due now
    and drops the kept time, so enabling the workflow again gives it nothing back."""
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    run_id = await start(realm, wid, subject.id)
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, wid, False)
    run, _ = await load(realm, run_id)
    assert run.due_at is None and "paused_due_at" in run.context
    async with realm.sessions() as session, session.begin():
        await runs.cancel_run(session, realm.actor, run_id, reason="stop")
    run, _ = await load(realm, run_id)
    assert run.cancel_requested_at is not None
    assert (run.due_at, run.updated_at, run.cancel_reason) == (run.cancel_requested_at, run.cancel_requested_at, "stop")
    assert "paused_due_at" not in run.context
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, wid, True)
    run, _ = await load(realm, run_id)
    assert run.due_at == run.cancel_requested_at and "paused_due_at" not in run.context


async def test_the_cancel_statement_takes_only_runs_in_a_forward_state(realm: RealmHandle) -> None:
    """Whatever the caller checked before: a run that finished, or compensates, is not marked for
    cancellation — no cancel fields, no new due time."""
    subject, _, compensating_wid = await joins_then_fails(realm, name="Compensates")
    finished_wid = await publish(realm, manual({"id": "done", "type": "end"}), name="Finishes")
    compensating_id = await start(realm, compensating_wid, subject.id)
    finished_id = await start(realm, finished_wid, subject.id)
    await outage(realm, "group_members", "DELETE")  # the undo waits for its retry
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    await drain(Runner(realm.sessions, "worker-cancel-1-aaaa", clock=clock))
    states = {r: (await load(realm, r))[0].state for r in (compensating_id, finished_id)}
    assert states == {compensating_id: "compensating", finished_id: "succeeded"}
    for run_id in (compensating_id, finished_id):
        before, _ = await load(realm, run_id)
        async with realm.sessions() as session, session.begin():
            marked = await scheduling.request_cancel(
                session, run_id, realm.id, by=realm.admin.id, reason="stop", now=clock.now() + timedelta(seconds=5)
            )
        assert marked is None
        after, _ = await load(realm, run_id)
        assert (after.cancel_requested_at, after.cancel_requested_by, after.cancel_reason) == (None, None, None)
        assert (after.due_at, after.updated_at) == (before.due_at, before.updated_at)


async def test_a_compensated_run_leaves_its_whole_trail_on_the_run_and_undoes_in_the_steps_organization(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """A call made in the step's own organization, then a step the endpoint rejects: the
    compensation call names the same organization as the call it undoes (not the run's), and the
    run's workflow events are exactly these, each about the run."""
    receiver.respond = answering({1: 200})
    hook = await subscribe(realm, receiver)
    org = await realm.organization("Elsewhere")
    definition = undone_by_the_endpoint(hook)
    definition["steps"][0]["organization_id"] = org.id
    _, run_id = await run_one(realm, definition)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    await drain(call_runner(realm, clock=clock))
    run, _ = await load(realm, run_id)
    assert (run.state, run.organization_id) == ("compensated", None)
    sent = [(r.json["step_id"], r.json["action"], r.json["organization_id"]) for r in receiver.requests()]
    assert sent == [("sync", "execute", org.id), ("reject", "execute", None), ("sync", "compensate", org.id)]
    events = await trail(realm, run_id)
    kinds = [
        "workflow.run.started",
        "workflow.step.succeeded",
        "workflow.step.failed",
        "workflow.run.failed",
        "workflow.step.compensated",
        "workflow.run.compensated",
    ]
    assert [(kind, st, si) for kind, st, si, _ in events] == [(kind, "workflow_run", run_id) for kind in kinds]
    async with realm.sessions() as session:
        categories = await session.execute(
            text(
                "SELECT type, category FROM audit_events WHERE correlation_id = :r AND type LIKE 'workflow.%' ORDER BY id"
            ),
            {"r": run_id},
        )
        assert [tuple(row) for row in categories] == [(kind, "workflow") for kind in kinds]
    details = [d for *_, d in events]
    assert details[1] == {"step_id": "sync", "attempt": 1, "idempotency_key": f"{run_id}.sync"}
    assert details[2] == {"step_id": "reject", "attempt": 1, "error_category": "http_400"}
    assert details[3] == {"reason": "http_400", "error_category": "http_400", "phase": "compensating"}
    timing(details[4].pop("result"), 200)
    assert details[4] == {"step_id": "sync", "attempt": 1}
    assert details[5] == {"error_category": "http_400"}


async def test_a_compensation_call_that_cannot_be_made_is_a_failed_try_then_made_when_it_can(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """The subscription is paused when the call that undoes a step is due: nothing is sent, the try
    counts as failed with the reason, and the run waits the backoff; once the subscription is active
    again, the next try is sent and the compensation is done."""
    receiver.respond = answering({2: 200})  # the second try is the first sent
    hook = await subscribe(realm, receiver)
    _, run_id = await run_one(realm, undone_by_the_endpoint(hook))
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    worker = call_runner(realm, clock=clock)
    assert await claim(realm, worker, clock) == [run_id]
    assert await transition_once(worker, run_id) == (True, False)  # sync called and succeeded
    assert await transition_once(worker, run_id) == (True, False)  # reject answered 400: compensating

    async def subscription_state(state: str) -> None:
        async with realm.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE webhook_subscriptions SET state = :s WHERE id = :h"), {"s": state, "h": hook}
            )

    await subscription_state("paused")
    assert await transition_once(worker, run_id) == (True, False)  # a try, failed before any call
    run, attempts = await load(realm, run_id)
    sync = the(attempts, "sync")
    assert (sync.compensation_state, sync.compensation_attempts, sync.compensation_error) == (
        "pending",
        1,
        f"subscription_paused: The webhook subscription {hook} is paused; retried later.",
    )
    assert (run.state, run.due_at, run.updated_at) == ("compensating", clock.now() + timedelta(seconds=30), clock.now())
    assert [r.json["action"] for r in receiver.requests()] == ["execute", "execute"]

    await subscription_state("active")
    clock.advance(seconds=30)
    await drain(worker)
    run, attempts = await load(realm, run_id)
    sync = the(attempts, "sync")
    assert run.state == "compensated"
    assert (sync.compensation_state, sync.compensation_attempts) == ("done", 2)
    assert [r.json["action"] for r in receiver.requests()] == ["execute", "execute", "compensate"]


async def test_one_runs_failed_compensation_does_not_decide_how_another_run_ends(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """Two runs compensate in the same passes; the endpoint refuses for good to undo the first's
    call only. The first ends compensation_failed, the second compensated: each run's end is
    decided by its own attempts."""
    runs_refused: set[str] = set()

    def answer(r: Received) -> int:
        body = r.json
        if body["step_id"] == "reject":
            return 400
        if body["action"] == "compensate":
            return 410 if body["run_id"] in runs_refused else 200
        return 200

    receiver.respond = answer
    hook = await subscribe(realm, receiver)
    _, refused = await run_one(realm, undone_by_the_endpoint(hook))
    _, undone = await run_one(realm, undone_by_the_endpoint(hook))
    runs_refused.add(refused)
    await drain(call_runner(realm, clock=FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)))
    assert [(await load(realm, r))[0].state for r in (refused, undone)] == ["compensation_failed", "compensated"]


async def test_a_step_whose_type_this_worker_does_not_know_is_never_guessed_at_when_undoing_it(
    realm: RealmHandle,
) -> None:
    """A succeeded step left to undo whose stored type the worker does not know (a newer worker
    made it, or the row was edited) is not undone by guessing: its compensation fails at once and
    for good, ``definition_unavailable`` naming the type, in one try, and what it did is left for an
    administrator (the run ends ``compensation_failed``)."""
    subject, group_id, wid = await joins_then_fails(realm, {"id": "pause", "type": "wait", "duration": "1h"})
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = Runner(realm.sessions, "worker-test-1-aaaa", clock=clock)
    await drain(worker)
    run, attempts = await load(realm, run_id)
    assert run.state == "waiting" and the(attempts, "team").compensation_state == "pending"
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE step_attempts SET step_type = 'teleport' WHERE run_id = :r AND step_id = 'team'"),
            {"r": run_id},
        )

    clock.advance(seconds=3601)
    await drain(worker)
    run, attempts = await load(realm, run_id)
    team = the(attempts, "team")
    assert run.state == "compensation_failed", (run.state, run.last_error)
    assert (team.compensation_state, team.compensation_attempts, team.compensation_error) == (
        "failed",
        1,
        "definition_unavailable: No step type 'teleport' here.",
    )
    assert await in_group(realm, group_id, subject.id)  # left for an administrator to undo
    failed = [d for t, _, _, d in await trail(realm, run_id) if t == "workflow.step.compensation_failed"]
    assert failed == [{"step_id": "team", "error_category": "definition_unavailable", "tries": 1}]
