"""The durable runner on a real database: internal steps, retries, compensation, leases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from engine.platform.clock import FixedClock
from engine.runs.models import StepAttempt
from testing.directory import member_group, outage
from testing.factories import RealmHandle
from testing.runs import drain, load, make_runner, start
from testing.workflows import publish


async def test_internal_steps_run_once_with_attempts_and_audit(realm: RealmHandle) -> None:
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    role = await realm.role("viewer", ["realm.workflows.read"])
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "done", "type": "end"},
        ],
    }
    wid = await publish(realm, definition)
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm))
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    assert [(a.step_id, a.state, a.idempotency_key) for a in attempts] == [
        ("grant", "succeeded", f"{run_id}.grant"),
        ("done", "succeeded", f"{run_id}.done"),
    ]
    assert attempts[0].input_version.startswith("r1:") and attempts[0].input_version.endswith(":i1")
    async with realm.sessions() as session:
        held = (
            (
                await session.execute(
                    text("SELECT source_run_id FROM role_assignments WHERE user_id = :u"), {"u": subject.id}
                )
            )
            .scalars()
            .all()
        )
        types = (
            await session.execute(
                text("SELECT type, actor_id, request_id FROM audit_events WHERE correlation_id = :r ORDER BY id"),
                {"r": run_id},
            )
        ).all()
    assert held == [run_id]
    assert [t for t, _, _ in types] == [
        "workflow.run.started",
        "role.assigned",
        "workflow.step.succeeded",
        "workflow.step.succeeded",
        "workflow.run.succeeded",
    ]
    assert {actor for _, actor, _ in types} == {realm.admin.id}  # the accountable publisher
    assert {rid for _, _, rid in types} == {run_id}


async def test_transient_failures_back_off_by_the_steps_policy_and_exhaust_then_compensate(
    realm: RealmHandle,
) -> None:
    """A step's own retry policy overrides the definition's: a transient failure (the directory
    refuses the join) waits the step's 5 s backoff (not yet due after 4 s), fails again, and with
    its 2 attempts exhausted the run compensates the grant made before it."""

    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    role = await realm.role("viewer", ["realm.workflows.read"])
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "retry": {"max_attempts": 3, "backoff": "10s"},
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": group_id, "retry": {"max_attempts": 2, "backoff": "5s"}},
        ],
    }
    wid = await publish(realm, definition)
    await outage(realm, "group_members", "INSERT")
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    r = make_runner(realm, clock)
    await drain(r)
    run, attempts = await load(realm, run_id)
    assert [(a.step_id, a.number, a.state, a.error_category) for a in attempts] == [
        ("grant", 1, "succeeded", None),
        ("team", 1, "failed", "error"),
    ]
    assert (attempts[0].max_attempts, attempts[0].backoff_ms) == (3, 10_000)  # the definition's policy
    assert (attempts[1].max_attempts, attempts[1].backoff_ms) == (2, 5_000)  # the step's own
    assert (run.state, run.due_at) == ("running", clock.now() + timedelta(seconds=5))
    clock.advance(seconds=4)
    await drain(r)
    assert len((await load(realm, run_id))[1]) == 2  # the backoff is not over
    clock.advance(seconds=1)
    await drain(r)
    run, attempts = await load(realm, run_id)
    assert [(a.step_id, a.number, a.state) for a in attempts] == [
        ("grant", 1, "succeeded"),
        ("team", 1, "failed"),
        ("team", 2, "failed"),
    ]
    assert (run.state, run.error_category) == ("compensated", "retries_exhausted")
    assert attempts[0].compensation_state == "done"
    async with realm.sessions() as session:
        left = await session.scalar(text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": subject.id})
    assert left == 0


async def test_a_permanent_failure_is_tried_once_whatever_its_retry_policy_then_compensates(
    realm: RealmHandle,
) -> None:
    """A permanent failure (removing a membership the subject does not have) is not retried although
    the step allows two attempts, and the grant before it is undone."""
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    role = await realm.role("viewer", ["realm.workflows.read"])
    group_org = await realm.organization("Other")
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "retry": {"max_attempts": 3, "backoff": "10s"},
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {
                "id": "leave",
                "type": "remove_membership",
                "organization_id": group_org.id,
                "retry": {"max_attempts": 2, "backoff": "5s"},
            },
        ],
    }
    wid = await publish(realm, definition)
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC), jitter=0.0)
    r = make_runner(realm, clock)
    await drain(r)
    run, attempts = await load(realm, run_id)
    # remove_membership of a non-member is a permanent failure: compensation undoes the grant.
    assert run.state == "compensated", (run.state, run.error_category)
    assert run.error_category == "not_a_member"
    assert [a.state for a in attempts] == ["succeeded", "failed"]
    assert attempts[0].compensation_state == "done"
    async with realm.sessions() as session:
        left = await session.scalar(text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": subject.id})
    assert left == 0


async def test_retry_timing_with_an_injectable_clock(realm: RealmHandle, monkeypatch: Any) -> None:
    """A transient failure waits the backoff, doubling; attempts exhausted → retries_exhausted → failed."""
    from engine.runs.steps.groups import AddToGroup

    calls: list[int] = []

    async def flaky(self: AddToGroup, ctx: Any) -> Any:
        calls.append(1)
        raise ConnectionError("the directory is unreachable")

    monkeypatch.setattr(AddToGroup, "perform", flaky)
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    from engine.directory.groups import create_group

    authority = await _authority(realm)
    async with realm.sessions() as session, session.begin():
        group, _ = await create_group(session, realm.actor, authority, org.id, name="Team")
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "team", "type": "add_to_group", "group_id": group.id, "retry": {"max_attempts": 3, "backoff": "10s"}}
        ],
    }
    wid = await publish(realm, definition)
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    r = make_runner(realm, clock)
    await drain(r)
    run, attempts = await load(realm, run_id)
    assert [a.error_category for a in attempts] == ["error"]
    assert run.state == "running" and run.due_at == clock.now() + timedelta(seconds=10)
    clock.advance(seconds=9)
    await drain(r)
    assert len((await load(realm, run_id))[1]) == 1  # not due yet
    clock.advance(seconds=1)
    await drain(r)
    run, attempts = await load(realm, run_id)
    assert len(attempts) == 2 and run.due_at == clock.now() + timedelta(seconds=20)  # doubled
    clock.advance(seconds=20)
    await drain(r)
    run, attempts = await load(realm, run_id)
    assert [a.number for a in attempts] == [1, 2, 3]
    assert all(a.max_attempts == 3 and a.backoff_ms == 10_000 for a in attempts)
    assert run.state == "failed" and run.error_category == "retries_exhausted"  # nothing to undo
    async with realm.sessions() as session:
        failed = (
            (
                await session.execute(
                    text(
                        "SELECT details->>'phase' FROM audit_events WHERE subject_id = :r AND type = 'workflow.run.failed' ORDER BY id"
                    ),
                    {"r": run_id},
                )
            )
            .scalars()
            .all()
        )
    assert failed == ["compensating", "finished"]  # two workflow.run.failed events when nothing was undone
    assert len(calls) == 3


async def _authority(realm: RealmHandle) -> Any:
    from engine.directory.authz import load_authority

    async with realm.sessions() as session:
        return await load_authority(session, realm.id, "user", realm.admin.id)


async def test_claims_take_at_most_the_batch_and_the_realm_share(realm: RealmHandle, other_realm: RealmHandle) -> None:
    """A busy realm's backlog never hides another realm's runs; at most 50 per pass."""
    from engine.runs.runstore import leases

    end = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    busy_wid = await publish(realm, end)
    quiet_wid = await publish(other_realm, end)
    for i in range(12):
        await start(realm, busy_wid, (await realm.user(f"busy{i}@example.com")).id)
    for i in range(2):
        await start(other_realm, quiet_wid, (await other_realm.user(f"quiet{i}@example.com")).id)
    later = datetime.now(UTC) + timedelta(seconds=5)
    async with realm.sessions() as session, session.begin():
        claimed = await leases.claim_due_runs(
            session, "worker-share-1-aaaa", now=later, lease=timedelta(seconds=30), batch_size=8, tenant_share=5
        )
    by_realm = {r: sum(1 for c in claimed if c.realm_id == r) for r in (realm.id, other_realm.id)}
    assert by_realm == {realm.id: 5, other_realm.id: 2}
    async with realm.sessions() as session, session.begin():
        more = await leases.claim_due_runs(
            session, "worker-share-2-bbbb", now=later, lease=timedelta(seconds=30), batch_size=500, tenant_share=500
        )
    assert len(more) == 7 and not {c.run_id for c in more} & {c.run_id for c in claimed}  # leased runs are not taken


# --- the run store's guards: retry now, the lease, handing leases back ----------------------------


async def test_retry_now_takes_only_a_run_of_this_realm_waiting_for_its_retry(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    from engine.runs.runstore import scheduling

    subject = await realm.user("subject@example.com")
    role = await realm.role("viewer", ["realm.workflows.read"])
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "retry": {"max_attempts": 3, "backoff": "1h"},
        "steps": [{"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}],
    }
    wid = await publish(realm, definition)
    await outage(realm, "role_assignments", "INSERT")
    run_id = await start(realm, wid, subject.id)
    beside = await start(realm, wid, (await realm.user("beside@example.com")).id)  # waits for its retry too
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.0)
    await drain(make_runner(realm, clock))
    due = clock.now() + timedelta(hours=1)
    for waiting in (run_id, beside):
        run, _ = await load(realm, waiting)
        assert (run.state, run.error_category, run.due_at, run.lease_owner) == ("running", "error", due, None)

    async def probe(realm_id: str, at: datetime, **row: Any) -> datetime | None:
        """retry_now's answer (the new due time) with the run's row changed as given; rolled back."""
        async with realm.sessions() as session, session.begin():
            for column, value in row.items():
                await session.execute(
                    text(f"UPDATE workflow_runs SET {column} = :v WHERE id = :r"), {"v": value, "r": run_id}
                )
            moved = await scheduling.retry_now(session, run_id, realm_id, now=at)
            answer = moved.due_at if moved is not None else None
            await session.rollback()
        return answer

    soon = clock.now() + timedelta(minutes=1)
    assert await probe(realm.id, soon) == soon
    assert await probe(other_realm.id, soon) is None  # another realm's run id
    assert await probe(realm.id, due) is None  # due already: nothing to bring forward
    assert await probe(realm.id, soon, error_category=None) is None  # not after a failure
    assert await probe(realm.id, soon, state="waiting") is None  # waiting for time, not a retry
    held = soon + timedelta(seconds=30)
    assert await probe(realm.id, soon, lease_owner="worker-other-1-bbbb", lease_expires_at=held) is None
    assert await probe(realm.id, soon, lease_owner="worker-other-1-bbbb", lease_expires_at=soon) == soon
    async with realm.sessions() as session, session.begin():
        moved = await scheduling.retry_now(session, run_id, realm.id, now=soon)
        assert moved is not None
    run, _ = await load(realm, run_id)
    assert (run.due_at, run.updated_at) == (soon, soon)
    other, _ = await load(realm, beside)
    assert other.due_at == due  # only the named run is brought forward


async def test_a_lease_is_ours_until_the_moment_it_expires_and_only_ours_is_handed_back(realm: RealmHandle) -> None:
    from engine.runs.runstore import leases

    subject = await realm.user("subject@example.com")
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    wid = await publish(realm, definition)
    mine, theirs = await start(realm, wid, subject.id), await start(realm, wid, subject.id)
    now = datetime.now(UTC) + timedelta(seconds=1)
    lease = timedelta(seconds=30)
    async with realm.sessions() as session, session.begin():
        await leases.claim_due_runs(session, "worker-a-1-aaaa", now=now, lease=lease, batch_size=1, tenant_share=1)
        await leases.claim_due_runs(session, "worker-b-1-bbbb", now=now, lease=lease, batch_size=1, tenant_share=1)
    owners = {}
    for run_id in (mine, theirs):
        run, _ = await load(realm, run_id)
        owners[run.lease_owner] = run_id
    mine, theirs = owners["worker-a-1-aaaa"], owners["worker-b-1-bbbb"]
    async with realm.sessions() as session, session.begin():
        locked = await leases.lock_leased_run(
            session, mine, "worker-a-1-aaaa", now=now + lease - timedelta(microseconds=1), lease=lease
        )
        assert locked.lease_expires_at == now + 2 * lease - timedelta(microseconds=1)  # renewed
    expiry = now + 2 * lease - timedelta(microseconds=1)
    for worker, at in (("worker-a-1-aaaa", expiry), ("worker-b-1-bbbb", now)):
        try:
            async with realm.sessions() as session, session.begin():
                await leases.lock_leased_run(session, mine, worker, now=at, lease=lease)
        except leases.LeaseLost as lost:
            assert str(lost) == f"worker {worker} no longer holds the lease of {mine}"
        else:
            raise AssertionError(f"{worker} locked a run it does not hold at {at}")
    async with realm.sessions() as session, session.begin():
        await leases.release_leases(session, [mine, theirs], "worker-a-1-aaaa")
    run, _ = await load(realm, mine)
    assert (run.lease_owner, run.lease_expires_at) == (None, None)
    run, _ = await load(realm, theirs)
    assert (run.lease_owner, run.lease_expires_at) == ("worker-b-1-bbbb", now + lease)


async def _already_applied(realm: RealmHandle, run_id: str, step_id: str, step_index: int, step_type: str) -> None:
    """A succeeded attempt of the run's step, as if a transaction that made it had committed."""
    from engine.platform.ids import new_id

    now = datetime.now(UTC)
    async with realm.sessions() as session, session.begin():
        session.add(
            StepAttempt(
                id=new_id("wsa"),
                run_id=run_id,
                realm_id=realm.id,
                step_id=step_id,
                step_index=step_index,
                step_type=step_type,
                number=1,
                idempotency_key=f"{run_id}.{step_id}",
                state="succeeded",
                input={},
                input_version="already",
                started_at=now,
                finished_at=now,
            )
        )


