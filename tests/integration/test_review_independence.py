"""An independent second person approves or rejects: never an account the author made, nor one
whose authority to decide the author gave within COCKPIT_REVIEW_INDEPENDENCE_DAYS (30 by default).

The finding this closes: the author of a revision created a service principal, made it
realm-admin, minted its token, approved their own revision with it and published.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import select, text

from engine.directory import independence, organizations, roles
from engine.directory.accounts import create_user
from engine.directory.audit import Actor
from engine.directory.authz import load_authority
from engine.directory.groups import add_group_member, create_group, update_group
from engine.directory.models import AuditEvent, RoleAssignment, User
from engine.directory.realms import builtin_role
from engine.platform import config
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Forbidden
from engine.platform.ids import new_id
from engine.workflows.catalog import create_workflow
from engine.workflows.lookup import get_revision
from engine.workflows.revisions import decide_revision
from testing.factories import RealmHandle, bearer, browser_session, grant_realm_admin_aged, independent_admin

Client = AsyncTestClient[Litestar]
WINDOW = timedelta(days=30)
MINUTE = timedelta(minutes=1)
DEFINITION = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


async def _workflow(realm: RealmHandle) -> str:
    """A workflow that requires approval, its first revision a draft authored by the realm's admin."""
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session,
            realm.actor,
            name=f"Reviewed {new_id('wfl')[-6:]}",
            requires_approval=True,
            definition=DEFINITION,
            has_definition=True,
        )
        return workflow.id


async def _decide(realm: RealmHandle, reviewer: User, workflow_id: str, *, approve: bool = True) -> None:
    actor = Actor(type="user", id=reviewer.id, realm_id=realm.id, mfa_session=True)
    async with realm.sessions() as session, session.begin():
        await decide_revision(session, actor, workflow_id, 1, approve=approve, comment=None)


async def _refusals(realm: RealmHandle, event: str = "workflow.revision.review_refused") -> list[dict[str, Any]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            select(AuditEvent).where(AuditEvent.realm_id == realm.id, AuditEvent.type == event).order_by(AuditEvent.id)
        )
        return [row.details | {"actor_id": row.actor_id} for row in rows.scalars()]


async def _status(realm: RealmHandle, workflow_id: str) -> str:
    async with realm.sessions() as session:
        revision = await get_revision(session, realm.id, workflow_id, 1)
        return revision.status


async def _operator_user(realm: RealmHandle, email: str) -> User:
    """A user the operator made: nobody in the realm created them."""
    async with realm.sessions() as session, session.begin():
        return await create_user(
            session, Actor.system(realm.id), email=email, display_name=email.split("@")[0], authority=None
        )


async def _refused_with(realm: RealmHandle, reviewer: User, workflow_id: str, reason: str) -> None:
    with pytest.raises(Forbidden) as refused:
        await _decide(realm, reviewer, workflow_id)
    assert refused.value.code == "reviewer_not_independent"
    assert await _status(realm, workflow_id) == "draft"
    last = (await _refusals(realm))[-1]
    assert last["reason"] == reason and last["actor_id"] == reviewer.id
    assert last["author_id"] == realm.admin.id and last["revision"] == 1


