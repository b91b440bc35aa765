"""Each step type's own rules, pinned by what a run leaves in the database (seed 000, "Step types",
"Compensation", "Error categories"): the category and message of every refusal, that refusals are
permanent (one attempt, then compensation, though the policy allows three), what a succeeded step
records, and how it is undone.

Runs here take the ordinary path (``fast_path=False``) unless a test says otherwise: the fast
path mirrors the successes of ``assign_role``, ``add_to_group`` and ``end`` and is compared with
the ordinary path in test_engine_fast_path.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from engine.directory.audit import Actor
from engine.directory.models import User
from engine.platform.clock import FixedClock
from engine.platform.ids import new_id
from engine.runs import run_reads
from engine.runs import service as runs
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.runner import Runner, RunnerSettings
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.directory import member_group
from testing.factories import RealmHandle

RETRY = {"max_attempts": 3, "backoff": "1s"}  # a refusal still gets one attempt only


def body(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "retry": RETRY, "steps": list(steps)}


async def publish(realm: RealmHandle, definition: dict[str, Any], actor: Actor | None = None) -> str:
    actor = actor or realm.actor
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session,
            actor,
            name=f"Steps {new_id('org')[-8:]}",
            definition=definition,
            has_definition=True,
            requires_approval=False,
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, actor, workflow.id, 1)
    return workflow.id


class Outcome:
    """A finished (or waiting) run, its attempts and its audit events (type, subject, details)."""

    def __init__(self, run: WorkflowRun, attempts: list[StepAttempt], events: list[tuple[str, Any, Any, Any, Any]]):
        self.run, self.attempts, self.events = run, attempts, events

    def types(self, prefix: str = "") -> list[str]:
        return [t for t, *_ in self.events if t.startswith(prefix)]

    def event(self, kind: str) -> tuple[str, str | None, str | None, dict[str, Any], str | None]:
        found = [e for e in self.events if e[0] == kind]
        assert len(found) == 1, (kind, self.types())
        return found[0]


async def run_steps(
    realm: RealmHandle,
    subject_id: str,
    *steps: dict[str, Any],
    organization_id: str | None = None,
    clock: FixedClock | None = None,
    mail: bool = False,
    publisher: Actor | None = None,
    between: Any = None,
) -> Outcome:
    wid = await publish(realm, body(*steps), publisher)
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, realm.actor, wid, subject_id=subject_id, organization_id=organization_id
        )
        run_id = run.id
    if between is not None:
        await between()
    runner = Runner(
        realm.sessions,
        "worker-steps-1-aaaa",
        settings=RunnerSettings(lease=timedelta(seconds=30), fast_path=False, mail_configured=mail),
        clock=clock or FixedClock(datetime.now(UTC)),
    )
    for _ in range(20):
        if not await runner.run_pass():
            break
    async with realm.sessions() as session:
        loaded = await run_reads.get_run(session, realm.id, run_id)
        attempts = await run_reads.run_attempts(session, run_id)
        rows = await session.execute(
            text(
                "SELECT type, category, subject_id, details, subject_type FROM audit_events "
                "WHERE correlation_id = :r ORDER BY occurred_at, id"
            ),
            {"r": run_id},
        )
        events = [(t, c, s, d, st) for t, c, s, d, st in rows]
    return Outcome(loaded, attempts, events)


def refused(outcome: Outcome, category: str, message: str) -> None:
    """One failed attempt with this category and message, the run ended by it (never retried)."""
    failed = [a for a in outcome.attempts if a.state == "failed"]
    assert [(a.error_category, a.error_message) for a in failed] == [(category, message)]
    assert outcome.run.state in ("failed", "compensated"), outcome.run.state
    assert (outcome.run.error_category, outcome.run.last_error) == (category, message)
    assert outcome.types("workflow.step.failed") == ["workflow.step.failed"]
    assert outcome.event("workflow.step.failed")[3]["error_category"] == category


async def user_status(realm: RealmHandle, user_id: str) -> str:
    async with realm.sessions() as session:
        user = await session.get(User, user_id)
        assert user is not None
        return user.status


async def publisher_with(realm: RealmHandle, email: str, *permissions: str) -> tuple[User, Actor]:
    user = await realm.user(email)
    role = await realm.role(f"publisher-{email}", ["realm.workflows.publish", "realm.workflows.write", *permissions])
    await realm.assign(user, role)
    return user, Actor(type="user", id=user.id, realm_id=realm.id)


async def put_in_group_by_hand(realm: RealmHandle, group_id: str, user_id: str) -> None:
    """A membership made outside any run (no source run)."""
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("INSERT INTO group_members (group_id, user_id, realm_id) VALUES (:g, :u, :r)"),
            {"g": group_id, "u": user_id, "r": realm.id},
        )


# --- refusals: category, message, permanent -------------------------------------------------------


async def test_an_organization_scoped_grant_without_an_organization_is_refused(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    role = await realm.role("Viewer", ["realm.workflows.read"], boundary="organization")
    done = await run_steps(
        realm, subject.id, {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "organization"}
    )
    refused(done, "organization_required", "This step needs an organization and the run has none.")
    async with realm.sessions() as session:
        held = await session.scalar(text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": subject.id})
    assert held == 0


async def test_a_role_needing_approval_is_granted_only_after_an_approval_step(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    role = await realm.role("Auditor", ["realm.audit.read"], requires_approval=True)
    done = await run_steps(
        realm, subject.id, {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}
    )
    refused(done, "approval_missing", "Auditor requires approval and no approval step decided it.")


async def test_a_run_never_suspends_its_own_publisher(realm: RealmHandle) -> None:
    publisher, actor = await publisher_with(realm, "publisher@example.com", "realm.users.suspend")
    done = await run_steps(realm, publisher.id, {"id": "off", "type": "suspend_user"}, publisher=actor)
    refused(done, "self_action", "A run never suspends its own accountable publisher.")
    assert await user_status(realm, publisher.id) == "active"


async def test_suspending_a_suspended_user_is_a_permanent_conflict(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")

    async def suspend_first() -> None:
        async with realm.sessions() as session, session.begin():
            await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": subject.id})

    done = await run_steps(realm, subject.id, {"id": "off", "type": "suspend_user"}, between=suspend_first)
    refused(done, "conflict", "The user is already suspended.")


async def test_removing_a_non_member_from_a_group_or_an_organization_is_refused(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    other = await realm.user("other@example.com")
    org_id, group_id = await member_group(realm, other.id)
    done = await run_steps(realm, subject.id, {"id": "out", "type": "remove_from_group", "group_id": group_id})
    refused(done, "not_a_member", "The subject is not in this group.")
    done = await run_steps(realm, subject.id, {"id": "leave", "type": "remove_membership", "organization_id": org_id})
    refused(done, "not_a_member", "The subject is not a member of the organization.")


async def test_remove_membership_without_any_organization_is_refused(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    done = await run_steps(realm, subject.id, {"id": "leave", "type": "remove_membership"})
    refused(done, "organization_required", "This step needs an organization and the run has none.")


async def test_a_notice_to_a_subject_removed_from_the_database_fails_permanently(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")

    async def removed() -> None:
        async with realm.sessions() as session, session.begin():
            await session.execute(text("DELETE FROM users WHERE id = :u"), {"u": subject.id})

    done = await run_steps(realm, subject.id, {"id": "tell", "type": "notify", "notice": "welcome"}, between=removed)
    refused(done, "subject_missing", "The subject no longer exists.")


@pytest.mark.parametrize("address", ["", " "], ids=["empty", "blank"])
async def test_a_notice_to_a_subject_without_an_address_fails_permanently(realm: RealmHandle, address: str) -> None:
    subject = await realm.user("subject@example.com")

    async def blanked() -> None:
        async with realm.sessions() as session, session.begin():
            await session.execute(text("UPDATE users SET email = :e WHERE id = :u"), {"e": address, "u": subject.id})

    done = await run_steps(realm, subject.id, {"id": "tell", "type": "notify", "notice": "welcome"}, between=blanked)
    refused(done, "no_recipients", "The subject has no email address.")
    async with realm.sessions() as session:
        notices = await session.scalar(
            text("SELECT count(*) FROM workflow_notices WHERE user_id = :u"), {"u": subject.id}
        )
    assert notices == 0


async def test_a_grant_the_subject_already_holds_is_a_permanent_conflict(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    role = await realm.role("Viewer", ["realm.workflows.read"])
    await realm.assign(subject, role)
    done = await run_steps(
        realm, subject.id, {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}
    )
    refused(done, "conflict", "The user already holds Viewer in that scope.")


# --- what a succeeded step records --------------------------------------------------------------


async def test_a_grant_records_its_assignment_expiry_and_undo(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    org = await realm.organization("Eng")
    await realm.member(org, subject)
    role = await realm.role("Viewer", ["realm.workflows.read"], boundary="organization")
    clock = FixedClock((datetime.now(UTC) + timedelta(minutes=1)).replace(microsecond=0))
    done = await run_steps(
        realm,
        subject.id,
        {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "organization", "expires_in": "2h"},
        organization_id=org.id,
        clock=clock,
    )
    assert done.run.state == "succeeded", (done.run.error_category, done.run.last_error)
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT id, organization_id, expires_at, source_run_id, approver_id FROM role_assignments "
                    "WHERE user_id = :u"
                ),
                {"u": subject.id},
            )
        ).all()
    assert len(rows) == 1
    assignment_id, organization_id, expires_at, source_run_id, approver = rows[0]
    assert (organization_id, expires_at, source_run_id, approver) == (
        org.id,
        clock.now() + timedelta(hours=2),
        done.run.id,
        None,
    )
    (grant,) = done.attempts
    assert grant.result == {"assignment_id": assignment_id, "role_id": role.id, "organization_id": org.id}
    assert (grant.compensation_strategy, grant.compensation_state) == ("undo", "pending")


async def test_membership_steps_record_what_they_did(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    org_id, group_id = await member_group(realm, subject.id)
    done = await run_steps(
        realm,
        subject.id,
        {"id": "join", "type": "add_to_group", "group_id": group_id},
        {"id": "out", "type": "remove_from_group", "group_id": group_id},
        {"id": "leave", "type": "remove_membership"},
        {"id": "off", "type": "suspend_user"},
        organization_id=org_id,
    )
    assert done.run.state == "succeeded", (done.run.error_category, done.run.last_error)
    join, out, leave, off = done.attempts
    assert join.result == {"group_id": group_id, "organization_id": org_id}
    assert (join.compensation_strategy, join.compensation_state) == ("undo", "pending")
    assert out.result == {"group_id": group_id}
    assert leave.result == {"organization_id": org_id}
    assert off.result == {"status": "suspended"}
    for never_undone in (out, leave, off):
        assert (never_undone.compensation_strategy, never_undone.compensation_state) == ("none", "not_needed")
    assert await user_status(realm, subject.id) == "suspended"
    async with realm.sessions() as session:
        memberships = await session.scalar(
            text("SELECT count(*) FROM memberships WHERE user_id = :u"), {"u": subject.id}
        )
    assert memberships == 0


async def test_remove_role_revokes_the_subjects_assignments_in_the_runs_organization_only(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    bystander = await realm.user("bystander@example.com")
    eng, ops = await realm.organization("Eng"), await realm.organization("Ops")
    for org in (eng, ops):
        await realm.member(org, subject)
    scoped = await realm.role("Lead", ["realm.workflows.read"], boundary="organization")
    in_eng = await realm.assign(subject, scoped, organization_id=eng.id)
    in_ops = await realm.assign(subject, scoped, organization_id=ops.id)
    wide = await realm.role("Reader", ["realm.audit.read"])
    subject_wide = await realm.assign(subject, wide)
    bystander_wide = await realm.assign(bystander, wide)
    done = await run_steps(
        realm,
        subject.id,
        {"id": "lead", "type": "remove_role", "role_id": scoped.id},
        {"id": "reader", "type": "remove_role", "role_id": wide.id},
        organization_id=eng.id,
    )
    assert done.run.state == "succeeded", (done.run.error_category, done.run.last_error)
    lead, reader = done.attempts
    assert lead.result == {"removed_assignments": [in_eng.id]}
    assert reader.result == {"removed_assignments": [subject_wide.id]}
    async with realm.sessions() as session:
        left = set((await session.execute(text("SELECT id FROM role_assignments"))).scalars())
    assert in_ops.id in left and bystander_wide.id in left
    assert in_eng.id not in left and subject_wide.id not in left


async def test_a_notice_records_its_address_and_whether_it_can_be_taken_back(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    step = {"id": "tell", "type": "notify", "notice": "welcome"}
    clock = FixedClock(datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC))
    for mail, state, compensation in ((False, "not_configured", "not_needed"), (True, "queued", "impossible")):
        done = await run_steps(realm, subject.id, step, mail=mail, clock=clock)
        assert done.run.state == "succeeded", (done.run.error_category, done.run.last_error)
        (tell,) = done.attempts
        async with realm.sessions() as session:
            notice = (
                await session.execute(
                    text(
                        "SELECT id, realm_id, user_id, workflow_id, approval_id, notice, to_address, state, "
                        "created_at, next_attempt_at, body FROM workflow_notices WHERE run_id = :r"
                    ),
                    {"r": done.run.id},
                )
            ).one()
        notice_id, *row, body = notice
        assert row == [
            realm.id,
            subject.id,
            done.run.workflow_id,
            None,
            "welcome",
            "subject@example.com",
            state,
            clock.now(),
            clock.now() if mail else None,
        ]
        # The workflow's own name and the run's time, in the realm's wording.
        assert "Welcome! Your account is ready to use." in body
        assert 'sent by the workflow "Steps ' in body and "on 2031-05-04 03:02 UTC." in body
        assert tell.result == {"notice_id": notice_id, "to": "subject@example.com", "state": state}
        assert (tell.compensation_strategy, tell.compensation_state) == ("impossible", compensation)


# --- compensation: undone once, audited, and something already gone counts as done --------------


FAIL = {"id": "fail", "type": "remove_membership", "organization_id": None}  # organization set per test


async def test_compensation_takes_the_subject_out_of_the_group_and_revokes_the_grant(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    org_id, group_id = await member_group(realm, subject.id)
    elsewhere = await realm.organization("Elsewhere")
    role = await realm.role("Viewer", ["realm.workflows.read"])
    done = await run_steps(
        realm,
        subject.id,
        {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
        {"id": "join", "type": "add_to_group", "group_id": group_id},
        {**FAIL, "organization_id": elsewhere.id},
    )
    assert done.run.state == "compensated", (done.run.error_category, done.run.last_error)
    grant, join, _ = done.attempts
    assert (grant.compensation_state, grant.compensation_result) == ("done", {"removed": True})
    assert (join.compensation_state, join.compensation_result) == ("done", {"removed": True})
    # Newest first: the group, then the grant; each effect's own event names the compensation.
    assert done.types("workflow.step.compensated") == ["workflow.step.compensated"] * 2
    undone = [e for e in done.events if e[3].get("reason") == "compensation"]
    assert [(t, c, s, st) for t, c, s, _, st in undone] == [
        ("group.member_removed", "directory", subject.id, "user"),
        ("role.revoked", "authorization", subject.id, "user"),
    ]
    assert undone[0][3] == {"group_id": group_id, "reason": "compensation"}
    assert grant.result is not None
    assert undone[1][3] == {"assignment_id": grant.result["assignment_id"], "reason": "compensation"}
    async with realm.sessions() as session:
        groups = await session.scalar(text("SELECT count(*) FROM group_members WHERE user_id = :u"), {"u": subject.id})
        grants = await session.scalar(
            text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": subject.id}
        )
    assert (groups, grants) == (0, 0)
    assert org_id


async def test_an_effect_already_gone_counts_as_compensated_without_an_event(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    elsewhere = await realm.organization("Elsewhere")
    role = await realm.role("Viewer", ["realm.workflows.read"])
    done = await run_steps(
        realm,
        subject.id,
        {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
        {"id": "join", "type": "add_to_group", "group_id": group_id},
        {"id": "ungrant", "type": "remove_role", "role_id": role.id},
        {"id": "out", "type": "remove_from_group", "group_id": group_id},
        {**FAIL, "organization_id": elsewhere.id},
    )
    assert done.run.state == "compensated", (done.run.error_category, done.run.last_error)
    grant, join, *_ = done.attempts
    gone = {"removed": False, "reason": "already_gone"}
    assert (grant.compensation_state, grant.compensation_result) == ("done", gone)
    assert (join.compensation_state, join.compensation_result) == ("done", gone)
    assert [e for e in done.events if e[3].get("reason") == "compensation"] == []


async def test_compensation_leaves_a_membership_the_run_did_not_make(realm: RealmHandle) -> None:
    """The run put the subject in the group and took them out; someone put them back by hand
    while the run waited. That membership is not the run's: compensation leaves it."""
    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    elsewhere = await realm.organization("Elsewhere")
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=1))  # ahead of the run made below, however slow
    waiting = await run_steps(
        realm,
        subject.id,
        {"id": "join", "type": "add_to_group", "group_id": group_id},
        {"id": "out", "type": "remove_from_group", "group_id": group_id},
        {"id": "pause", "type": "wait", "duration": "1h"},
        {**FAIL, "organization_id": elsewhere.id},
        clock=clock,
    )
    assert waiting.run.state == "waiting", (waiting.run.error_category, waiting.run.last_error)
    await put_in_group_by_hand(realm, group_id, subject.id)
    clock.advance(hours=2)
    runner = Runner(
        realm.sessions, "worker-steps-2-bbbb", settings=RunnerSettings(lease=timedelta(seconds=30)), clock=clock
    )
    for _ in range(20):
        if not await runner.run_pass():
            break
    async with realm.sessions() as session:
        run = await run_reads.get_run(session, realm.id, waiting.run.id)
        join = (await run_reads.run_attempts(session, run.id))[0]
        kept = await session.scalar(
            text("SELECT count(*) FROM group_members WHERE group_id = :g AND user_id = :u"),
            {"g": group_id, "u": subject.id},
        )
    assert run.state == "compensated", (run.state, run.error_category)
    assert (join.step_id, join.compensation_result) == ("join", {"removed": False, "reason": "already_gone"})
    assert kept == 1


