"""Time windows and windows of rows pinned at their exact boundary, on a real database: the last
value allowed and the first refused (docs/testing.md, "Limits and windows")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import passwords, sessions, sign_in_links, throttle, webhooks
from engine.directory.audit import Actor
from engine.directory.models import User
from engine.directory.realms import realm_by_slug
from engine.directory.sessions import create_session, resolve_session
from engine.directory.sign_in_links import consume_sign_in_link, issue_sign_in_link, sign_in_link_usable
from engine.directory.throttle import THROTTLE_PER_ACCOUNT, THROTTLE_PER_ADDRESS, UnknownRealmFailures, check_throttle
from engine.platform.clock import FixedClock
from engine.platform.errors import Conflict, NotFound, TooManyRequests, Unauthorized
from engine.runs import approval_links, approvals, schedules
from engine.runs.approval_models import WorkflowApproval
from engine.runs.diagnostics import health_of
from engine.runs.retention import cleanup_finished_runs, last_retention_cleanup
from testing.diagnostics import Team, diagnostics_of
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.runs import drain, existing, finish_runs, load, make_runner, start
from testing.workflows import manual, publish

MICROSECOND = timedelta(microseconds=1)

# --- retention: finished runs older than the retention days ----------------------------------------


async def test_a_run_that_ended_exactly_the_retention_ago_is_kept_and_one_a_microsecond_older_goes(
    realm: RealmHandle,
) -> None:
    """With 180 days, the cutoff is ``now - 180 days``: a run that ended at the cutoff stays, one
    that ended a microsecond before it is deleted; the pass is recorded with its cutoff."""
    at_cutoff, older = await finish_runs(realm, 2, days_ago=1)
    now = datetime.now(UTC)
    cutoff = now - timedelta(days=180)
    async with realm.sessions() as session, session.begin():
        for run_id, ended in ((at_cutoff, cutoff), (older, cutoff - MICROSECOND)):
            await session.execute(
                text("UPDATE workflow_runs SET finished_at = :t WHERE id = :r"), {"t": ended, "r": run_id}
            )
    done = await cleanup_finished_runs(realm.sessions, retention_days=180, clock=FixedClock(now))
    assert (done.deleted, done.cutoff) == (1, cutoff)
    assert await existing(realm, [at_cutoff, older]) == {at_cutoff}
    async with realm.sessions() as session:
        status = await last_retention_cleanup(session)
    assert status is not None
    assert (status.ran_at, status.deleted, status.cutoff, status.retention_days) == (now, 1, cutoff.isoformat(), 180)
    async with realm.sessions() as session:
        details = await session.scalar(text("SELECT details FROM maintenance_passes WHERE task = 'retention.cleanup'"))
    assert details == {"cutoff": cutoff.isoformat(), "batches": 1, "retention_days": 180}


async def test_a_retention_pass_stops_after_its_last_batch_and_counts_only_what_it_deleted(realm: RealmHandle) -> None:
    """Three old runs, one per batch: two batches allowed delete two, three delete all; a pass
    that finds nothing deletes and counts nothing, in one batch."""
    old = await finish_runs(realm, 3, days_ago=200)
    now = datetime.now(UTC)
    two = await cleanup_finished_runs(
        realm.sessions, retention_days=180, clock=FixedClock(now), batch_size=1, max_batches=2
    )
    assert (two.ran_at, two.deleted, two.batches) == (now, 2, 2)
    assert len(await existing(realm, old)) == 1
    rest = await cleanup_finished_runs(
        realm.sessions, retention_days=180, clock=FixedClock(now), batch_size=2, max_batches=3
    )
    assert (rest.deleted, rest.batches) == (1, 1)
    nothing = await cleanup_finished_runs(realm.sessions, retention_days=180, clock=FixedClock(now), batch_size=2)
    assert (nothing.deleted, nothing.batches) == (0, 1)


# --- an approval's expiry, for the run, for a decision and for its one-time link -------------------


async def pending_approval(realm: RealmHandle) -> tuple[str, User, WorkflowApproval, FixedClock]:
    """A run waiting for ``approver`` on an approval that expires in 1 h (the shortest allowed)."""
    subject, approver = await realm.user(), await realm.user()
    wid = await publish(
        realm,
        manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"}),
        name=f"Approval {approver.id[-6:]}",
    )
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock))
    async with realm.sessions() as session:
        approval = await approvals.for_step(session, run_id, "approve")
    assert approval is not None and approval.expires_at == clock.now() + timedelta(hours=1)
    return run_id, approver, approval, clock


async def decision(realm: RealmHandle, approver: User, approval_id: str, now: datetime) -> str:
    """What approving at ``now`` answers ("approved" or the refusal's code); rolled back."""
    async with realm.sessions() as session:
        try:
            decided = await approvals.decide(
                session,
                Actor(type="user", id=approver.id, realm_id=realm.id),
                approval_id,
                approve=True,
                comment=None,
                now=now,
            )
            return decided.status
        except Conflict as refused:
            return refused.code
        finally:
            await session.rollback()


async def test_an_approval_is_decided_until_the_microsecond_it_expires_and_the_run_expires_it_then(
    realm: RealmHandle,
) -> None:
    """Approving a microsecond before ``expires_at`` succeeds, at ``expires_at`` it is refused
    (409); the run is not due a microsecond before, and at ``expires_at`` it expires the approval."""
    run_id, approver, approval, clock = await pending_approval(realm)
    assert await decision(realm, approver, approval.id, approval.expires_at - MICROSECOND) == "approved"
    assert await decision(realm, approver, approval.id, approval.expires_at) == "conflict"

    clock.current = approval.expires_at - MICROSECOND  # the reminder is long sent; the run is not due
    await drain(make_runner(realm, clock))
    run, _ = await load(realm, run_id)
    assert run.state == "awaiting_approval" and run.due_at == approval.expires_at
    clock.current = approval.expires_at  # due, and expired at this very instant
    await drain(make_runner(realm, clock))
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category) == ("failed", "approval_expired")
    assert [(a.step_id, a.error_category) for a in attempts] == [("approve", "approval_expired")]


