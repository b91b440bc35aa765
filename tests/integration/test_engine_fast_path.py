"""The fast path of internal steps and group commit, on a real database.

- it writes exactly what the ordinary path writes (attempts, effects, audit, the run);
- every change to authority moves an authorization epoch, so a cached authority never outlives
  a revocation, a suspension, a changed role or an expired grant;
- a failure in one run of a group commit neither loses nor repeats another run's work.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from engine.directory import organizations, roles
from engine.directory import principals as directory
from engine.directory.audit import Actor
from engine.directory.authz import AUTHORITY_SQL, load_authority
from engine.directory.groups import add_group_member, create_group, remove_group_member, update_group
from engine.directory.models import Group, Role, User
from engine.directory.role_assignments import create_assignment, expire_due_assignments, revoke_assignment
from engine.platform.clock import FixedClock
from engine.platform.db import positional
from engine.runs.runner import Runner, RunnerSettings
from engine.runs.runstore import batched
from testing.factories import RealmHandle
from testing.runs import drain, load, start
from testing.statements import recording
from testing.workflows import publish

# The statement that reads a principal's authority, as the fast path sends it.
AUTHORITY = positional(AUTHORITY_SQL)


def runner(realm: RealmHandle, clock: FixedClock, *, fast: bool = True, group: int = 50, worker: str = "") -> Runner:
    settings = RunnerSettings(lease=timedelta(seconds=30), group_commit=group, fast_path=fast)
    return Runner(realm.sessions, worker or f"worker-test-{int(fast)}-{group}-aaaa", settings=settings, clock=clock)


async def scalar(realm: RealmHandle, sql: str, **params: Any) -> Any:
    async with realm.sessions() as session:
        return await session.scalar(text(sql), params)


async def subjects(realm: RealmHandle, org_id: str, count: int) -> list[User]:
    made = []
    for _ in range(count):
        user = await realm.user()
        async with realm.sessions() as session, session.begin():
            await organizations.add_member(session, realm.actor, org_id, user.id, authority=None)
        made.append(user)
    return made


async def directory_for_runs(realm: RealmHandle) -> tuple[str, Role, Group]:
    org = await realm.organization("Eng")
    role = await realm.role("viewer", ["realm.workflows.read"])
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org.id, name="Team")
    return org.id, role, group


def three_steps(role: Role, group: Group) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "join", "type": "add_to_group", "group_id": group.id},
            {"id": "done", "type": "end"},
        ],
    }


async def trail(realm: RealmHandle, run_id: str, subject_id: str) -> dict[str, Any]:
    """Everything a run wrote, with its own ids and times left out."""

    def same(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(run_id, "<run>").replace(subject_id, "<subject>")
        if isinstance(value, dict):
            return {k: "<id>" if k in ("assignment_id", "trigger_key") else same(v) for k, v in value.items()}
        return value

    async with realm.sessions() as session:
        run = (
            await session.execute(
                text(
                    "SELECT state, step_index, due_at IS NULL AS idle, lease_owner, finished_at IS NOT NULL AS ended,"
                    " error_category FROM workflow_runs WHERE id = :r"
                ),
                {"r": run_id},
            )
        ).one()
        attempts = (
            await session.execute(
                text(
                    "SELECT step_id, step_index, step_type, number, idempotency_key, state, input, input_version,"
                    " result, error_category, max_attempts, backoff_ms, compensation_strategy, compensation_state,"
                    " compensation_attempts, finished_at >= started_at AS timed"
                    " FROM step_attempts WHERE run_id = :r ORDER BY step_index, number"
                ),
                {"r": run_id},
            )
        ).all()
        audit = (
            await session.execute(
                text(
                    "SELECT type, category, actor_type, actor_id, subject_type, subject_id, request_id, details"
                    " FROM audit_events WHERE correlation_id = :r ORDER BY id"
                ),
                {"r": run_id},
            )
        ).all()
        grants = (
            await session.execute(
                text(
                    "SELECT role_id, organization_id, expires_at, granted_by, approver_id, source_run_id"
                    " FROM role_assignments WHERE user_id = :s"
                ),
                {"s": subject_id},
            )
        ).all()
        groups = (
            await session.execute(
                text("SELECT group_id, realm_id, added_by, source_run_id FROM group_members WHERE user_id = :s"),
                {"s": subject_id},
            )
        ).all()
    return {
        "run": tuple(run),
        "attempts": [tuple(same(v) for v in a) for a in attempts],
        "audit": [tuple(same(v) for v in a) for a in audit],
        "grants": [tuple(same(v) for v in g) for g in grants],
        "groups": [tuple(same(v) for v in g) for g in groups],
    }


async def ordinary_then_fast(
    realm: RealmHandle, wid: str, people: list[User], clock: FixedClock, *, organization_id: str | None = None
) -> tuple[dict[str, Any], Runner]:
    """The first person's run the ordinary way, the others' on the fast path: what the ordinary run
    wrote, once each fast run was found to have written the same, and the fast runner."""
    ordinary_subject, *fast_subjects = people
    ordinary_run = await start(realm, wid, ordinary_subject.id, organization_id)
    await drain(runner(realm, clock, fast=False))
    fast_runs = [await start(realm, wid, s.id, organization_id) for s in fast_subjects]
    fast = runner(realm, clock)
    await drain(fast)
    expected = await trail(realm, ordinary_run, ordinary_subject.id)
    for run_id, subject in zip(fast_runs, fast_subjects, strict=True):
        got = await trail(realm, run_id, subject.id)
        for key in expected:
            assert got[key] == expected[key], key
    return expected, fast


async def test_the_fast_path_writes_what_the_ordinary_path_writes(realm: RealmHandle) -> None:
    org_id, role, group = await directory_for_runs(realm)
    wid = await publish(realm, three_steps(role, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    expected, fast = await ordinary_then_fast(realm, wid, await subjects(realm, org_id, 3), clock)
    assert expected["run"][0] == "succeeded" and len(expected["attempts"]) == 3
    assert [a[0] for a in expected["audit"]] == [
        "workflow.run.started",
        "role.assigned",
        "workflow.step.succeeded",
        "group.member_added",
        "workflow.step.succeeded",
        "workflow.step.succeeded",
        "workflow.run.succeeded",
    ]
    # …and it was the fast path: every transition was made there, and the revision, the
    # publisher's authority, the role and the group were read once and kept.
    assert fast.fast.moved == 3 * 2
    assert fast.fast.revisions and fast.fast.roles and fast.fast.groups
    assert (realm.id, realm.admin.id) in fast.fast.authorities


async def test_each_run_committing_alone_writes_the_same(realm: RealmHandle) -> None:
    org_id, role, group = await directory_for_runs(realm)
    first, second = await subjects(realm, org_id, 2)
    wid = await publish(realm, three_steps(role, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    a = await start(realm, wid, first.id)
    await drain(runner(realm, clock, fast=False))
    b = await start(realm, wid, second.id)
    alone = runner(realm, clock, group=1)
    await drain(alone)
    assert await trail(realm, b, second.id) == await trail(realm, a, first.id)
    assert alone.fast.moved == 3


async def epochs(realm: RealmHandle, user_id: str) -> tuple[int, int]:
    async with realm.sessions() as session:
        row = (
            await session.execute(
                text(
                    "SELECT r.authz_epoch, u.authz_epoch FROM realms r JOIN users u ON u.realm_id = r.id WHERE u.id = :u"
                ),
                {"u": user_id},
            )
        ).one()
    return int(row[0]), int(row[1])


async def test_every_change_to_authority_moves_an_epoch(realm: RealmHandle) -> None:
    """Through the domain functions the API, the pages and the runs call."""
    org_id, _, group = await directory_for_runs(realm)
    custom = await realm.role("custom", ["realm.workflows.read"])
    user = await realm.user()
    actor = realm.actor

    async def admin_authority(session: Any) -> Any:
        return await load_authority(session, realm.id, "user", realm.admin.id)

    async def moves(which: str, change: Any) -> None:
        before = await epochs(realm, user.id)
        async with realm.sessions() as session, session.begin():
            await change(session)
        after = await epochs(realm, user.id)
        index = 0 if which == "realm" else 1
        assert after[index] > before[index], f"{which} epoch did not move"

    async def assign(session: Any) -> None:
        auth = await admin_authority(session)
        await create_assignment(session, actor, auth, role_id=custom.id, user_id=user.id)

    async def revoke(session: Any) -> None:
        assignment_id = await session.scalar(
            text("SELECT id FROM role_assignments WHERE user_id = :u AND role_id = :r"), {"u": user.id, "r": custom.id}
        )
        await revoke_assignment(session, actor, await admin_authority(session), assignment_id)

    async def expiring(session: Any) -> None:
        auth = await admin_authority(session)
        await create_assignment(
            session, actor, auth, role_id=custom.id, user_id=user.id, expires_at=datetime.now(UTC) + timedelta(hours=1)
        )

    async def expire(session: Any) -> None:
        assert await expire_due_assignments(session, datetime.now(UTC) + timedelta(hours=2)) >= 1

    await moves("user", assign)
    await moves("user", revoke)
    await moves("user", expiring)
    await moves("user", expire)
    await moves("user", lambda s: organizations.add_member(s, actor, org_id, user.id, authority=None))

    async def join(session: Any) -> None:
        auth = await admin_authority(session)
        await add_group_member(session, actor, auth, org_id, group.id, user.id)

    async def leave(session: Any) -> None:
        auth = await admin_authority(session)
        await remove_group_member(session, actor, auth, org_id, group.id, user.id)

    await moves("user", join)
    await moves("user", leave)
    await moves("user", lambda s: organizations.remove_member(s, actor, org_id, user.id, authority=None))
    await moves("user", lambda s: directory.set_user_status(s, actor, user.id, "suspended", authority=None))
    await moves("user", lambda s: directory.set_user_status(s, actor, user.id, "active", authority=None))

    async def change_role(session: Any) -> None:
        auth = await admin_authority(session)
        await roles.update_role(session, actor, auth, custom.id, permissions=["realm.audit.read"])

    async def group_roles(session: Any) -> None:
        auth = await admin_authority(session)
        await update_group(session, actor, auth, org_id, group.id, role_ids=[custom.id])

    async def new_group(session: Any) -> None:
        auth = await admin_authority(session)
        await create_group(session, actor, auth, org_id, name="Another", parent_id=group.id)

    async def service_principal(session: Any) -> None:
        auth = await admin_authority(session)
        sp = await directory.create_service_principal(session, actor, name="robot", description="", authority=auth)
        await create_assignment(session, actor, auth, role_id=custom.id, service_principal_id=sp.id)

    async def no_group_roles(session: Any) -> None:
        auth = await admin_authority(session)
        await update_group(session, actor, auth, org_id, group.id, role_ids=[])

    async def delete_role(session: Any) -> None:
        await roles.delete_role(session, actor, await admin_authority(session), custom.id)

    await moves("realm", change_role)
    await moves("realm", group_roles)
    await moves("realm", new_group)
    await moves("realm", service_principal)
    await moves("realm", no_group_roles)
    async with realm.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM role_assignments WHERE role_id = :r"), {"r": custom.id})
    await moves("realm", delete_role)


async def _publisher(realm: RealmHandle, *, expires_in: timedelta | None = None) -> tuple[User, Actor, str]:
    """Someone other than the first administrator who holds realm-admin (directly) and publishes."""
    publisher = await realm.user()
    assignment = await realm.assign(publisher, await realm.builtin_role("realm-admin"), expires_in=expires_in)
    return publisher, Actor(type="user", id=publisher.id, realm_id=realm.id), assignment.id


async def _publish_as(realm: RealmHandle, actor: Actor, definition: dict[str, Any], name: str = "Grant") -> str:
    from engine.workflows.catalog import create_workflow
    from engine.workflows.publication import publish_revision

    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, actor, name=name, definition=definition, has_definition=True, requires_approval=False
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, actor, workflow.id, 1)
    return workflow.id


async def _revoke(realm: RealmHandle, publisher: User, assignment_id: str, clock: FixedClock) -> None:
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await revoke_assignment(session, realm.actor, authority, assignment_id)


async def _suspend(realm: RealmHandle, publisher: User, assignment_id: str, clock: FixedClock) -> None:
    async with realm.sessions() as session, session.begin():
        await directory.set_user_status(session, realm.actor, publisher.id, "suspended", authority=None)


async def _outlive(realm: RealmHandle, publisher: User, assignment_id: str, clock: FixedClock) -> None:
    clock.advance(seconds=2 * 3600)  # past the grant's expiry; nothing deleted it yet


async def _reach_expiry(realm: RealmHandle, publisher: User, assignment_id: str, clock: FixedClock) -> None:
    # One second before the grant's expiry: the run then starts at the very instant it expires.
    expires_at = await scalar(realm, "SELECT expires_at FROM role_assignments WHERE id = :a", a=assignment_id)
    clock.current = expires_at - timedelta(seconds=1)


@pytest.mark.parametrize(
    "lose_authority",
    [_revoke, _suspend, _outlive, _reach_expiry],
    ids=["revoked", "suspended", "expired", "at the instant it expires"],
)
async def test_a_publisher_who_lost_authority_is_caught_despite_the_cache(
    realm: RealmHandle, lose_authority: Any
) -> None:
    org_id, role, group = await directory_for_runs(realm)
    early, late = await subjects(realm, org_id, 2)
    publisher, actor, assignment_id = await _publisher(realm, expires_in=timedelta(hours=1))
    wid = await _publish_as(realm, actor, three_steps(role, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    r = runner(realm, clock)
    first = await start(realm, wid, early.id)
    await drain(r)
    assert (await load(realm, first))[0].state == "succeeded"
    assert (realm.id, publisher.id) in r.fast.authorities  # the publisher's authority is cached

    await lose_authority(realm, publisher, assignment_id, clock)
    second = await start(realm, wid, late.id)
    clock.advance(seconds=1)
    await drain(r)
    run, attempts = await load(realm, second)
    assert run.state == "failed" and run.error_category == "publisher_lacks_authority", run.last_error
    assert [(a.step_id, a.state) for a in attempts] == [("grant", "failed")]
    assert not await scalar(realm, "SELECT count(*) FROM role_assignments WHERE user_id = :u", u=late.id)


async def test_a_changed_role_moves_the_realm_epoch_and_the_ceiling_is_checked_again(realm: RealmHandle) -> None:
    """The publisher's own role loses a permission a step's grant needs: the step fails."""
    org_id, _, group = await directory_for_runs(realm)
    early, late = await subjects(realm, org_id, 2)
    granted = await realm.role("granted", ["realm.audit.read"])
    publisher = await realm.user()
    power = await realm.role("power", ["realm.workflows.*", "realm.audit.read", "org.*"])
    await realm.assign(publisher, power)
    actor = Actor(type="user", id=publisher.id, realm_id=realm.id)
    definition = three_steps(granted, group)
    wid = await _publish_as(realm, actor, definition)
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    r = runner(realm, clock)
    await start(realm, wid, early.id)
    await drain(r)
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await roles.update_role(session, realm.actor, authority, power.id, permissions=["realm.workflows.*", "org.*"])
    second = await start(realm, wid, late.id)
    clock.advance(seconds=1)
    await drain(r)
    run, attempts = await load(realm, second)
    assert run.state == "failed" and run.error_category in ("publisher_lacks_authority", "grant_ceiling_exceeded")
    assert [(a.step_id, a.state) for a in attempts] == [("grant", "failed")]


async def test_a_failure_in_one_run_of_a_group_loses_and_repeats_nothing(realm: RealmHandle) -> None:
    """The database refuses one run's grant: the group rolls back, and each run goes alone."""
    org_id, role, group = await directory_for_runs(realm)
    good_subjects = await subjects(realm, org_id, 3)
    doomed = (await subjects(realm, org_id, 1))[0]
    wid = await publish(realm, three_steps(role, group))
    async with realm.sessions() as session, session.begin():
        # A real refusal by the database, for this one subject only.
        await session.execute(
            text(
                f"""
                CREATE FUNCTION refuse_doomed() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.user_id = '{doomed.id}' THEN RAISE EXCEPTION 'refused for this subject'; END IF;
                    RETURN NEW;
                END $$
                """
            )
        )
        await session.execute(
            text(
                "CREATE TRIGGER refuse_doomed BEFORE INSERT ON role_assignments FOR EACH ROW EXECUTE FUNCTION refuse_doomed()"
            )
        )
    run_ids = [await start(realm, wid, s.id) for s in [*good_subjects[:2], doomed, good_subjects[2]]]
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    await drain(runner(realm, clock))

    for run_id, subject in zip(run_ids, [*good_subjects[:2], doomed, good_subjects[2]], strict=True):
        run, attempts = await load(realm, run_id)
        grants = await scalar(realm, "SELECT count(*) FROM role_assignments WHERE user_id = :u", u=subject.id)
        joins = await scalar(realm, "SELECT count(*) FROM group_members WHERE user_id = :u", u=subject.id)
        audit = await scalar(realm, "SELECT count(*) FROM audit_events WHERE correlation_id = :r", r=run_id)
        if subject is doomed:
            # The ordinary path ran the step alone and recorded the refusal as a transient failure.
            assert run.state == "running" and run.error_category == "error"
            assert [(a.step_id, a.state) for a in attempts] == [("grant", "failed")]
            assert (grants, joins) == (0, 0)
        else:
            assert run.state == "succeeded"
            assert [(a.step_id, a.state, a.number) for a in attempts] == [
                ("grant", "succeeded", 1),
                ("join", "succeeded", 1),
                ("done", "succeeded", 1),
            ]
            assert (grants, joins, audit) == (1, 1, 7)
    assert not await scalar(realm, "SELECT count(*) FROM workflow_runs WHERE lease_owner IS NOT NULL")


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "ordinary path"])
async def test_a_subject_stronger_than_the_publisher_is_never_changed(realm: RealmHandle, fast: bool) -> None:
    """The one rule holds on both paths: a run may not change what a subject holds when the
    subject holds something its publisher does not (here realm.users.write)."""
    org_id, role, group = await directory_for_runs(realm)
    weak, strong = await subjects(realm, org_id, 2)
    publisher = await realm.user()
    power = await realm.role("power", ["realm.workflows.*", "org.*"])
    await realm.assign(publisher, power)
    await realm.assign(strong, await realm.role("user-admin", ["realm.users.write"]))
    actor = Actor(type="user", id=publisher.id, realm_id=realm.id)
    wid = await _publish_as(realm, actor, three_steps(role, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    r = runner(realm, clock, fast=fast)
    # Both in one group commit: the weaker subject goes through, the stronger one is refused.
    ok, refused = await start(realm, wid, weak.id), await start(realm, wid, strong.id)
    await drain(r)

    run, _ = await load(realm, ok)
    assert run.state == "succeeded", run.last_error
    run, attempts = await load(realm, refused)
    assert run.state == "failed" and run.error_category == "target_outranks_actor", (run.state, run.last_error)
    assert [(a.step_id, a.state, a.error_category) for a in attempts] == [("grant", "failed", "target_outranks_actor")]
    held = "SELECT count(*) FROM role_assignments WHERE user_id = :u AND role_id = :r"
    assert await scalar(realm, held, u=strong.id, r=role.id) == 0
    assert await scalar(realm, "SELECT count(*) FROM group_members WHERE user_id = :u", u=strong.id) == 0


async def test_in_one_group_a_refused_run_is_recorded_there_and_the_others_go_on(
    realm: RealmHandle,
) -> None:
    """The group's one statement makes the steps of the runs whose decisions allow them and records
    the refusal of the one whose subject holds the role already (its failed attempt, and the run
    compensating); the others go on."""
    org_id, role, group = await directory_for_runs(realm)
    fresh = await subjects(realm, org_id, 3)
    holder = (await subjects(realm, org_id, 1))[0]
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await create_assignment(session, realm.actor, authority, role_id=role.id, user_id=holder.id)
    wid = await publish(realm, three_steps(role, group))
    everyone = [fresh[0], holder, *fresh[1:]]
    run_ids = [await start(realm, wid, s.id) for s in everyone]
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    fast = runner(realm, clock)
    await drain(fast)

    for run_id, subject in zip(run_ids, everyone, strict=True):
        run, attempts = await load(realm, run_id)
        grants = await scalar(realm, "SELECT count(*) FROM role_assignments WHERE user_id = :u", u=subject.id)
        assigned = await scalar(
            realm,
            "SELECT count(*) FROM audit_events WHERE correlation_id = :r AND type = 'role.assigned'",
            r=run_id,
        )
        assert grants == 1, "one grant per subject, never two"
        if subject is holder:
            assert assigned == 0
            assert [a.step_id for a in attempts][:1] == ["grant"]
            assert len([a for a in attempts if a.step_id == "grant"]) == 1
        else:
            assert run.state == "succeeded" and assigned == 1
            assert [(a.step_id, a.state, a.number) for a in attempts] == [
                ("grant", "succeeded", 1),
                ("join", "succeeded", 1),
                ("done", "succeeded", 1),
            ]
    # The three others made all their steps on the fast path, in groups, and the holder's refusal
    # was recorded there too (its compensation then goes the ordinary way).
    assert fast.fast.moved == 3 * 3 + 1
    run, attempts = await load(realm, run_ids[1])
    assert (run.state, run.error_category) == ("failed", "conflict")
    assert [(a.step_id, a.state, a.error_category) for a in attempts] == [("grant", "failed", "conflict")]


async def test_a_pass_hands_its_connection_back_to_the_pool_with_the_servers_settings(realm: RealmHandle) -> None:
    """The pass's connection plans generically and never scans; the pool gets it back as it was."""
    from engine.runs.runner import PassConnection

    bind = realm.sessions.kw["bind"]

    async def settings(conn: Any) -> tuple[str, str, str, int]:
        row = await conn.fetchrow(
            "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),"
            " current_setting('jit'), pg_backend_pid()"
        )
        return row[0], row[1], row[2], row[3]

    async with bind.connect() as plain:
        defaults = (await settings((await plain.get_raw_connection()).driver_connection))[:3]
    assert defaults[0] == "auto" and defaults[1] == "on"

    async with PassConnection(bind) as pass_connection:
        raw = await pass_connection.raw()
        *inside, pid = await settings(raw)
        assert inside == ["force_generic_plan", "off", "off"]
    # Every connection the pool holds now, that one included, has the server's settings again.
    held = [await bind.connect() for _ in range(3)]
    try:
        seen = [await settings((await c.get_raw_connection()).driver_connection) for c in held]
    finally:
        for c in held:
            await c.close()
    assert pid in {s[3] for s in seen}
    assert {tuple(s[:3]) for s in seen} == {defaults}


async def test_a_pass_connection_the_server_ended_is_thrown_away_without_failing_the_pass(realm: RealmHandle) -> None:
    """The server ends the pass's connection (a restart, an administrator): handing it back neither
    raises nor returns it to the pool; the pool's connections all work afterwards."""
    import asyncio

    from engine.runs.runner import PassConnection

    bind = realm.sessions.kw["bind"]
    async with PassConnection(bind) as pass_connection:
        pid = (await pass_connection.raw()).get_server_pid()
        async with bind.connect() as other:
            assert (await other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})).scalar()
            deadline = asyncio.get_running_loop().time() + 60
            while await scalar(realm, "SELECT count(*) FROM pg_stat_activity WHERE pid = :p", p=pid):
                assert asyncio.get_running_loop().time() < deadline, "the server did not end the connection"
                await asyncio.sleep(0.05)
    held = [await bind.connect() for _ in range(3)]
    try:
        pids = [(await c.execute(text("SELECT pg_backend_pid()"))).scalar() for c in held]
    finally:
        for c in held:
            await c.close()
    assert pid not in pids