async def test_a_step_already_applied_is_skipped_never_applied_again(realm: RealmHandle) -> None:
    """The run finds its step with a succeeded attempt: it goes on to the next step in that same
    transition, due at once, without making the step's effect a second time; an already applied
    last step ends the run."""
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    role = await realm.role("viewer", ["realm.workflows.read"])
    steps = [
        {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
        {"id": "leave", "type": "remove_membership", "organization_id": org.id},
    ]
    wid = await publish(realm, {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps})
    run_id = await start(realm, wid, subject.id)
    await _already_applied(realm, run_id, "grant", 0, "assign_role")
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    r = make_runner(realm, clock)
    made = 0
    while passed := await r.run_pass():
        made += passed
    run, attempts = await load(realm, run_id)
    assert (run.state, run.step_index) == ("succeeded", 2), run.last_error
    assert made == 2  # the skip and the removal, each one transition
    assert [(a.step_id, a.state, a.input_version) for a in attempts] == [
        ("grant", "succeeded", "already"),
        ("leave", "succeeded", attempts[1].input_version),
    ]
    async with realm.sessions() as session:
        grants = await session.scalar(
            text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": subject.id}
        )
    assert grants == 0  # the grant was never made here

    last = await start(realm, wid, (await realm.user("other@example.com")).id)
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE workflow_runs SET step_index = 1 WHERE id = :r"), {"r": last})
    await _already_applied(realm, last, "leave", 1, "remove_membership")
    clock.current = datetime.now(UTC) + timedelta(seconds=1)  # the new run is due, however long the first took
    made = 0
    while passed := await r.run_pass():
        made += passed
    run, attempts = await load(realm, last)
    assert (run.state, run.step_index, made) == ("succeeded", 2, 1)
    assert [a.step_id for a in attempts] == ["leave"]


async def test_a_transition_that_breaks_unexpectedly_hands_its_lease_back_and_the_others_go_on(
    realm: RealmHandle,
) -> None:
    """A run whose transition raises something no rule expects (here a stored definition whose step
    lost its id) keeps its state and attempts, hands its lease back at once for another pass to try,
    and never stops the other runs of the pass."""
    subject = await realm.user()
    body = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    broken_wid, fine_wid = await publish(realm, body, "Broken"), await publish(realm, body, "Fine")
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "UPDATE workflow_revisions SET definition = jsonb_set(definition, '{steps,0}', '{\"type\": \"end\"}')"
                " WHERE workflow_id = :w"
            ),
            {"w": broken_wid},
        )
    broken, fine = await start(realm, broken_wid, subject.id), await start(realm, fine_wid, subject.id)
    r = make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5)))

    assert await r.run_pass() == 1
    run, attempts = await load(realm, broken)
    assert (run.state, run.lease_owner, run.lease_expires_at, attempts) == ("pending", None, None, [])
    assert (await load(realm, fine))[0].state == "succeeded"