async def test_compensation_takes_the_subject_out_of_each_group_the_run_put_them_in(realm: RealmHandle) -> None:
    """Two groups joined, then a failure: each undo takes the subject out of its own group only."""
    subject = await realm.user("subject@example.com")
    _, first = await member_group(realm, subject.id, "First")
    _, second = await member_group(realm, subject.id, "Second")
    elsewhere = await realm.organization("Elsewhere")
    done = await run_steps(
        realm,
        subject.id,
        {"id": "join-first", "type": "add_to_group", "group_id": first},
        {"id": "join-second", "type": "add_to_group", "group_id": second},
        {**FAIL, "organization_id": elsewhere.id},
    )
    assert done.run.state == "compensated", (done.run.error_category, done.run.last_error)
    assert [(a.step_id, a.compensation_result) for a in done.attempts[:2]] == [
        ("join-first", {"removed": True}),
        ("join-second", {"removed": True}),
    ]
    undone = [e[3] for e in done.events if e[0] == "group.member_removed"]
    assert undone == [{"group_id": second, "reason": "compensation"}, {"group_id": first, "reason": "compensation"}]


async def test_adding_a_subject_already_in_the_group_is_a_permanent_conflict(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    await put_in_group_by_hand(realm, group_id, subject.id)
    done = await run_steps(realm, subject.id, {"id": "join", "type": "add_to_group", "group_id": group_id})
    refused(done, "already_a_member", "The user is already in this group.")


@pytest.mark.parametrize("step_type", ["remove_from_group", "remove_membership"])
async def test_a_run_never_takes_a_subject_stronger_than_its_publisher_out_of_a_group_or_organization(
    realm: RealmHandle, step_type: str
) -> None:
    """Both removals act with the publisher's authority, never as the operator: a subject who holds
    what the publisher does not keeps the place, and the refusal is permanent, with the directory's
    code and words."""
    subject = await realm.user("subject@example.com")
    org_id, group_id = await member_group(realm, subject.id)
    await put_in_group_by_hand(realm, group_id, subject.id)
    await realm.assign(subject, await realm.role("user-admin", ["realm.users.write"]))
    _, actor = await publisher_with(realm, "publisher@example.com", "org.*")
    step, what, kept = {
        "remove_from_group": (
            {"id": "out", "type": step_type, "group_id": group_id},
            "their groups",
            "SELECT count(*) FROM group_members WHERE group_id = :g AND user_id = :u",
        ),
        "remove_membership": (
            {"id": "leave", "type": step_type, "organization_id": org_id},
            "their memberships",
            "SELECT count(*) FROM memberships WHERE organization_id = :o AND user_id = :u",
        ),
    }[step_type]
    done = await run_steps(realm, subject.id, step, publisher=actor)
    refused(
        done,
        "target_outranks_actor",
        f"This user holds permissions you do not hold (realm.users.write); you cannot change {what}.",
    )
    async with realm.sessions() as session:
        left = await session.scalar(text(kept), {"g": group_id, "o": org_id, "u": subject.id})
    assert left == 1


async def test_a_run_never_suspends_a_subject_stronger_than_its_publisher(realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    await realm.assign(subject, await realm.role("user-admin", ["realm.users.write"]))
    _, actor = await publisher_with(realm, "publisher@example.com", "realm.users.suspend")
    done = await run_steps(realm, subject.id, {"id": "off", "type": "suspend_user"}, publisher=actor)
    refused(
        done,
        "target_outranks_actor",
        "This user holds permissions you do not hold (realm.users.write); you cannot change their status.",
    )
    assert await user_status(realm, subject.id) == "active"