async def test_a_publisher_who_holds_an_organization_only_makes_its_steps_there_on_the_fast_path(
    realm: RealmHandle,
) -> None:
    """A grant bounded by an organization, and a group whose role is, are checked in that
    organization: a publisher who holds what they need there, and nowhere else, makes every step
    on the fast path, and writes what the ordinary path writes."""
    org = await realm.organization("Eng")
    member_role = await realm.role("org-members", ["org.members.write"], boundary="organization")
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(
            session, realm.actor, authority, org.id, name="Stewards", role_ids=[member_role.id]
        )
    publisher = await realm.user()
    await realm.assign(publisher, await realm.role("publisher", ["realm.workflows.*"]))
    org_admin = await realm.role("org-admin", ["org.*"], boundary="organization")
    await realm.assign(publisher, org_admin, organization_id=org.id)
    actor = Actor(type="user", id=publisher.id, realm_id=realm.id)
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {
                "id": "grant",
                "type": "assign_role",
                "role_id": member_role.id,
                "scope": "organization",
                "organization_id": org.id,
            },
            {"id": "join", "type": "add_to_group", "group_id": group.id},
            {"id": "done", "type": "end"},
        ],
    }
    wid = await _publish_as(realm, actor, definition)
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    expected, fast = await ordinary_then_fast(realm, wid, await subjects(realm, org.id, 3), clock)
    assert expected["run"][0] == "succeeded", expected
    assert [g[1] for g in expected["grants"]] == [org.id]  # the grant is bounded by the organization
    assert fast.fast.moved == 3 * 2