async def test_an_approval_link_opens_until_the_microsecond_its_approval_expires(realm: RealmHandle) -> None:
    _, approver, approval, _ = await pending_approval(realm)
    async with realm.sessions() as session, session.begin():
        row = await session.get(WorkflowApproval, approval.id)
        assert row is not None
        token = await approval_links.create_link(session, row, approver.id)

    async def redeem(now: datetime) -> str:
        async with realm.sessions() as session:
            try:
                return await approval_links.redeem_link(session, realm.id, approver.id, token, now=now)
            except NotFound:
                return "not_found"
            finally:
                await session.rollback()

    assert await redeem(approval.expires_at - MICROSECOND) == approval.id
    assert await redeem(approval.expires_at) == "not_found"


# --- diagnostics read a workflow's last 500 runs ------------------------------------------------------


@pytest.mark.parametrize(("newer", "counted"), [(499, True), (500, False)])  # the seed's 500, not the constant
async def test_diagnostics_read_the_last_500_runs(
    client: AsyncTestClient[Litestar], realm: RealmHandle, newer: int, counted: bool
) -> None:
    """The oldest run failed its compensation; ``newer`` runs succeeded after it. With 499 newer
    ones it is the 500th and last run read: it shows, and the workflow needs attention. With 500
    newer ones it is the 501st: neither the diagnostics nor the workflows list sees it."""
    team = await Team.make(realm, f"Window {newer}")
    user = await realm.user()
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                """
                INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, state,
                       step_index, trigger_type, trigger_key, input, input_version, publisher_id, depth,
                       created_at, updated_at, finished_at)
                SELECT 'wrn_' || lpad(g::text, 26, '0'), :r, v.workflow_id, v.number, v.id, :u,
                       CASE WHEN g = 0 THEN 'compensation_failed' ELSE 'succeeded' END,
                       0, 'manual', 'k' || g, '{}', 1, :u, 0, now() - interval '1 day' + g * interval '1 second',
                       now(), now() - interval '1 day' + g * interval '1 second'
                  FROM generate_series(0, :newer) g, workflow_revisions v WHERE v.workflow_id = :w AND v.number = 1
                """
            ),
            {"r": realm.id, "u": user.id, "w": team.workflow_id, "newer": newer},
        )
    found: dict[str, Any] = await diagnostics_of(client, realm, team.workflow_id)
    assert found["window"]["runs"] == 500
    assert found["runs_by_state"].get("compensation_failed", 0) == (1 if counted else 0)
    assert (found["health"] == "attention_required") is counted, found["health"]
    async with realm.sessions() as session:
        health = (await health_of(session, realm.id, [team.workflow_id]))[team.workflow_id]
    assert (health.status == "attention_required") is counted, health