async def test_a_stored_step_of_a_type_this_worker_does_not_know_fails_the_run_for_good(realm: RealmHandle) -> None:
    """Publishing refuses an unknown step type, but a worker older than the definition it finds (or a
    revision edited in the database) must not guess: the run fails ``definition_unavailable``,
    naming the type, with no attempt made."""
    subject = await realm.user()
    body = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    wid = await publish(realm, body)
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "UPDATE workflow_revisions SET definition = jsonb_set(definition, '{steps,0,type}', '\"teleport\"')"
                " WHERE workflow_id = :w"
            ),
            {"w": wid},
        )
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5))))
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category, run.last_error) == (
        "failed",
        "definition_unavailable",
        "No step type 'teleport' here.",
    )
    assert attempts == []


async def test_a_change_the_database_refuses_fails_the_step_for_good_as_a_conflict(realm: RealmHandle) -> None:
    """A step whose change the database refuses (a duplicate made concurrently, a row gone; here a
    trigger refusing every new group membership) fails ``conflict`` at its first attempt, with the
    driver's one-line summary and never retried, though its policy allows three tries."""
    from engine.directory.groups import create_group

    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    async with realm.sessions() as session, session.begin():
        group, _ = await create_group(session, realm.actor, await _authority(realm), org.id, name="Team")
        await session.execute(
            text(
                "CREATE FUNCTION refuse_member() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'already there' USING ERRCODE = 'unique_violation'; END $$"
            )
        )
        await session.execute(
            text(
                "CREATE TRIGGER refuse_member BEFORE INSERT ON group_members FOR EACH ROW EXECUTE FUNCTION refuse_member()"
            )
        )
    step = {"id": "team", "type": "add_to_group", "group_id": group.id, "retry": {"max_attempts": 3, "backoff": "10s"}}
    wid = await publish(realm, {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [step]})
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5), jitter=0.0)))
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category) == ("failed", "conflict"), run.last_error
    assert [(a.number, a.state, a.error_category) for a in attempts] == [(1, "failed", "conflict")]
    assert "UniqueViolationError" in attempts[0].error_message and "already there" in attempts[0].error_message
