"""Schedule triggers on a real database: slots, selectors, the 500 cap, and firing once per slot.

Time moves with a FixedClock (never a sleep): the scheduler and the runner take it as their "now".
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from engine.directory.models import Group, GroupMember, Membership, Organization, User
from engine.platform.clock import SYSTEM_CLOCK, FixedClock
from engine.platform.ids import new_id
from engine.runs import controls as run_controls
from engine.runs import schedules
from engine.runs.runner import Runner, RunnerSettings
from engine.workflows.models import Workflow, WorkflowRevision
from testing.factories import RealmHandle
from testing.runs import drain
from testing.workflows import publish


def schedule(select: dict[str, Any], steps: list[dict[str, Any]] | None = None, every: str = "24h") -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [{"type": "schedule", "every": every, "select": select}],
        "steps": steps or [{"id": "done", "type": "end"}],
    }


async def runs_of(realm: RealmHandle, workflow_id: str) -> list[dict[str, Any]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT id, subject_id, organization_id, trigger_type, trigger_key, state FROM workflow_runs"
                " WHERE workflow_id = :w ORDER BY subject_id, created_at"
            ),
            {"w": workflow_id},
        )
        return [dict(r._mapping) for r in rows]


async def fired_events(realm: RealmHandle, workflow_id: str) -> list[dict[str, Any]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT actor_type, actor_id, details FROM audit_events"
                " WHERE type = 'workflow.schedule.fired' AND subject_type = 'workflow' AND subject_id = :w ORDER BY id"
            ),
            {"w": workflow_id},
        )
        return [dict(r._mapping) for r in rows]


async def published_at(realm: RealmHandle, workflow_id: str) -> Any:
    async with realm.sessions() as session:
        value = (
            await session.execute(
                text("SELECT published_at FROM workflow_revisions WHERE workflow_id = :w AND status = 'published'"),
                {"w": workflow_id},
            )
        ).scalar_one()
        return value


async def backdate_assignments(realm: RealmHandle, user_id: str, days: int) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE role_assignments SET created_at = now() - make_interval(days => :d) WHERE user_id = :u"),
            {"d": days, "u": user_id},
        )


class TestWorkflowScheduleAndOffboarding:
    """Seed 000's acceptance test: a role_holders schedule removes expired access and suspends."""

    async def test_expired_access_is_removed_and_the_holder_suspended(self, realm: RealmHandle) -> None:
        contractor = await realm.role("contractor", ["realm.workflows.read"])
        old = await realm.user("old@example.com")
        fresh = await realm.user("fresh@example.com")
        await realm.assign(old, contractor)
        await realm.assign(fresh, contractor)
        await backdate_assignments(realm, old.id, 40)  # held for 40 days: past granted_before (30 days)
        definition = schedule(
            {"type": "role_holders", "role_id": contractor.id, "granted_before": "720h"},
            [
                {"id": "revoke", "type": "remove_role", "role_id": contractor.id},
                {"id": "suspend", "type": "suspend_user"},
                {"id": "done", "type": "end"},
            ],
        )
        wid = await publish(realm, definition, name="Contractor expiry")
        anchor = await published_at(realm, wid)
        clock = FixedClock(anchor + timedelta(seconds=30))

        fired = await schedules.schedule_pass(realm.sessions, clock)
        assert [(f.workflow_id, f.slot, f.started, f.truncated) for f in fired] == [(wid, anchor, 1, 0)]
        runs = await runs_of(realm, wid)
        assert [(r["subject_id"], r["trigger_type"], r["trigger_key"]) for r in runs] == [
            (old.id, "schedule", schedules.slot_key(anchor))
        ]
        events = await fired_events(realm, wid)
        assert len(events) == 1 and events[0]["actor_type"] == "system"
        assert events[0]["details"]["count"] == 1 and events[0]["details"]["truncated"] == 0
        assert events[0]["details"]["slot"] == schedules.slot_key(anchor)

        runner = Runner(
            realm.sessions, "worker-sched-1", settings=RunnerSettings(lease=timedelta(seconds=30)), clock=clock
        )
        await drain(runner)
        assert [r["state"] for r in await runs_of(realm, wid)] == ["succeeded"]
        async with realm.sessions() as session:
            held = (
                (
                    await session.execute(
                        text("SELECT user_id FROM role_assignments WHERE role_id = :r ORDER BY user_id"),
                        {"r": contractor.id},
                    )
                )
                .scalars()
                .all()
            )
            statuses = dict(
                (
                    await session.execute(
                        text("SELECT id, status FROM users WHERE id IN (:a, :b)"), {"a": old.id, "b": fresh.id}
                    )
                ).all()
            )
        assert list(held) == [fresh.id]
        assert statuses == {old.id: "suspended", fresh.id: "active"}

        # A second scheduler pass in the same slot starts nothing.
        clock.advance(minutes=10)
        assert await schedules.schedule_pass(realm.sessions, clock) == []
        assert len(await runs_of(realm, wid)) == 1
        assert len(await fired_events(realm, wid)) == 1

        # The next slot covers the population again: nobody qualifies now (fresh is 0 days in).
        clock.advance(hours=24)
        fired = await schedules.schedule_pass(realm.sessions, clock)
        assert [(f.slot, f.started, f.selected) for f in fired] == [(anchor + timedelta(hours=24), 0, 0)]
        assert len(await runs_of(realm, wid)) == 1

    async def test_two_schedulers_at_once_start_each_run_once(self, realm: RealmHandle) -> None:
        org = await realm.organization("Crew")
        members = [await realm.user() for _ in range(6)]
        for user in members:
            await realm.member(org, user)
        wid = await publish(realm, schedule({"type": "organization_members", "organization_id": org.id}))
        anchor = await published_at(realm, wid)
        clock = FixedClock(anchor + timedelta(minutes=1))
        first, second = await asyncio.gather(
            schedules.schedule_pass(realm.sessions, clock), schedules.schedule_pass(realm.sessions, clock)
        )
        assert len(first) + len(second) == 1  # exactly one of them fired the slot
        runs = await runs_of(realm, wid)
        assert sorted(r["subject_id"] for r in runs) == sorted(u.id for u in members)
        assert {r["organization_id"] for r in runs} == {org.id}
        assert len(await fired_events(realm, wid)) == 1