# --- a definition's named ids: up to 500 checked in the realm ---------------------------------------


def _naming(count: int) -> dict[str, Any]:
    """A definition naming ``count`` ids none of which exists: an organization, a role, a group and a
    subscription, and ``count - 4`` approvers in approval steps of 20 — more steps than 20, so its
    shape is wrong, but each step on its own is sound."""
    approvers = [f"usr_{n:026d}" for n in range(count - 4)]
    steps: list[dict[str, Any]] = [
        {"id": f"ask-{i}", "type": "approval", "approvers": approvers[i : i + 20], "expires_in": "72h"}
        for i in range(0, len(approvers), 20)
    ]
    steps[0]["organization_id"] = "org_" + "0" * 26
    steps += [
        {"id": "grant", "type": "assign_role", "role_id": "rol_" + "0" * 26, "scope": "realm"},
        {"id": "team", "type": "add_to_group", "group_id": "grp_" + "0" * 26},
        {"id": "sync", "type": "call_webhook", "subscription_id": "whk_" + "0" * 26},
        {"id": "done", "type": "end"},
    ]
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps}


@pytest.mark.parametrize(("named", "checked"), [(500, True), (501, False)])
async def test_a_definition_naming_500_ids_is_checked_in_the_realm_and_one_naming_501_is_not(
    client: AsyncTestClient[Litestar], realm: RealmHandle, named: int, checked: bool
) -> None:
    """No valid definition names more than 500 ids (20 steps): one that names more is answered with
    its shape's issues alone, never looked up; up to 500 every id is checked in the realm too."""
    answer = await client.post(
        realm.api + "/workflows/validate", json={"definition": _naming(named)}, headers=realm.headers
    )
    assert answer.status_code == 200, answer.text
    errors = {e["path"]: e["code"] for e in answer.json()["errors"]}
    assert errors["/definition/steps"] == "too_many", errors["/definition/steps"]
    last = len(_naming(named)["steps"]) - 1
    references = {
        "/definition/steps/0/organization_id": "not_found",
        "/definition/steps/0/approvers/0": "not_eligible",
        "/definition/steps/0/approvers/19": "not_eligible",
        f"/definition/steps/{last - 3}/role_id": "not_found",
        f"/definition/steps/{last - 2}/group_id": "not_found",
        f"/definition/steps/{last - 1}/subscription_id": "not_found",
    }
    if checked:
        assert {path: errors.get(path) for path in references} == references
    else:
        assert not set(references) & set(errors), sorted(set(references) & set(errors))


# --- a rotated secret's 24 h overlap ------------------------------------------------------------------


