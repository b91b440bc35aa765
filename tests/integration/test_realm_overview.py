"""The read models of the overview pages on a real database: the realm home's directory figures,
its workflow figures and latest events, and what a user or a service principal holds."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from engine.directory.audit import Actor, record_audit
from engine.directory.models import Group, RoleAssignment, ServicePrincipal, WebhookSubscription
from engine.directory.overview import (
    REALM_COUNTS,
    ObjectName,
    latest_activity,
    latest_audit_events_with_names,
    principal_assignments,
    realm_counts,
    user_memberships,
    workflow_kpis,
)
from engine.platform.ids import new_id
from engine.runs.outcome import APPROVAL_REJECTED, DECISION_CATEGORIES
from testing.factories import RealmHandle
from testing.runs import finish_runs, start
from testing.workflows import manual, publish


async def _add_directory(realm: RealmHandle, *, users: int, roles: int, groups: int, webhooks: dict[str, int]) -> None:
    """``users`` users, one organization with ``groups`` groups, ``roles`` roles, and webhook
    subscriptions by state."""
    for _ in range(users):
        await realm.user()
    for index in range(roles):
        await realm.role(f"Counted {index}", ["realm.users.read"])
    org = await realm.organization()
    async with realm.sessions() as session, session.begin():
        for index in range(groups):
            session.add(Group(id=new_id("grp"), realm_id=realm.id, organization_id=org.id, name=f"G{index}"))
        for state, count in webhooks.items():
            for _ in range(count):
                session.add(
                    WebhookSubscription(
                        id=new_id("whk"),
                        realm_id=realm.id,
                        destination=f"https://hooks.example.com/{state}",
                        secret_enc="not-read-here",
                        state=state,
                    )
                )


async def test_the_directory_figures_count_this_realms_resources_and_only_those_asked(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """Each figure counts the realm's own rows (a deleted subscription is not counted), and only
    the figures asked for are given: one the reader may not read is left out, never 0."""
    everything = set(REALM_COUNTS)
    async with realm.sessions() as session:
        before = await realm_counts(session, realm.id, everything)
    await _add_directory(realm, users=2, roles=3, groups=2, webhooks={"active": 1, "paused": 1, "deleted": 1})
    await _add_directory(other_realm, users=1, roles=1, groups=1, webhooks={"active": 3})
    async with realm.sessions() as session:
        after = await realm_counts(session, realm.id, everything)
        some = await realm_counts(session, realm.id, {"users", "groups"})
        others = await realm_counts(session, realm.id, {"roles", "organizations", "webhooks"})
        none_asked = await realm_counts(session, realm.id, set())
        unknown_asked = await realm_counts(session, realm.id, {"secrets"})
    assert set(before) == everything
    added = {name: after[name] - before[name] for name in everything}
    assert added == {"users": 2, "organizations": 1, "roles": 3, "groups": 2, "webhooks": 2}
    assert some == {"users": after["users"], "groups": after["groups"]}
    assert others == {"roles": after["roles"], "organizations": after["organizations"], "webhooks": after["webhooks"]}
    assert none_asked == {}
    assert unknown_asked == {}


async def test_the_latest_events_come_newest_first_with_the_emails_of_the_users_they_name(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """Only users of the realm are named; a service principal acting, an organization as subject,
    the system, or a user of another realm get no name."""
    person = await realm.user("person@example.com")
    stranger = await other_realm.user("stranger@example.com")
    org = await realm.organization()
    async with realm.sessions() as session, session.begin():
        spn = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="Robot")
        session.add(spn)
        first = await record_audit(session, realm.actor, "user.updated", subject_type="user", subject_id=person.id)
        second = await record_audit(
            session,
            Actor(type="service_principal", id=spn.id, realm_id=realm.id),
            "organization.updated",
            subject_type="organization",
            subject_id=org.id,
        )
        third = await record_audit(
            session, Actor.system(realm.id), "user.updated", subject_type="user", subject_id=stranger.id
        )
    async with realm.sessions() as session:
        events, names = await latest_audit_events_with_names(session, realm.id, limit=3)
        two, two_names = await latest_audit_events_with_names(session, realm.id, limit=2)
    assert [event.id for event in events] == [third.id, second.id, first.id]
    assert names == {realm.admin.id: realm.admin.email, person.id: "person@example.com"}
    assert [event.id for event in two] == [third.id, second.id]
    assert two_names == {}


async def test_the_home_activity_names_the_people_and_things_its_events_name(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """Newest first; a user is named by email with a link to their page, an organization by name;
    the system, and a user of another realm, get no name."""
    person = await realm.user("named@example.com")
    stranger = await other_realm.user("stranger@example.com")
    org = await realm.organization("Plant")
    async with realm.sessions() as session, session.begin():
        first = await record_audit(session, realm.actor, "user.updated", subject_type="user", subject_id=person.id)
        second = await record_audit(
            session,
            Actor(type="user", id=person.id, realm_id=realm.id),
            "organization.updated",
            subject_type="organization",
            subject_id=org.id,
        )
        third = await record_audit(
            session, Actor.system(realm.id), "user.updated", subject_type="user", subject_id=stranger.id
        )
    async with realm.sessions() as session:
        events, names = await latest_activity(session, realm.id, 3)
    assert [(e.id, e.type, e.actor_type, e.actor_id, e.subject_type, e.subject_id) for e in events] == [
        (third.id, "user.updated", "system", None, "user", stranger.id),
        (second.id, "organization.updated", "user", person.id, "organization", org.id),
        (first.id, "user.updated", "user", realm.admin.id, "user", person.id),
    ]
    assert names == {
        realm.admin.id: ObjectName(realm.admin.email, f"/users/{realm.admin.id}"),
        person.id: ObjectName("named@example.com", f"/users/{person.id}"),
        org.id: ObjectName("Plant", f"/organizations/{org.id}"),
    }


async def test_a_users_memberships_are_the_organizations_they_belong_to_by_name(realm: RealmHandle) -> None:
    user = await realm.user()
    other = await realm.user()
    zeta = await realm.organization("Zeta")
    alpha = await realm.organization("Alpha")
    elsewhere = await realm.organization("Elsewhere")
    joined_zeta = await realm.member(zeta, user)
    joined_alpha = await realm.member(alpha, user)
    await realm.member(elsewhere, other)
    async with realm.sessions() as session:
        lines = await user_memberships(session, realm.id, user.id)
    assert [(m.organization_id, m.organization_name, m.organization_state) for m in lines] == [
        (alpha.id, "Alpha", "active"),
        (zeta.id, "Zeta", "active"),
    ]
    assert [m.since for m in lines] == [joined_alpha.created_at, joined_zeta.created_at]


async def test_a_principals_roles_are_listed_whole_in_the_order_they_were_given(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """Each line carries the role, its organization (or none), the expiry, who granted it, who
    approved it and the run that gave it; a service principal's roles are its own."""
    user = await realm.user()
    approver = await realm.user()
    org = await realm.organization("Plant")
    plain = await realm.role("Reader", ["realm.users.read"])
    guarded = await realm.role("Org admin", ["org.members.write"], boundary="organization", requires_approval=True)
    first = await realm.assign(user, plain, expires_in=timedelta(days=3))
    async with realm.sessions() as session, session.begin():
        spn = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="Robot")
        session.add(spn)
        await session.flush()
        second = RoleAssignment(
            id=new_id("ras"),
            realm_id=realm.id,
            role_id=guarded.id,
            user_id=user.id,
            organization_id=org.id,
            granted_by=realm.admin.id,
            approver_id=approver.id,
        )
        robots = RoleAssignment(id=new_id("ras"), realm_id=realm.id, role_id=plain.id, service_principal_id=spn.id)
        session.add_all([second, robots])
    stranger = await other_realm.user()
    await other_realm.assign(stranger, await other_realm.role("Elsewhere", ["realm.users.read"]))
    async with realm.sessions() as session:
        lines = await principal_assignments(session, realm.id, user.id)
        robot_lines = await principal_assignments(session, realm.id, spn.id)
        nothing = await principal_assignments(session, realm.id, stranger.id)
    assert [
        (
            line.id,
            line.role_id,
            line.role_name,
            line.requires_approval,
            line.organization_id,
            line.organization_name,
            line.expires_at,
            line.granted_by,
            line.approver_id,
            line.source_run_id,
        )
        for line in lines
    ] == [
        (first.id, plain.id, "Reader", False, None, None, first.expires_at, realm.admin.id, None, None),
        (second.id, guarded.id, "Org admin", True, org.id, "Plant", None, realm.admin.id, approver.id, None),
    ]
    assert all(line.created_at is not None for line in lines)
    assert [(line.id, line.role_name) for line in robot_lines] == [(robots.id, "Reader")]
    assert nothing == []