async def test_the_authors_service_principal_cannot_approve_and_the_revision_stays_unpublished(
    client: Client, realm: RealmHandle
) -> None:
    """The finding, through the API exactly as it was done."""
    api = realm.api
    made = await client.post(api + "/service-principals", json={"name": "my-robot"}, headers=realm.headers)
    assert made.status_code == 201, made.text
    sp = made.json()["id"]
    admin_role = (await realm.builtin_role("realm-admin")).id
    granted = await client.post(
        api + "/role-assignments", json={"role_id": admin_role, "service_principal_id": sp}, headers=realm.headers
    )
    assert granted.status_code == 201, granted.text
    minted = await client.post(f"{api}/service-principals/{sp}/tokens", json={"name": "t"}, headers=realm.headers)
    assert minted.status_code == 201, minted.text
    robot = bearer(minted.json()["token"])
    workflow_id = await _workflow(realm)
    base = f"{api}/workflows/{workflow_id}/revisions/1"
    for verb in ("approve", "reject"):
        answer = await client.post(f"{base}/{verb}", json={}, headers=robot)
        assert answer.status_code == 403 and answer.json()["code"] == "reviewer_not_independent", answer.text
    published = await client.post(f"{base}/publish", json={}, headers=realm.headers)
    assert published.status_code == 403 and published.json()["code"] == "approval_required"
    refusals = await _refusals(realm)
    assert [(r["reason"], r["decision"], r["actor_id"]) for r in refusals] == [
        ("service_principal", "approve", sp),
        ("service_principal", "reject", sp),
    ]


async def test_a_token_is_no_mfa_session_and_an_independent_session_approves(
    client: Client, realm: RealmHandle
) -> None:
    reviewer, session_headers = await independent_admin(realm, "reviewer@example.com")
    workflow_id = await _workflow(realm)
    base = f"{realm.api}/workflows/{workflow_id}/revisions/1"
    token = bearer(await realm.token(reviewer, "admin"))
    by_token = await client.post(f"{base}/approve", json={}, headers=token)
    assert by_token.status_code == 403 and by_token.json()["code"] == "reviewer_not_independent"
    assert (await _refusals(realm))[-1]["reason"] == "no_mfa_session"
    approved = await client.post(f"{base}/approve", json={}, headers=session_headers)
    assert approved.status_code == 200 and approved.json()["status"] == "approved", approved.text
    published = await client.post(f"{base}/publish", json={}, headers=realm.headers)
    assert published.status_code == 200, published.text


async def test_a_user_the_author_created_never_reviews_even_with_an_old_independent_grant(realm: RealmHandle) -> None:
    created = await realm.user("made-by-author@example.com")  # the realm admin (the author) created them
    await grant_realm_admin_aged(realm, created, by=None, age=timedelta(days=400))
    workflow_id = await _workflow(realm)
    await _refused_with(realm, created, workflow_id, "created_by_author")
    with pytest.raises(Forbidden):
        await _decide(realm, created, workflow_id, approve=False)
    assert (await _refusals(realm))[-1]["decision"] == "reject"


async def test_an_account_made_by_an_account_the_author_made_is_the_authors_too(realm: RealmHandle) -> None:
    deputy = await realm.user("deputy@example.com")
    async with realm.sessions() as session, session.begin():
        deputy_actor = Actor(type="user", id=deputy.id, realm_id=realm.id)
        grandchild = await create_user(
            session, deputy_actor, email="grandchild@example.com", display_name="G", authority=None
        )
    await grant_realm_admin_aged(realm, grandchild, by=None, age=timedelta(days=400))
    await _refused_with(realm, grandchild, await _workflow(realm), "created_by_author")


async def test_the_window_on_an_assignment_by_the_author_day_30_refused_just_past_allowed(realm: RealmHandle) -> None:
    inside = await _operator_user(realm, "inside@example.com")
    outside = await _operator_user(realm, "outside@example.com")
    await grant_realm_admin_aged(realm, inside, by=realm.admin.id, age=WINDOW - MINUTE)
    await grant_realm_admin_aged(realm, outside, by=realm.admin.id, age=WINDOW + MINUTE)
    workflow_id = await _workflow(realm)
    await _refused_with(realm, inside, workflow_id, "authority_from_author")
    await _decide(realm, outside, workflow_id)
    assert await _status(realm, workflow_id) == "approved"


async def test_a_recent_grant_by_the_author_beside_an_independent_one_does_not_taint(realm: RealmHandle) -> None:
    reviewer = await _operator_user(realm, "both@example.com")
    await grant_realm_admin_aged(realm, reviewer, by=None, age=timedelta(days=2))  # someone else granted it
    publisher = await realm.role("Publisher", ["realm.workflows.publish"])
    await realm.assign(reviewer, publisher)  # the author, just now
    workflow_id = await _workflow(realm)
    await _decide(realm, reviewer, workflow_id)
    assert await _status(realm, workflow_id) == "approved"


