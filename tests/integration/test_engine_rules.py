"""The engine's rules, each pinned by what it leaves in the database (seed 000, "Limits and
validation", "Execution and idempotency", "Compensation", "Cancellation", "Audit events").

Directory trouble is real here: a PostgreSQL trigger that refuses writes to a table stands for
the directory being unavailable (an infrastructure error, so a transient failure).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.clock import FixedClock
from engine.runs.retry import CAP_MS
from engine.runs.runstore import leases
from testing.directory import in_group, joins_then_fails, member_group, outage, outage_over
from testing.factories import RealmHandle, bearer
from testing.runs import advance, drain, events, load, make_runner, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]
HOUR = timedelta(hours=1)


# --- retries: jitter after the 6 h cap, and the runner really uses it -----------------------------


async def test_retry_waits_double_are_capped_at_six_hours_then_jittered(realm: RealmHandle) -> None:
    """Backoff 1 h doubling: 1 h, 2 h, 4 h, then 8 h capped to 6 h; the clock's jitter (0.5 → 10 %)
    is taken off after the cap, so the fourth wait is 5.4 h, never the bare cap."""
    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    wid = await publish(
        realm,
        manual(
            {"id": "team", "type": "add_to_group", "group_id": group_id, "retry": {"max_attempts": 5, "backoff": "1h"}}
        ),
    )
    run_id = await start(realm, wid, subject.id)
    await outage(realm, "group_members", "INSERT")
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.5)
    runner = make_runner(realm, clock)
    waits: list[timedelta] = []
    for _ in range(4):
        await drain(runner)
        run, attempts = await load(realm, run_id)
        assert run.state == "running" and run.error_category == "error", (run.state, run.error_category)
        assert run.due_at is not None
        wait = run.due_at - clock.now()
        waits.append(wait)
        # Not due a moment before: the next attempt waits the whole (jittered) delay.
        clock.advance(seconds=wait.total_seconds() - 1)
        await drain(runner)
        assert len((await load(realm, run_id))[1]) == len(attempts)
        clock.advance(seconds=1)
    assert waits == [
        timedelta(hours=0.9),
        timedelta(hours=1.8),
        timedelta(hours=3.6),
        timedelta(milliseconds=CAP_MS * 0.9),  # 8 h capped to 6 h, then 10 % jitter off
    ]
    for wait, base in zip(waits, (1, 2, 4, 6), strict=True):
        assert base * HOUR * 0.8 <= wait < base * HOUR  # jitter is in (0, 20 %] off the capped delay
    await drain(runner)
    run, attempts = await load(realm, run_id)
    assert [a.number for a in attempts] == [1, 2, 3, 4, 5]
    assert all(a.state == "failed" and a.error_category == "error" for a in attempts)
    assert run.state == "failed" and run.error_category == "retries_exhausted"
    # One workflow.step.failed per failed attempt, in order, with the step, the number and the category.
    failed = [
        (actor, details) for kind, actor, details in await events(realm, run_id) if kind == "workflow.step.failed"
    ]
    assert [d for _, d in failed] == [
        {"step_id": "team", "attempt": n, "error_category": "error"} for n in (1, 2, 3, 4, 5)
    ]
    assert {actor for actor, _ in failed} == {realm.admin.id}  # the accountable publisher
    assert not await in_group(realm, group_id, subject.id)


async def test_a_permanent_failure_is_audited_once_then_compensated(realm: RealmHandle) -> None:
    """The exact trail of a run whose second step fails for good: the first step is undone."""
    subject, group_id, wid = await joins_then_fails(realm)
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=1))))
    run, attempts = await load(realm, run_id)
    assert run.state == "compensated" and run.error_category == "not_a_member"
    assert [(a.step_id, a.state, a.compensation_state) for a in attempts] == [
        ("team", "succeeded", "done"),
        ("leave", "failed", None),
    ]
    assert not await in_group(realm, group_id, subject.id)
    trail = await events(realm, run_id)
    assert [t for t, _, _ in trail] == [
        "workflow.run.started",
        "workflow.step.succeeded",
        "workflow.step.failed",
        "workflow.run.failed",
        "workflow.step.compensated",
        "workflow.run.compensated",
    ]
    details = {t: d for t, _, d in trail}
    assert details["workflow.step.failed"] == {"step_id": "leave", "attempt": 1, "error_category": "not_a_member"}
    assert details["workflow.run.failed"]["phase"] == "compensating"
    assert details["workflow.step.compensated"]["step_id"] == "team"
    assert details["workflow.run.compensated"] == {"error_category": "not_a_member"}
    assert {actor for t, actor, _ in trail if t != "workflow.run.started"} == {realm.admin.id}


# --- compensation: at most 5 tries, and no cancel while it runs ------------------------------------


async def test_compensation_gives_up_after_five_tries_and_cancel_is_refused_meanwhile(
    client: Client, realm: RealmHandle
) -> None:
    subject, group_id, wid = await joins_then_fails(realm)
    run_id = await start(realm, wid, subject.id)
    await outage(realm, "group_members", "DELETE")  # the undo cannot take the subject out again
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.5)
    runner = make_runner(realm, clock)
    await drain(runner)
    run, attempts = await load(realm, run_id)
    assert run.state == "compensating" and attempts[0].compensation_attempts == 1
    assert run.due_at == clock.now() + timedelta(seconds=27)  # 30 s backoff, 10 % jitter off

    # Cancelling while compensating is refused and changes nothing.
    other = await realm.user("other-admin@example.com")
    await realm.assign(other, await realm.builtin_role("realm-admin"))
    refused = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/cancel", json={"reason": "stop"}, headers=bearer(await realm.token(other))
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "conflict" and "compensating" in refused.json()["detail"]
    run, _ = await load(realm, run_id)
    assert run.state == "compensating" and run.cancel_requested_at is None and run.cancel_reason is None
    assert "workflow.run.cancel_requested" not in [t for t, _, _ in await events(realm, run_id)]

    waits = []
    for _ in range(10):  # bounded: the rule ends it after 5 tries in total
        run, _ = await load(realm, run_id)
        if run.state != "compensating":
            break
        assert run.due_at is not None
        waits.append(run.due_at - clock.now())
        clock.advance(seconds=(run.due_at - clock.now()).total_seconds())
        await drain(runner)
    run, attempts = await load(realm, run_id)
    assert run.state == "compensation_failed"
    assert attempts[0].compensation_state == "failed" and attempts[0].compensation_attempts == 5
    assert attempts[0].compensation_error and attempts[0].compensation_error.startswith("error:")
    assert waits == [timedelta(seconds=s) for s in (27, 54, 108, 216)]  # doubling, jittered
    assert await in_group(realm, group_id, subject.id)  # left for an administrator to undo
    trail = await events(realm, run_id)
    kinds = [t for t, _, _ in trail]
    assert kinds[-2:] == ["workflow.step.compensation_failed", "workflow.run.compensation_failed"]
    assert "workflow.step.compensated" not in kinds and "workflow.run.compensated" not in kinds
    assert trail[-2][2] == {"step_id": "team", "error_category": "error", "tries": 5}
    assert trail[-1][2] == {"error_category": "not_a_member"}
    # And the event for automation, written with that last transition.
    async with realm.sessions() as session:
        written = (
            await session.execute(
                text("SELECT type, payload FROM outbox_events WHERE correlation_id = :r ORDER BY id"), {"r": run_id}
            )
        ).all()
    assert [(t, p["state"], p["error_category"]) for t, p in written] == [
        ("workflow.run.compensation_failed", "compensation_failed", "not_a_member")
    ]


async def test_a_compensation_that_recovers_ends_compensated_not_cancelled(client: Client, realm: RealmHandle) -> None:
    subject, group_id, wid = await joins_then_fails(realm)
    run_id = await start(realm, wid, subject.id)
    await outage(realm, "group_members", "DELETE")
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    runner = make_runner(realm, clock)
    await drain(runner)
    refused = await client.post(f"{realm.api}/workflow-runs/{run_id}/cancel", json={}, headers=realm.headers)
    assert refused.status_code == 409 and refused.json()["code"] == "conflict"
    await outage_over(realm, "group_members")
    clock.advance(minutes=1)
    await drain(runner)
    run, attempts = await load(realm, run_id)
    assert run.state == "compensated" and run.cancel_requested_at is None
    assert attempts[0].compensation_state == "done" and attempts[0].compensation_attempts == 2
    kinds = [t for t, _, _ in await events(realm, run_id)]
    assert kinds[-2:] == ["workflow.step.compensated", "workflow.run.compensated"]
    assert "workflow.run.cancelled" not in kinds and "workflow.run.cancel_requested" not in kinds
    assert not await in_group(realm, group_id, subject.id)


# --- fairness: 25 transitions per claim, 50 runs per pass ------------------------------------------


async def forty_transitions(realm: RealmHandle) -> str:
    """A started run of 19 grants and a permanent failure: with its 19 undos and its end, 40 transitions."""
    subject = await realm.user("subject@example.com")
    elsewhere = await realm.organization("Elsewhere")
    steps: list[dict[str, Any]] = []
    for i in range(19):
        role = await realm.role(f"reader-{i:02d}", ["realm.workflows.read"])
        steps.append({"id": f"grant{i:02d}", "type": "assign_role", "role_id": role.id, "scope": "realm"})
    steps.append({"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id})
    wid = await publish(realm, manual(*steps))
    run_id = await start(realm, wid, subject.id)
    return run_id


async def test_one_claim_makes_at_most_25_transitions_then_hands_the_run_back(realm: RealmHandle) -> None:
    """19 grants, a permanent failure, then 19 undos and the end: 40 transitions, 25 per claim."""
    run_id = await forty_transitions(realm)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    runner = make_runner(realm, clock)

    assert await runner.run_pass() == 25
    run, attempts = await load(realm, run_id)
    # 19 grants + the failure = 20 transitions, then 5 undos (newest first).
    assert run.state == "compensating" and run.lease_owner is None and run.lease_expires_at is None
    assert run.due_at is not None and run.due_at <= clock.now()  # due again: another pass continues it
    assert len(attempts) == 20
    undone = [a.step_id for a in attempts if a.compensation_state == "done"]
    assert sorted(undone) == [f"grant{i:02d}" for i in range(14, 19)]
    assert await runner.run_pass() == 15  # 14 undos and the end
    run, attempts = await load(realm, run_id)
    assert run.state == "compensated"
    assert all(a.compensation_state == "done" for a in attempts if a.state == "succeeded")
    assert await runner.run_pass() == 0


async def test_one_pass_claims_at_most_50_runs_whatever_the_settings(realm: RealmHandle) -> None:
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    run_ids = [await start(realm, wid, (await realm.user(f"u{i:02d}@example.com")).id) for i in range(53)]
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    runner = make_runner(realm, clock, batch_size=500, tenant_share=500)
    assert await runner.run_pass() == 50  # one transition per run: start, end and succeed
    async with realm.sessions() as session:
        states = dict(
            (
                await session.execute(
                    text("SELECT state, count(*) FROM workflow_runs WHERE id = ANY(:ids) GROUP BY state"),
                    {"ids": run_ids},
                )
            ).all()
        )
    assert states == {"succeeded": 50, "pending": 3}
    assert await runner.run_pass() == 3


async def test_a_batch_or_realm_share_of_one_claims_one_run(realm: RealmHandle) -> None:
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    for i in range(3):
        await start(realm, wid, (await realm.user(f"u{i}@example.com")).id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    assert await make_runner(realm, clock, batch_size=1, tenant_share=10).run_pass() == 1
    # A share of one caps each round of the claim; a realm alone fills the rest of the batch by rounds.
    assert await make_runner(realm, clock, batch_size=10, tenant_share=1).run_pass() == 2
    assert await make_runner(realm, clock).run_pass() == 0


async def test_a_cancelled_run_waiting_for_a_retry_stops_at_once(client: Client, realm: RealmHandle) -> None:
    """Cancellation makes the run due now: it does not wait out the retry's backoff."""
    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    wid = await publish(
        realm,
        manual(
            {"id": "team", "type": "add_to_group", "group_id": group_id, "retry": {"max_attempts": 3, "backoff": "1h"}}
        ),
    )
    run_id = await start(realm, wid, subject.id)
    await outage(realm, "group_members", "INSERT")
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    runner = make_runner(realm, clock)
    await drain(runner)
    run, _ = await load(realm, run_id)
    assert run.state == "running" and run.due_at == clock.now() + HOUR
    cancelled = await client.post(f"{realm.api}/workflow-runs/{run_id}/cancel", json={}, headers=realm.headers)
    assert cancelled.status_code == 202, cancelled.text
    clock.current = max(clock.current, datetime.now(UTC) + timedelta(seconds=1))  # past the cancel, far from the hour
    await drain(runner)
    run, attempts = await load(realm, run_id)
    assert run.state == "cancelled" and run.error_category == "cancelled"
    assert len(attempts) == 1