async def test_a_rotated_secret_signs_for_exactly_24_hours(realm: RealmHandle) -> None:
    """Rotated at ``t``, the previous secret signs beside the new one until a microsecond before
    ``t + 24 h`` and not at ``t + 24 h``."""
    async with realm.sessions() as session, session.begin():
        made, first = await webhooks.create_subscription(
            session, realm.actor, TEST_SECRET_KEY, destination="https://hooks.example.com/in"
        )
    rotated_at = datetime.now(UTC) - timedelta(minutes=5)
    async with realm.sessions() as session, session.begin():
        row, second = await webhooks.rotate_secret(session, realm.actor, TEST_SECRET_KEY, made.id, now=rotated_at)
    end = rotated_at + timedelta(hours=24)
    assert row.previous_secret_expires_at == end
    assert webhooks.signing_secrets(row, TEST_SECRET_KEY, end - MICROSECOND) == [second, first]
    assert webhooks.signing_secrets(row, TEST_SECRET_KEY, end) == [second]


# --- a schedule's granted_before, and a wait's end -------------------------------------------------


async def test_role_holders_granted_exactly_granted_before_ago_are_selected_and_a_microsecond_later_not(
    realm: RealmHandle,
) -> None:
    role = await realm.role("temp", ["realm.workflows.read"])
    on_time, late = await realm.user(), await realm.user()
    await realm.assign(on_time, role)
    await realm.assign(late, role)
    now = datetime.now(UTC)
    cutoff = now - timedelta(hours=48)
    async with realm.sessions() as session, session.begin():
        for user, granted in ((on_time, cutoff), (late, cutoff + MICROSECOND)):
            await session.execute(
                text("UPDATE role_assignments SET created_at = :t WHERE user_id = :u"), {"t": granted, "u": user.id}
            )
    selector = {"type": "role_holders", "role_id": role.id, "granted_before": "48h"}
    async with realm.sessions() as session:
        chosen = await schedules.select_subjects(session, realm.id, selector, now)
    assert chosen.subjects == [(on_time.id, None)]


async def test_a_wait_ends_at_the_very_instant_its_duration_is_over(realm: RealmHandle) -> None:
    subject = await realm.user()
    wid = await publish(
        realm,
        manual({"id": "pause", "type": "wait", "duration": "2h"}, {"id": "done", "type": "end"}),
        name="Exact wait",
    )
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    started = clock.now()
    await drain(make_runner(realm, clock))
    run, _ = await load(realm, run_id)
    assert (run.state, run.due_at) == ("waiting", started + timedelta(hours=2))
    clock.current = started + timedelta(hours=2) - MICROSECOND
    await drain(make_runner(realm, clock))
    assert (await load(realm, run_id))[0].state == "waiting"
    clock.current = started + timedelta(hours=2)
    await drain(make_runner(realm, clock))
    assert (await load(realm, run_id))[0].state == "succeeded"


# --- a one-time sign-in link's 15 minutes ---------------------------------------------------------