async def test_the_setting_moves_the_window(realm: RealmHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    reviewer = await _operator_user(realm, "windowed@example.com")
    await grant_realm_admin_aged(realm, reviewer, by=realm.admin.id, age=timedelta(days=8))
    workflow_id = await _workflow(realm)
    settings = config.get_settings()
    monkeypatch.setattr(independence, "get_settings", lambda: replace(settings, review_independence_days=9))
    await _refused_with(realm, reviewer, workflow_id, "authority_from_author")
    monkeypatch.setattr(independence, "get_settings", lambda: replace(settings, review_independence_days=7))
    await _decide(realm, reviewer, workflow_id)


async def _group_with_admin_role(realm: RealmHandle, *, role_by: str | None) -> tuple[str, str]:
    org = await realm.organization()
    async with realm.sessions() as session, session.begin():
        admin_role = await builtin_role(session, realm.id, "realm-admin")
        system = Actor.system(realm.id)
        everything = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(
            session,
            Actor(type="user", id=role_by, realm_id=realm.id) if role_by else system,
            everything,
            org.id,
            name="A",
        )
        await update_group(
            session,
            Actor(type="user", id=role_by, realm_id=realm.id) if role_by else system,
            everything,
            org.id,
            group.id,
            role_ids=[admin_role.id],
        )
    return org.id, group.id


async def _join(realm: RealmHandle, org_id: str, group_id: str, user: User, *, by: Actor) -> None:
    async with realm.sessions() as session, session.begin():
        await organizations.add_member(session, Actor.system(realm.id), org_id, user.id, authority=None)
        everything = await load_authority(session, realm.id, "user", realm.admin.id)
        await add_group_member(session, by, everything, org_id, group_id, user.id)


async def test_a_group_membership_the_author_added_does_not_count(realm: RealmHandle) -> None:
    reviewer = await _operator_user(realm, "grouped@example.com")
    org_id, group_id = await _group_with_admin_role(realm, role_by=None)
    await _join(realm, org_id, group_id, reviewer, by=realm.actor)
    workflow_id = await _workflow(realm)
    await _refused_with(realm, reviewer, workflow_id, "authority_from_author")
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE group_members SET created_at = now() - interval '31 days' WHERE user_id = :u"),
            {"u": reviewer.id},
        )
    await _decide(realm, reviewer, workflow_id)


async def test_a_role_the_author_gave_a_group_does_not_count(realm: RealmHandle) -> None:
    reviewer = await _operator_user(realm, "member@example.com")
    org_id, group_id = await _group_with_admin_role(realm, role_by=realm.admin.id)
    await _join(realm, org_id, group_id, reviewer, by=Actor.system(realm.id))
    workflow_id = await _workflow(realm)
    await _refused_with(realm, reviewer, workflow_id, "authority_from_author")
    # Someone else renaming the group keeps who granted its role: still refused.
    async with realm.sessions() as session, session.begin():
        everything = await load_authority(session, realm.id, "user", realm.admin.id)
        await update_group(session, Actor.system(realm.id), everything, org_id, group_id, name="Renamed")
    await _refused_with(realm, reviewer, workflow_id, "authority_from_author")


async def test_a_group_the_author_moved_under_an_admin_group_does_not_count(realm: RealmHandle) -> None:
    reviewer = await _operator_user(realm, "moved@example.com")
    org_id, parent_id = await _group_with_admin_role(realm, role_by=None)
    system = Actor.system(realm.id)
    async with realm.sessions() as session, session.begin():
        everything = await load_authority(session, realm.id, "user", realm.admin.id)
        child, _ = await create_group(session, system, everything, org_id, name="Child")
    await _join(realm, org_id, child.id, reviewer, by=system)
    async with realm.sessions() as session, session.begin():
        everything = await load_authority(session, realm.id, "user", realm.admin.id)
        await update_group(session, realm.actor, everything, org_id, child.id, parent_id=parent_id)
    await _refused_with(realm, reviewer, await _workflow(realm), "authority_from_author")