async def test_an_expiring_realm_wide_grant_in_a_run_about_an_organization_is_made_on_the_fast_path(
    realm: RealmHandle,
) -> None:
    """A run about an organization grants a realm-wide role that expires: the fast path grants it
    realm-wide (not in the run's organization), expiring at the run's time plus the step's duration,
    exactly as the ordinary path does."""
    org_id, role, group = await directory_for_runs(realm)
    definition = three_steps(role, group)
    definition["steps"][0]["expires_in"] = "720h"
    wid = await publish(realm, definition)
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    people = await subjects(realm, org_id, 3)
    expected, fast = await ordinary_then_fast(realm, wid, people, clock, organization_id=org_id)
    assert expected["run"][0] == "succeeded", expected
    assert [(g[0], g[1], g[2]) for g in expected["grants"]] == [(role.id, None, clock.now() + timedelta(hours=720))]
    assert fast.fast.moved == 2 * 3


async def _refusing_change(realm: RealmHandle, what: str, granted: Role, group: Group, org_id: str) -> None:
    """The granted role, or the group's roles, come to need a permission the publisher does not hold."""
    strong = await realm.role("strong", ["realm.users.write"]) if what == "group" else None
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        if strong is None:
            await roles.update_role(
                session, realm.actor, authority, granted.id, permissions=["realm.audit.read", "realm.users.write"]
            )
        else:
            await update_group(session, realm.actor, authority, org_id, group.id, role_ids=[strong.id])