async def test_missed_slots_are_not_caught_up(realm: RealmHandle) -> None:
    org = await realm.organization()
    user = await realm.user()
    await realm.member(org, user)
    wid = await publish(realm, schedule({"type": "organization_members", "organization_id": org.id}, every="1h"))
    anchor = await published_at(realm, wid)
    clock = FixedClock(anchor + timedelta(hours=3, minutes=30))  # slots 0..3 came; only slot 3 fires
    fired = await schedules.schedule_pass(realm.sessions, clock)
    assert [f.slot for f in fired] == [anchor + timedelta(hours=3)]
    assert [r["trigger_key"] for r in await runs_of(realm, wid)] == [schedules.slot_key(anchor + timedelta(hours=3))]


async def test_a_disabled_workflow_does_not_fire(realm: RealmHandle) -> None:
    org = await realm.organization()
    user = await realm.user()
    await realm.member(org, user)
    wid = await publish(realm, schedule({"type": "organization_members", "organization_id": org.id}))
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, wid, False)
    clock = FixedClock(SYSTEM_CLOCK.now() + timedelta(minutes=1))
    assert await schedules.schedule_pass(realm.sessions, clock) == []
    assert await runs_of(realm, wid) == []


async def test_group_members_include_descendant_groups_only(realm: RealmHandle) -> None:
    org = await realm.organization("Eng")
    other_org = await realm.organization("Sales")
    top, child, grandchild, sibling = (new_id("grp") for _ in range(4))
    users = {name: await realm.user(f"{name}@example.com") for name in ("a", "b", "c", "d", "e")}
    async with realm.sessions() as session, session.begin():
        session.add(Group(id=top, realm_id=realm.id, organization_id=org.id, name="Top"))
        session.add(Group(id=sibling, realm_id=realm.id, organization_id=other_org.id, name="Sibling"))
        await session.flush()
        session.add(Group(id=child, realm_id=realm.id, organization_id=org.id, name="Child", parent_id=top))
        await session.flush()
        session.add(Group(id=grandchild, realm_id=realm.id, organization_id=org.id, name="Grand", parent_id=child))
        await session.flush()
        for name, group in (("a", top), ("b", child), ("c", grandchild), ("d", sibling), ("a", child)):
            session.add(GroupMember(group_id=group, user_id=users[name].id, realm_id=realm.id))
    async with realm.sessions() as session:
        now = SYSTEM_CLOCK.now()
        whole = await schedules.select_subjects(session, realm.id, {"type": "group_members", "group_id": top}, now)
        part = await schedules.select_subjects(session, realm.id, {"type": "group_members", "group_id": child}, now)
        missing = await schedules.select_subjects(
            session, realm.id, {"type": "group_members", "group_id": "grp_nope"}, now
        )
    assert sorted(whole.subjects) == sorted([(users[n].id, org.id) for n in ("a", "b", "c")])  # a once
    assert whole.total == 3 and whole.truncated == 0
    assert sorted(u for u, _ in part.subjects) == sorted(users[n].id for n in ("a", "b", "c"))
    assert missing.subjects == [] and missing.total == 0
    async with realm.sessions() as session:
        named = await schedules.selector_names(
            session,
            realm.id,
            [{"type": "group_members", "group_id": top}, {"type": "organization_members", "organization_id": org.id}],
        )
    assert named == {top: "Top", org.id: "Eng"}  # what the workflow page shows for each selector