async def test_a_run_claimed_just_before_its_workflow_is_disabled_waits_and_the_others_go_on(
    realm: RealmHandle,
) -> None:
    """A disabled workflow's runs are not claimed, but a run claimed a moment before its workflow is
    disabled is checked again when it moves: it stays where it was and hands its lease back; a run
    of another, active workflow goes on (its own workflow's state is read, not another's)."""
    subject = await realm.user("subject@example.com")
    paused = await publish(realm, manual({"id": "done", "type": "end"}), name="Paused")
    active = await publish(realm, manual({"id": "done", "type": "end"}), name="Active")
    held, going = await start(realm, paused, subject.id), await start(realm, active, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    runner = make_runner(realm, clock)
    async with realm.sessions() as session, session.begin():
        claimed = await leases.claim_due_runs(
            session, runner.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=5, tenant_share=5
        )
    assert sorted(c.run_id for c in claimed) == sorted([held, going])
    async with realm.sessions() as session, session.begin():
        # Disabling also takes the runs out of the due index; the state alone must be enough to hold
        # a run that is already claimed.
        await session.execute(text("UPDATE workflows SET state = 'disabled' WHERE id = :w"), {"w": paused})

    assert await advance(runner, held) == 0
    run, attempts = await load(realm, held)
    assert (run.state, run.lease_owner, attempts) == ("pending", None, [])
    assert await advance(runner, going) == 1
    assert (await load(realm, going))[0].state == "succeeded"


async def test_a_realm_alone_fills_the_batch_share_by_share_and_never_beyond_it(realm: RealmHandle) -> None:
    """Batch 4, share 2, five runs due in one realm: two rounds of the claim take two runs each, and
    the pass stops at the batch; the fifth run waits for the next pass."""
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    run_ids = [await start(realm, wid, (await realm.user(f"u{i}@example.com")).id) for i in range(5)]
    runner = make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=1)), batch_size=4, tenant_share=2)

    assert await runner.run_pass() == 4
    assert runner.last_claim_full
    states = [(await load(realm, run_id))[0].state for run_id in run_ids]
    assert sorted(states) == ["pending", "succeeded", "succeeded", "succeeded", "succeeded"]
    assert await runner.run_pass() == 1
    assert not runner.last_claim_full