async def test_a_role_whose_permissions_the_author_changed_does_not_count(realm: RealmHandle) -> None:
    reviewer = await _operator_user(realm, "auditor@example.com")
    custom = await realm.role("Auditor", ["realm.audit.read"])
    async with realm.sessions() as session, session.begin():
        session.add(RoleAssignment(id=new_id("ras"), realm_id=realm.id, role_id=custom.id, user_id=reviewer.id))
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        await roles.update_role(
            session, realm.actor, authority, custom.id, permissions=["realm.audit.read", "realm.workflows.publish"]
        )
    await _refused_with(realm, reviewer, await _workflow(realm), "authority_from_author")


async def test_a_refused_decision_changes_nothing_but_is_audited_on_its_own(realm: RealmHandle) -> None:
    created = await realm.user("made@example.com")
    await grant_realm_admin_aged(realm, created, by=None, age=timedelta(days=400))
    workflow_id = await _workflow(realm)
    async with realm.sessions() as session:
        before = await session.scalar(text("SELECT count(*) FROM audit_events WHERE realm_id = :r"), {"r": realm.id})
    with pytest.raises(Forbidden):
        await _decide(realm, created, workflow_id)
    async with realm.sessions() as session:
        after = await session.scalar(text("SELECT count(*) FROM audit_events WHERE realm_id = :r"), {"r": realm.id})
    assert after == (before or 0) + 1
    assert await _status(realm, workflow_id) == "draft"


# --- Role assignments that require approval --------------------------------------------------------


async def _approval_role(realm: RealmHandle) -> str:
    return (await realm.role("Payroll", ["realm.users.read"], requires_approval=True)).id


async def test_an_approver_the_requester_created_cannot_be_named(client: Client, realm: RealmHandle) -> None:
    role_id = await _approval_role(realm)
    subject = await _operator_user(realm, "subject@example.com")
    mine = await realm.user("mine@example.com")  # the requester (the realm admin) created them
    await grant_realm_admin_aged(realm, mine, by=None, age=timedelta(days=400))
    answer = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role_id, "user_id": subject.id, "approver_id": mine.id},
        headers=realm.headers,
    )
    assert answer.status_code == 403 and answer.json()["code"] == "reviewer_not_independent", answer.text
    refusals = await _refusals(realm, "role.assignment.approver_refused")
    assert [(r["reason"], r["reviewer_id"]) for r in refusals] == [("created_by_author", mine.id)]


async def test_an_approver_made_admin_by_the_requester_within_the_window_cannot_be_named(
    client: Client, realm: RealmHandle
) -> None:
    role_id = await _approval_role(realm)
    subject = await _operator_user(realm, "subject@example.com")
    inside = await _operator_user(realm, "inside@example.com")
    outside = await _operator_user(realm, "outside@example.com")
    await grant_realm_admin_aged(realm, inside, by=realm.admin.id, age=WINDOW - MINUTE)
    await grant_realm_admin_aged(realm, outside, by=realm.admin.id, age=WINDOW + MINUTE)
    body = {"role_id": role_id, "user_id": subject.id}
    refused = await client.post(
        realm.api + "/role-assignments", json=body | {"approver_id": inside.id}, headers=realm.headers
    )
    assert refused.status_code == 403 and refused.json()["code"] == "reviewer_not_independent"
    asked = await client.post(
        realm.api + "/role-assignments", json=body | {"approver_id": outside.id}, headers=realm.headers
    )
    assert asked.status_code == 202, asked.text