async def test_the_workflow_figures_tell_each_outcome_apart_and_name_the_oldest_due_run(realm: RealmHandle) -> None:
    """Two failed, one compensated, three rejected and no compensation failed in the last 24 hours;
    of the runs still to do, the one due first is named with its due time."""
    ids = await finish_runs(realm, 6, days_ago=0)
    outcomes = [("failed", None)] * 2 + [("compensated", None)] + [("failed", APPROVAL_REJECTED)] * 3
    async with realm.sessions() as session, session.begin():
        for run_id, (state, category) in zip(ids, outcomes, strict=True):
            await session.execute(
                text("UPDATE workflow_runs SET state = :s, error_category = :c, finished_at = now() WHERE id = :r"),
                {"s": state, "c": category, "r": run_id},
            )
    wid = await publish(realm, manual({"id": "done", "type": "end"}), name="Due")
    subject = await realm.user()
    later, sooner = [await start(realm, wid, subject.id) for _ in range(2)]
    async with realm.sessions() as session, session.begin():
        for run_id, hours in ((later, 5), (sooner, 2)):
            await session.execute(
                text("UPDATE workflow_runs SET due_at = now() + make_interval(hours => :h) WHERE id = :r"),
                {"h": hours, "r": run_id},
            )
        due = (
            await session.execute(text("SELECT due_at FROM workflow_runs WHERE id = :r"), {"r": sooner})
        ).scalar_one()
    async with realm.sessions() as session:
        kpis = await workflow_kpis(session, realm.id, realm.admin.id, decisions=DECISION_CATEGORIES)
    counted = (kpis.failed_24h, kpis.compensated_24h, kpis.compensation_failed_24h, kpis.rejected_24h)
    assert counted == (2, 1, 0, 3)
    assert kpis.runs_in_flight == 2
    assert (kpis.oldest_due_run_id, kpis.oldest_due_run_at) == (sooner, due)