@pytest.mark.parametrize("what", ["role", "group"])
async def test_a_role_or_group_changed_after_it_was_kept_is_read_again(realm: RealmHandle, what: str) -> None:
    """The fast path keeps the roles and groups it read, with the realm's authorization epoch: once
    the granted role, or the roles a group gives, need a permission the publisher does not hold,
    the next run's step is refused (the publisher lacks what it now needs), never made from the
    kept copy."""
    org_id, _, group = await directory_for_runs(realm)
    early, late = await subjects(realm, org_id, 2)
    granted = await realm.role("granted", ["realm.audit.read"])
    publisher = await realm.user()
    await realm.assign(publisher, await realm.role("power", ["realm.workflows.*", "realm.audit.read", "org.*"]))
    wid = await _publish_as(realm, Actor(type="user", id=publisher.id, realm_id=realm.id), three_steps(granted, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    r = runner(realm, clock)
    await start(realm, wid, early.id)
    await drain(r)
    assert r.fast.moved == 3 and granted.id in r.fast.roles and group.id in r.fast.groups

    await _refusing_change(realm, what, granted, group, org_id)
    second = await start(realm, wid, late.id)
    clock.advance(seconds=1)
    await drain(r)
    run, attempts = await load(realm, second)
    # The grant fails as the first step (nothing to undo); the join fails after the grant, undone.
    failed, state = ("grant", "failed") if what == "role" else ("join", "compensated")
    assert (run.state, run.error_category) == (state, "publisher_lacks_authority"), run.last_error
    assert [(a.step_id, a.state) for a in attempts if a.state == "failed"] == [(failed, "failed")]
    joined = await scalar(realm, "SELECT count(*) FROM group_members WHERE user_id = :u", u=late.id)
    granted_now = await scalar(
        realm, "SELECT count(*) FROM role_assignments WHERE user_id = :u AND role_id = :r", u=late.id, r=granted.id
    )
    # Whatever the run had made before the refused step was undone by its compensation.
    assert (granted_now, joined) == (0, 0)


async def test_a_subjects_kept_authority_is_read_again_once_a_role_it_holds_changed(realm: RealmHandle) -> None:
    """The fast path keeps a subject's authority with the realm's epoch as well as the subject's
    own: a change to a role the subject holds moves only the realm's. The subject first outranks
    the publisher (its run is refused); once its role is weakened, the
    next run about it reads its authority again and is made on the fast path, never judged from
    the kept copy."""
    org_id, viewer, group = await directory_for_runs(realm)
    (subject,) = await subjects(realm, org_id, 1)
    publisher = await realm.user()
    await realm.assign(publisher, await realm.role("power", ["realm.workflows.*", "org.*"]))
    admin_role = await realm.role("user-admin", ["realm.users.write"])
    await realm.assign(subject, admin_role)
    wid = await _publish_as(realm, Actor(type="user", id=publisher.id, realm_id=realm.id), three_steps(viewer, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    r = runner(realm, clock)
    engine = realm.sessions.kw["bind"]

    refused = await start(realm, wid, subject.id)
    await drain(r)
    run, _ = await load(realm, refused)
    assert (run.state, run.error_category) == ("failed", "target_outranks_actor"), run.last_error
    assert r.fast.moved == 1  # the refusal, recorded by the batched executor
    assert (realm.id, subject.id) in r.fast.authorities  # the stronger subject's authority is kept
    user_epoch = await scalar(realm, "SELECT authz_epoch FROM users WHERE id = :u", u=subject.id)

    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await roles.update_role(session, realm.actor, authority, admin_role.id, permissions=["realm.workflows.read"])
    assert await scalar(realm, "SELECT authz_epoch FROM users WHERE id = :u", u=subject.id) == user_epoch

    second = await start(realm, wid, subject.id)
    clock.advance(seconds=1)
    with recording(engine) as log:
        await engine.dispose()
        await drain(r)
    run, attempts = await load(realm, second)
    assert run.state == "succeeded", run.last_error
    assert [(a.step_id, a.state) for a in attempts] == [
        ("grant", "succeeded"),
        ("join", "succeeded"),
        ("done", "succeeded"),
    ]
    assert r.fast.moved == 1 + 3  # all three steps on the fast path
    # The publisher's authority (the realm's epoch moved), then the subject's before each of its
    # two changes: the kept copy of the subject's authority answered none of them.
    assert log.queries.count(AUTHORITY.sql) == 1 + 2


async def test_a_group_reads_each_thing_once_and_the_next_group_only_what_its_runs_changed(realm: RealmHandle) -> None:
    """In one group commit, the revision, the role, the group and the publisher's authority are
    read once for all its runs; the next group of runs of the workflow reads none of them again.
    Each new subject's authority is read before the grant and again before joining the group,
    because the grant moved that subject's epoch."""
    org_id, role, group = await directory_for_runs(realm)
    people = await subjects(realm, org_id, 6)
    wid = await publish(realm, three_steps(role, group))
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    r = runner(realm, clock)
    engine = realm.sessions.kw["bind"]
    reads = (batched.REVISION_BY_ID.sql, batched.ROLE_BY_ID.sql, batched.GROUP_WITH_ROLES.sql)

    with recording(engine) as log:
        await engine.dispose()  # the connections made from here on note what they send
        for person in people[:3]:
            await start(realm, wid, person.id)
        log.clear()
        await drain(r)
    assert r.fast.moved == 3 * 3
    assert [log.queries.count(q) for q in reads] == [1, 1, 1]
    assert log.queries.count(AUTHORITY.sql) == 1 + 2 * 3  # the publisher's, then each subject's twice

    with recording(engine) as log:
        await engine.dispose()
        for person in people[3:]:
            await start(realm, wid, person.id)
        clock.advance(seconds=1)
        log.clear()
        await drain(r)
    assert r.fast.moved == 2 * 3 * 3
    sent = log.queries
    assert [sent.count(q) for q in reads] == [0, 0, 0]
    assert sent.count(AUTHORITY.sql) == 2 * 3
    # The pass: the claim, then one round per step, each the group's lock and one statement for the
    # whole group (each new subject's authority read between them), then a claim that finds nothing.
    rounds = [q for q in sent if q in (batched.LOCK_FOR_TRANSITION.sql, batched.FAST_TRANSITIONS.sql)]
    assert rounds == [batched.LOCK_FOR_TRANSITION.sql, batched.FAST_TRANSITIONS.sql] * 3
    assert (log.count("BEGIN"), log.count("COMMIT")) == (5, 5), log.summary()


async def test_in_one_group_runs_granting_different_roles_each_grant_their_own(realm: RealmHandle) -> None:
    """Two workflows grant two roles; their runs share group commits, and each grant is recorded
    with its own role, as the ordinary path records it."""
    org_id, viewer, group = await directory_for_runs(realm)
    auditor = await realm.role("auditor", ["realm.audit.read"])
    by_role = {viewer.id: await publish(realm, three_steps(viewer, group), name="Viewers")}
    by_role[auditor.id] = await publish(realm, three_steps(auditor, group), name="Auditors")
    people = await subjects(realm, org_id, 4)
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    granted = [viewer, auditor, viewer, auditor]
    for person, role in zip(people, granted, strict=True):
        await start(realm, by_role[role.id], person.id)
    r = runner(realm, clock)
    await drain(r)
    assert r.fast.moved == 4 * 3
    for person, role in zip(people, granted, strict=True):
        async with realm.sessions() as session:
            recorded = (
                await session.execute(
                    text(
                        "SELECT details->>'role_id', details->>'role' FROM audit_events"
                        " WHERE type = 'role.assigned' AND subject_id = :u"
                    ),
                    {"u": person.id},
                )
            ).all()
        assert [tuple(row) for row in recorded] == [(role.id, role.name)]


async def test_a_group_that_gives_a_realm_wide_role_needs_its_permissions_realm_wide(realm: RealmHandle) -> None:
    """A publisher who holds ``org.*`` in one organization only adds nobody to a group of it whose
    role is realm-wide with an ``org.`` permission: a realm-wide role's permissions are needed in
    the whole realm, on the fast path as on the ordinary one. (Publishing checks that too: the
    group comes to give the role after the workflow was published.)"""
    org = await realm.organization("Eng")
    wide = await realm.role("members-everywhere", ["org.members.write"])  # bounded by nothing
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org.id, name="Everywhere")
    publisher = await realm.user()
    await realm.assign(publisher, await realm.role("publisher", ["realm.workflows.*"]))
    await realm.assign(
        publisher, await realm.role("org-admin", ["org.*"], boundary="organization"), organization_id=org.id
    )
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "join", "type": "add_to_group", "group_id": group.id}, {"id": "done", "type": "end"}],
    }
    wid = await _publish_as(realm, Actor(type="user", id=publisher.id, realm_id=realm.id), definition)
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await update_group(session, realm.actor, authority, org.id, group.id, role_ids=[wide.id])
    subject = (await subjects(realm, org.id, 1))[0]
    run_id = await start(realm, wid, subject.id)
    r = runner(realm, FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0))
    await drain(r)
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category) == ("failed", "publisher_lacks_authority"), run.last_error
    assert [(a.step_id, a.state) for a in attempts] == [("join", "failed")]
    assert not await scalar(realm, "SELECT count(*) FROM group_members WHERE user_id = :u", u=subject.id)
    assert r.fast.moved == 1  # the refusal, recorded by the batched executor