async def test_role_holders_skip_recent_expired_and_service_principal_grants(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    role = await realm.role("temp", ["realm.workflows.read"])
    org = await realm.organization()
    held_long = await realm.user()
    recent = await realm.user()
    expired = await realm.user()
    await realm.assign(held_long, role, organization_id=org.id)
    await realm.assign(recent, role)
    await realm.assign(expired, role, expires_in=timedelta(hours=1))
    await backdate_assignments(realm, held_long.id, 10)
    await backdate_assignments(realm, expired.id, 10)
    selector = {"type": "role_holders", "role_id": role.id, "granted_before": "48h"}
    async with realm.sessions() as session:
        now = SYSTEM_CLOCK.now()
        chosen = await schedules.select_subjects(session, realm.id, selector, now)
        later = await schedules.select_subjects(session, realm.id, selector, now + timedelta(hours=2))
        # another realm naming this role selects nobody
        foreign = await schedules.select_subjects(session, other_realm.id, selector, now)
    assert sorted(chosen.subjects) == sorted([(held_long.id, org.id), (expired.id, None)])
    assert later.subjects == [(held_long.id, org.id)]  # the expiring grant ran out
    assert foreign.total == 0


async def test_at_most_500_subjects_per_firing_and_the_rest_reported(realm: RealmHandle) -> None:
    org_id = new_id("org")
    async with realm.sessions() as session, session.begin():
        session.add(Organization(id=org_id, realm_id=realm.id, name="Big"))
        await session.flush()
        ids = [new_id("usr") for _ in range(503)]
        session.add_all(
            User(id=uid, realm_id=realm.id, email=f"big{i}@example.com", display_name=f"Big {i}")
            for i, uid in enumerate(ids)
        )
        await session.flush()
        session.add_all(
            Membership(id=new_id("mem"), realm_id=realm.id, organization_id=org_id, user_id=uid) for uid in ids
        )
    wid = await publish(realm, schedule({"type": "organization_members", "organization_id": org_id}))
    anchor = await published_at(realm, wid)
    fired = await schedules.schedule_pass(realm.sessions, FixedClock(anchor + timedelta(minutes=1)))
    assert [(f.started, f.selected, f.truncated) for f in fired] == [(500, 503, 3)]
    assert len(await runs_of(realm, wid)) == 500
    (event,) = await fired_events(realm, wid)
    assert (event["details"]["count"], event["details"]["selected"], event["details"]["truncated"]) == (500, 503, 3)


async def test_the_workflow_shows_the_next_slot_and_the_last_firing(realm: RealmHandle) -> None:
    org = await realm.organization()
    wid = await publish(realm, schedule({"type": "organization_members", "organization_id": org.id}, every="2h"))
    anchor = await published_at(realm, wid)
    async with realm.sessions() as session:
        workflow = await session.get(Workflow, wid)
        revision = (
            await session.execute(
                text("SELECT id FROM workflow_revisions WHERE workflow_id = :w AND number = 1"), {"w": wid}
            )
        ).scalar_one()
        rev = await session.get(WorkflowRevision, revision)
        assert workflow is not None and rev is not None
        before = await schedules.schedule_status(session, workflow, rev, anchor + timedelta(minutes=5))
    assert [(s.next_slot, s.last_firing) for s in before] == [(anchor, None)]  # due now
    assert [(s.every, s.selector) for s in before] == [
        ("2h", {"type": "organization_members", "organization_id": org.id})
    ]
    await schedules.schedule_pass(realm.sessions, FixedClock(anchor + timedelta(minutes=5)))
    async with realm.sessions() as session:
        after = await schedules.schedule_status(session, workflow, rev, anchor + timedelta(minutes=6))
    assert after[0].next_slot == anchor + timedelta(hours=2)
    assert after[0].last_firing is not None and after[0].last_firing.slot_at == anchor


async def test_the_workflow_page_names_the_schedule_and_its_last_firing(client: Any, realm: RealmHandle) -> None:
    from testing.pages import signed_in

    await signed_in(client, realm)
    org = await realm.organization("Night shift")
    member = await realm.user()
    await realm.member(org, member)
    wid = await publish(realm, schedule({"type": "organization_members", "organization_id": org.id}, every="12h"))
    url = f"/realms/{realm.slug}/workflows/{wid}"
    before = await client.get(url, headers={"Accept": "text/html"})
    block = before.text.split('data-testid="schedules"', 1)[1].split("</section>", 1)[0]
    assert "members of" in block and "Night shift" in block and "due now" in block and "not fired yet" in block
    await schedules.schedule_pass(realm.sessions)
    after = await client.get(url, headers={"Accept": "text/html"})
    block = after.text.split('data-testid="schedules"', 1)[1].split("</section>", 1)[0]
    assert "1 run started" in block and "due now" not in block
    anchor = await published_at(realm, wid)
    assert (anchor + timedelta(hours=12)).strftime("%Y-%m-%d %H:%M:%S") in block


async def test_a_firing_costs_the_same_statements_for_5_or_200_subjects(realm: RealmHandle) -> None:
    """Set-based: the slot's row, the selector, one INSERT of runs, one of their audit events, the counts,
    the firing's audit event and one notification — whatever the number of subjects."""
    from testing.statements import recording

    counts = []
    for size in (5, 200):
        org_id = new_id("org")
        async with realm.sessions() as session, session.begin():
            session.add(Organization(id=org_id, realm_id=realm.id, name=f"Org of {size}"))
            ids = [new_id("usr") for _ in range(size)]
            session.add_all(User(id=u, realm_id=realm.id, email=f"{u}@example.com", display_name=u[-6:]) for u in ids)
            await session.flush()
            session.add_all(
                Membership(id=new_id("mem"), realm_id=realm.id, organization_id=org_id, user_id=u) for u in ids
            )
        wid = await publish(
            realm, schedule({"type": "organization_members", "organization_id": org_id}), name=f"S{size}"
        )
        anchor = await published_at(realm, wid)
        engine = realm.sessions.kw["bind"]
        with recording(engine) as log:
            fired = await schedules.schedule_pass(realm.sessions, FixedClock(anchor + timedelta(minutes=1)))
        assert [(f.workflow_id, f.started) for f in fired] == [(wid, size)]
        counts.append(len(log.queries))
        async with realm.sessions() as session, session.begin():
            await run_controls.set_workflow_enabled(session, realm.actor, wid, False)  # out of the next measurement
    assert counts[0] == counts[1] == 8, counts  # the pass's read + 7 for the firing