async def test_a_sign_in_link_works_until_a_second_before_fifteen_minutes_and_not_at_them(
    realm: RealmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made at ``t``, the link expires at ``t + 15 min`` (the specification's 15 minutes, not the
    constant): a second (and a microsecond) before, it is usable and signs in; at ``t + 15 min``
    and a second after, it is neither usable nor spent."""
    issued = datetime.now(UTC).replace(microsecond=0)
    clock = FixedClock(issued)
    monkeypatch.setattr(sign_in_links, "SYSTEM_CLOCK", clock)
    user = await realm.user()
    async with realm.sessions() as session, session.begin():
        token, row = await issue_sign_in_link(session, user)
    assert row.expires_at == issued + timedelta(minutes=15)
    async with realm.sessions() as session:
        realm_row = await realm_by_slug(session, realm.slug)
    assert realm_row is not None

    async def usable(at: datetime) -> bool:
        clock.set(at)
        async with realm.sessions() as session:
            return await sign_in_link_usable(session, realm_row, token)

    async def consumed(at: datetime) -> str | None:
        clock.set(at)
        async with realm.sessions() as session, session.begin():
            try:
                return (await consume_sign_in_link(session, realm_row, token)).id
            except Unauthorized:
                return None

    fifteen = issued + timedelta(minutes=15)
    assert [await usable(fifteen + offset) for offset in (-timedelta(seconds=1), -MICROSECOND)] == [True, True]
    assert [await usable(fifteen + offset) for offset in (timedelta(0), timedelta(seconds=1))] == [False, False]
    assert await consumed(fifteen) is None
    assert await consumed(fifteen + timedelta(seconds=1)) is None
    assert await consumed(fifteen - timedelta(seconds=1)) == user.id  # not spent by the refusals above
    assert await consumed(fifteen - timedelta(seconds=1)) is None  # and once only


# --- a browser session's two idle hours and twelve hours at most ----------------------------------


async def test_a_session_lives_until_two_idle_hours_and_twelve_hours_and_not_at_them(
    realm: RealmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened at ``t``, a session is live until ``t + 12 h`` and not at it; last seen at ``s``, until
    ``s + 2 h`` and not at it. A look-up more than a minute after the last one records it (and
    idle time counts from there); one a minute after, or less, does not."""
    opened = datetime.now(UTC).replace(microsecond=0)
    clock = FixedClock(opened)
    monkeypatch.setattr(sessions, "SYSTEM_CLOCK", clock)
    user = await realm.user()
    async with realm.sessions() as session, session.begin():
        cookie, row = await create_session(session, user, mfa=False)
    assert row.expires_at == opened + timedelta(hours=12)

    async def seen_at(moment: datetime) -> None:
        async with realm.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE sessions SET last_seen_at = :m WHERE id = :i"), {"m": moment, "i": row.id}
            )

    async def live(at: datetime) -> tuple[bool, datetime | None, datetime]:
        """Whether the session is live at ``at``, the look-up's recorded activity, the row's last seen."""
        clock.set(at)
        async with realm.sessions() as session, session.begin():
            info = await resolve_session(session, cookie)
        async with realm.sessions() as session:
            last_seen = await session.scalar(text("SELECT last_seen_at FROM sessions WHERE id = :i"), {"i": row.id})
        assert info is None or (info.user.id, info.session.id, info.realm and info.realm.id) == (
            user.id,
            row.id,
            realm.id,
        )
        return info is not None, info.touched_at if info else None, last_seen

    idle_end = opened + timedelta(hours=2)
    await seen_at(opened)
    assert await live(opened + timedelta(minutes=1)) == (True, None, opened)  # a minute: not recorded
    assert await live(idle_end - MICROSECOND) == (True, idle_end - MICROSECOND, idle_end - MICROSECOND)
    await seen_at(opened)
    assert await live(idle_end) == (False, None, opened)
    assert await live(idle_end + timedelta(seconds=1)) == (False, None, opened)

    end = opened + timedelta(hours=12)
    await seen_at(end - timedelta(minutes=30))
    assert await live(end - MICROSECOND) == (True, end - MICROSECOND, end - MICROSECOND)
    assert await live(end) == (False, None, end - MICROSECOND)

    # A suspended user's live session is none, and so is a revoked one.
    await seen_at(opened)
    assert (await live(opened + timedelta(seconds=1)))[0] is True
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": user.id})
    assert (await live(opened + timedelta(seconds=1)))[0] is False
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'active' WHERE id = :u"), {"u": user.id})
        await session.execute(text("UPDATE sessions SET revoked_at = now() WHERE id = :i"), {"i": row.id})
    assert (await live(opened + timedelta(seconds=1)))[0] is False


# --- a failed sign-in's fifteen minutes -----------------------------------------------------------