async def test_a_workflow_without_an_end_step_succeeds_after_its_last_step_on_the_fast_path(realm: RealmHandle) -> None:
    """The last step ends the run in its own transition, whether or not it is an ``end`` step."""
    org_id, role, group = await directory_for_runs(realm)
    definition = three_steps(role, group)
    definition["steps"] = definition["steps"][:2]  # grant, join: no end step
    wid = await publish(realm, definition)
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    people = await subjects(realm, org_id, 4)
    expected, fast = await ordinary_then_fast(realm, wid, people[:2], clock)
    assert expected["run"][:2] == ("succeeded", 2), expected["run"]  # past its last step
    assert [a[0] for a in expected["audit"]][-2:] == ["workflow.step.succeeded", "workflow.run.succeeded"]
    assert fast.fast.moved == 2
    # Two steps, two transitions, on either path: no third one to notice that nothing is left.
    for person, on_fast_path in ((people[2], True), (people[3], False)):
        await start(realm, wid, person.id)
        r = runner(realm, clock, fast=on_fast_path)
        made = 0
        while passed := await r.run_pass():
            made += passed
        assert (made, r.fast.moved) == (2, 2 if on_fast_path else 0)


def one_step(step: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [step, {"id": "done", "type": "end"}]}


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "ordinary path"])
async def test_two_runs_about_one_subject_see_each_others_changes(realm: RealmHandle, fast: bool) -> None:
    """One subject, two runs in one group commit: the first (the administrator's) makes the subject
    a user administrator; the second, whose publisher does not hold that, must then find the
    subject stronger than its publisher and change nothing. Read before the first run's grant, the
    subject would still look weaker: so such runs never share a statement."""
    org_id, _, group = await directory_for_runs(realm)
    [subject] = await subjects(realm, org_id, 1)
    user_admin = await realm.role("user-admin", ["realm.users.write"])
    publisher = await realm.user()
    await realm.assign(publisher, await realm.role("power", ["realm.workflows.*", "org.*"]))
    promote = await _publish_as(
        realm,
        realm.actor,
        one_step({"id": "promote", "type": "assign_role", "role_id": user_admin.id, "scope": "realm"}),
    )
    join = await _publish_as(
        realm,
        Actor(type="user", id=publisher.id, realm_id=realm.id),
        one_step({"id": "join", "type": "add_to_group", "group_id": group.id}),
        name="Join",
    )
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    first = await start(realm, promote, subject.id)
    second = await start(realm, join, subject.id)
    await drain(runner(realm, clock, fast=fast))

    run, _ = await load(realm, first)
    assert run.state == "succeeded", run.last_error
    run, attempts = await load(realm, second)
    assert (run.state, run.error_category) == ("failed", "target_outranks_actor"), run.last_error
    assert [(a.step_id, a.state) for a in attempts] == [("join", "failed")]
    assert await scalar(realm, "SELECT count(*) FROM group_members WHERE user_id = :u", u=subject.id) == 0