async def test_a_role_assignment_is_decided_only_in_an_mfa_session(client: Client, realm: RealmHandle) -> None:
    role_id = await _approval_role(realm)
    subject = await _operator_user(realm, "subject@example.com")
    approver, session_headers = await independent_admin(realm, "approver@example.com")
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role_id, "user_id": subject.id, "approver_id": approver.id},
        headers=realm.headers,
    )
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    account_token = bearer(await realm.token(approver, "account"))
    by_token = await client.post(f"{realm.api}/approvals/{approval_id}/approve", json={}, headers=account_token)
    assert by_token.status_code == 403 and by_token.json()["code"] == "reviewer_not_independent", by_token.text
    password_only = await browser_session(realm, approver, mfa=False)
    no_mfa = {"Cookie": f"cockpit_session={password_only.cookie}", "X-CSRF-Token": password_only.csrf}
    by_password = await client.post(f"{realm.api}/approvals/{approval_id}/approve", json={}, headers=no_mfa)
    assert by_password.status_code == 403 and by_password.json()["code"] == "reviewer_not_independent"
    assert [r["reason"] for r in await _refusals(realm, "role.assignment.decision_refused")] == [
        "no_mfa_session",
        "no_mfa_session",
    ]
    approved = await client.post(f"{realm.api}/approvals/{approval_id}/approve", json={}, headers=session_headers)
    assert approved.status_code == 200, approved.text
    async with realm.sessions() as session:
        held = await session.scalar(
            select(RoleAssignment.approver_id).where(
                RoleAssignment.user_id == subject.id, RoleAssignment.role_id == role_id
            )
        )
    assert held == approver.id


async def test_the_decider_is_checked_again_when_they_decide(client: Client, realm: RealmHandle) -> None:
    """Named while independent, then made dependent (the requester re-granted their authority): refused."""
    role_id = await _approval_role(realm)
    subject = await _operator_user(realm, "subject@example.com")
    approver, session_headers = await independent_admin(realm, "approver@example.com")
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role_id, "user_id": subject.id, "approver_id": approver.id},
        headers=realm.headers,
    )
    assert asked.status_code == 202, asked.text
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE role_assignments SET granted_by = :a, created_at = now() WHERE user_id = :u"),
            {"a": realm.admin.id, "u": approver.id},
        )
    answer = await client.post(
        f"{realm.api}/approvals/{asked.json()['approval']['id']}/approve", json={}, headers=session_headers
    )
    assert answer.status_code == 403 and answer.json()["code"] == "reviewer_not_independent"
    refusals = await _refusals(realm, "role.assignment.decision_refused")
    assert [(r["reason"], r["role_id"]) for r in refusals] == [("authority_from_author", role_id)]
    async with realm.sessions() as session:
        held = await session.scalar(
            select(RoleAssignment.id).where(RoleAssignment.user_id == subject.id, RoleAssignment.role_id == role_id)
        )
    assert held is None


async def test_the_boundary_exactly_30_days_counts_as_the_authors_a_microsecond_more_does_not(
    realm: RealmHandle,
) -> None:
    reviewer = await _operator_user(realm, "boundary@example.com")
    moment = SYSTEM_CLOCK.now()
    await grant_realm_admin_aged(realm, reviewer, by=realm.admin.id, age=WINDOW)
    async with realm.sessions() as session:
        await session.execute(
            text("UPDATE role_assignments SET created_at = :at WHERE user_id = :u"),
            {"at": moment - WINDOW, "u": reviewer.id},
        )

        def publishes(held: Any) -> bool:
            return bool(held.holds("realm.workflows.publish"))

        exactly = await independence.dependence_on(
            session, realm.id, realm.admin.id, reviewer.id, publishes, now=moment
        )
        a_microsecond_later = await independence.dependence_on(
            session, realm.id, realm.admin.id, reviewer.id, publishes, now=moment + timedelta(microseconds=1)
        )
    assert exactly == "authority_from_author"
    assert a_microsecond_later is None