async def test_failed_sign_ins_refuse_the_next_until_fifteen_minutes_after_them_and_not_at_them(
    realm: RealmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five failures of an account, twenty of a client address, all at ``t``: the account (from any
    address) and the address (for any account) are refused until ``t + 15 min`` and not at it. An
    account without failures at another address is not refused."""
    failed = datetime.now(UTC).replace(microsecond=0)
    clock = FixedClock(failed)
    monkeypatch.setattr(throttle, "SYSTEM_CLOCK", clock)
    async with realm.sessions() as session, session.begin():
        for i in range(THROTTLE_PER_ADDRESS):
            await session.execute(
                text(
                    "INSERT INTO sign_in_failures (realm_id, email, client_address, kind, occurred_at)"
                    " VALUES (:r, :e, '10.0.0.1', 'password', :t)"
                ),
                {
                    "r": realm.id,
                    "e": "pat@example.com" if i < THROTTLE_PER_ACCOUNT else f"guess{i}@example.com",
                    "t": failed,
                },
            )

    async def refused(email: str, address: str, at: datetime) -> bool:
        clock.set(at)
        async with realm.sessions() as session, session.begin():
            try:
                await check_throttle(session, realm.id, email, address)
            except TooManyRequests:
                return True
            return False

    end = failed + timedelta(minutes=15)
    assert [await refused("Pat@example.com", "10.9.9.9", at) for at in (end - MICROSECOND, end)] == [True, False]
    assert [await refused("sam@example.com", "10.0.0.1", at) for at in (end - MICROSECOND, end)] == [True, False]
    assert await refused("sam@example.com", "10.9.9.9", end - MICROSECOND) is False


async def test_an_addresses_failures_refuse_it_at_unknown_realms_until_fifteen_minutes_after_them(
    realm: RealmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty failures of a client address at ``t``, at a realm: the address is refused at a realm
    that does not exist until ``t + 15 min`` and, at it, told the password is not right."""
    failed = datetime.now(UTC).replace(microsecond=0)
    clock = FixedClock(failed)
    monkeypatch.setattr(passwords, "SYSTEM_CLOCK", clock)
    async with realm.sessions() as session, session.begin():
        for i in range(THROTTLE_PER_ADDRESS):
            await session.execute(
                text(
                    "INSERT INTO sign_in_failures (realm_id, email, client_address, kind, occurred_at)"
                    " VALUES (:r, :e, '10.0.0.1', 'password', :t)"
                ),
                {"r": realm.id, "e": f"guess{i}@example.com", "t": failed},
            )

    async def answer(at: datetime) -> str:
        clock.set(at)
        async with realm.sessions() as session, session.begin():
            try:
                await passwords.sign_in_with_password(
                    session, "no-such-realm", "pat@example.com", "x", "10.0.0.1", UnknownRealmFailures()
                )
            except TooManyRequests:
                return "refused"
            except Unauthorized:
                return "not right"
            return "signed in"

    end = failed + timedelta(minutes=15)
    assert [await answer(end - MICROSECOND), await answer(end)] == ["refused", "not right"]


async def test_the_engine_takes_a_password_of_12_to_200_characters_and_refuses_11_and_201(realm: RealmHandle) -> None:
    """The rule lives where the password is set: a caller that skips the API's check (the command
    line, a seed) meets it too, on a new user and on a changed password, and nothing is stored."""
    from engine.directory.principals import update_user
    from engine.platform.errors import ValidationFailed

    for length in (12, 200):
        user = await realm.user(f"ok{length}@example.com", password="p" * length)
        assert user.password_hash
    for length, code in ((11, "too_short"), (201, "too_long")):
        with pytest.raises(ValidationFailed) as refused:
            await realm.user(f"no{length}@example.com", password="p" * length)
        assert [(i.path, i.code) for i in refused.value.issues] == [("/password", code)]
    async with realm.sessions() as session:
        stored = (await session.execute(text("SELECT email FROM users WHERE email LIKE 'no%'"))).all()
    assert stored == []
    changed = await realm.user("changed@example.com", password="p" * 12)
    for length, code in ((11, "too_short"), (201, "too_long")):
        with pytest.raises(ValidationFailed) as refused:
            async with realm.sessions() as session, session.begin():
                await update_user(
                    session,
                    realm.actor,
                    changed.id,
                    display_name=None,
                    guest=None,
                    password="q" * length,
                    authority=None,
                )
        assert [(i.path, i.code) for i in refused.value.issues] == [("/password", code)]
    for length in (12, 200):
        async with realm.sessions() as session, session.begin():
            await update_user(
                session, realm.actor, changed.id, display_name=None, guest=None, password="q" * length, authority=None
            )
    async with realm.sessions() as session:
        kept = await session.get(User, changed.id)
        assert kept is not None and kept.password_hash != changed.password_hash


async def test_a_grant_counts_as_held_until_the_microsecond_it_expires_and_not_at_it(
    realm: RealmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same role again is a duplicate while the first grant holds, up to a microsecond before
    its ``expires_at``; at that instant the grant holds nothing and the role may be granted anew,
    even before the expiry sweep has removed the old row."""
    from engine.directory import role_assignments
    from engine.directory.authz import load_authority

    user = await realm.user("held@example.com")
    role = await realm.role("short-lived", ["realm.users.read"])
    t = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    clock = FixedClock(t)
    monkeypatch.setattr(role_assignments, "SYSTEM_CLOCK", clock)

    async def assign() -> Any:
        async with realm.sessions() as session, session.begin():
            authority = await load_authority(session, realm.id, "user", realm.admin.id)
            return await role_assignments.create_assignment(
                session, realm.actor, authority, role_id=role.id, user_id=user.id, expires_at=None
            )

    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await role_assignments.create_assignment(
            session, realm.actor, authority, role_id=role.id, user_id=user.id, expires_at=t + timedelta(hours=1)
        )
    clock.set(t + timedelta(hours=1) - timedelta(microseconds=1))
    with pytest.raises(Conflict):
        await assign()
    clock.set(t + timedelta(hours=1))
    again = await assign()
    assert again.expires_at is None
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text("SELECT count(*) FROM role_assignments WHERE user_id = :u AND role_id = :r"),
                {"u": user.id, "r": role.id},
            )
        ).scalar_one()
    assert rows == 2  # the expired one is still there for the sweep


async def test_the_home_figures_count_runs_that_ended_within_24_hours_and_not_one_ended_24_hours_ago(
    realm: RealmHandle,
) -> None:
    """The realm home's failed, compensated, compensation-failed and rejected figures count the runs
    that ended in the last 24 hours: one that ended a microsecond less than 24 hours ago counts,
    one that ended exactly 24 hours ago does not. A rejection counts as rejected, never as failed."""
    from engine.directory.overview import workflow_kpis
    from engine.runs.outcome import APPROVAL_REJECTED, DECISION_CATEGORIES

    ids = await finish_runs(realm, 8, days_ago=0)
    ended = [
        ("failed", None),
        ("compensated", None),
        ("compensation_failed", None),
        ("failed", APPROVAL_REJECTED),
    ]
    async with realm.sessions() as session, session.begin():
        for index, (state, category) in enumerate(ended):
            for run_id, age in ((ids[2 * index], "24 hours - 1 microsecond"), (ids[2 * index + 1], "24 hours")):
                await session.execute(
                    text(
                        "UPDATE workflow_runs SET state = :s, error_category = :c,"
                        f" finished_at = now() - interval '{age}' WHERE id = :r"
                    ),
                    {"s": state, "c": category, "r": run_id},
                )
        # the same transaction, so the same now() as the figures' statement
        kpis = await workflow_kpis(session, realm.id, realm.admin.id, decisions=DECISION_CATEGORIES)
    counted = (kpis.failed_24h, kpis.compensated_24h, kpis.compensation_failed_24h, kpis.rejected_24h)
    assert counted == (1, 1, 1, 1)
    assert kpis.runs_in_flight == 0