async def test_leaving_a_group_on_the_fast_path_writes_what_the_ordinary_path_writes(realm: RealmHandle) -> None:
    """``remove_from_group`` has a batched form: the join and the leave of each run are made in the
    group's statements, and every row matches the ordinary path's; a subject not in the group is
    refused the ordinary way, as before."""
    org_id, _role, group = await directory_for_runs(realm)
    wid = await publish(
        realm,
        {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "steps": [
                {"id": "join", "type": "add_to_group", "group_id": group.id},
                {"id": "out", "type": "remove_from_group", "group_id": group.id},
                {"id": "done", "type": "end"},
            ],
        },
    )
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    expected, fast = await ordinary_then_fast(realm, wid, await subjects(realm, org_id, 3), clock)
    assert expected["run"][0] == "succeeded" and expected["groups"] == []
    assert [a[0] for a in expected["audit"]][1:4] == [
        "group.member_added",
        "workflow.step.succeeded",
        "group.member_removed",
    ]
    assert fast.fast.moved == 2 * 3
    # Leaving a group one is not in: the batched executor records the refusal itself.
    leave_only = await publish(
        realm,
        {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "steps": [{"id": "out", "type": "remove_from_group", "group_id": group.id}],
        },
        name="Leave only",
    )
    [outsider] = await subjects(realm, org_id, 1)
    run_id = await start(realm, leave_only, outsider.id)
    again = runner(realm, clock)
    await drain(again)
    async with realm.sessions() as session:
        row = (
            await session.execute(text("SELECT state, error_category FROM workflow_runs WHERE id = :r"), {"r": run_id})
        ).one()
    assert tuple(row) == ("failed", "not_a_member") and again.fast.moved == 1
