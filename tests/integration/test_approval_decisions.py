"""Decisions and delegations under one transaction rule, whoever calls them (API or page).

A decision is recorded only together with what it causes: when the role assignment an approval
asked for is refused by its checks made again at decision time, nothing of the decision stays —
not on the API, not on the page. A decision is handed on only to someone who could make it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.models import Role, User
from engine.platform.clock import FixedClock
from testing.approvals import approval_of
from testing.factories import HTML, RealmHandle, bearer, browser_session
from testing.runs import drain, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def mfa_session(realm: RealmHandle, user: User) -> dict[str, str]:
    """Headers of a browser session with a second factor: deciding a role assignment wants one."""
    login = await browser_session(realm, user)
    return {"Cookie": f"cockpit_session={login.cookie}", "X-CSRF-Token": login.csrf}


async def requested_grant(realm: RealmHandle, client: Client) -> tuple[dict[str, Any], User, User, User, Role]:
    """A role that requires approval, asked for by a second administrator: (approval, requester, approver, subject, role)."""
    role = await realm.role("payments", ["realm.users.read"], requires_approval=True)
    requester = await realm.user("requester@example.com")
    await realm.assign(requester, await realm.builtin_role("realm-admin"))
    approver = await realm.user("approver@example.com")
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    subject = await realm.user("subject@example.com")
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role.id, "user_id": subject.id, "approver_id": approver.id},
        headers=bearer(await realm.token(requester)),
    )
    assert asked.status_code == 202, asked.text
    return asked.json()["approval"], requester, approver, subject, role


async def decision_trace(realm: RealmHandle, approval_id: str, role: Role) -> tuple[Any, ...]:
    """What a decision leaves: the approval's status and decider, its audit events, the grants."""
    [(status, decided_by)] = await rows(
        realm, "SELECT status, decided_by FROM workflow_approvals WHERE id = :a", a=approval_id
    )
    events = [
        t
        for (t,) in await rows(
            realm, "SELECT type FROM audit_events WHERE correlation_id = :a ORDER BY id", a=approval_id
        )
    ]
    grants = await rows(realm, "SELECT id FROM role_assignments WHERE role_id = :r", r=role.id)
    return status, decided_by, events, grants


async def test_a_grant_refused_at_decision_time_leaves_no_decision_on_the_page_or_the_api(
    realm: RealmHandle, client: Client
) -> None:
    approval, requester, approver, _subject, role = await requested_grant(realm, client)
    # The requester loses the authority to assign the role before the approver decides.
    async with realm.sessions() as session, session.begin():
        from sqlalchemy import text

        await session.execute(text("DELETE FROM role_assignments WHERE user_id = :u"), {"u": requester.id})
    untouched = ("pending", None, [], [])

    login = await browser_session(realm, approver, mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    on_page = await client.post(
        f"/realms/{realm.slug}/approvals/{approval['id']}/decide",
        data={"decision": "approve", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert on_page.status_code == 403, on_page.text
    assert "payments" in on_page.text  # the refusal, shown on the approval's page
    assert await decision_trace(realm, approval["id"], role) == untouched
    client.cookies.clear()

    on_api = await client.post(
        f"{realm.api}/approvals/{approval['id']}/approve", headers=await mfa_session(realm, approver)
    )
    # The requester no longer holds even the permission to assign roles: the grant is refused.
    assert on_api.status_code == 403 and on_api.json()["code"] == "forbidden", on_api.text
    assert "realm.roles.write" in on_api.json()["detail"]
    assert await decision_trace(realm, approval["id"], role) == untouched

    # With the authority back, the same approval is approved and the role granted, once.
    await realm.assign(requester, await realm.builtin_role("realm-admin"))
    approved = await client.post(
        f"{realm.api}/approvals/{approval['id']}/approve", headers=await mfa_session(realm, approver)
    )
    assert approved.status_code == 200, approved.text
    status, decided_by, events, grants = await decision_trace(realm, approval["id"], role)
    assert (status, decided_by, events, len(grants)) == (
        "approved",
        approver.id,
        ["role.assignment.approved", "role.assigned"],
        1,
    )


async def test_an_organization_role_is_approved_by_someone_who_assigns_it_only_in_that_organization(
    realm: RealmHandle, client: Client
) -> None:
    """The decider's independence is weighed on the authority the grant needs: in its organization."""
    org = await realm.organization("Acme")
    role = await realm.role("billing", ["realm.users.read"], boundary="organization", requires_approval=True)
    requester = await realm.user("requester@example.com")
    await realm.assign(requester, await realm.builtin_role("realm-admin"))
    approver = await realm.user("approver@example.com")
    assigner = await realm.role("acme-assigner", ["realm.users.read", "realm.roles.write"], boundary="organization")
    await realm.assign(approver, assigner, organization_id=org.id)
    subject = await realm.user("subject@example.com")
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role.id, "user_id": subject.id, "organization_id": org.id, "approver_id": approver.id},
        headers=bearer(await realm.token(requester)),
    )
    assert asked.status_code == 202, asked.text
    decided = await client.post(
        f"{realm.api}/approvals/{asked.json()['approval']['id']}/approve", headers=await mfa_session(realm, approver)
    )
    assert decided.status_code == 200, decided.text
    made = await rows(realm, "SELECT organization_id, approver_id FROM role_assignments WHERE role_id = :r", r=role.id)
    assert made == [(org.id, approver.id)]


async def test_a_role_assignment_is_handed_on_only_to_someone_who_could_approve_it(
    realm: RealmHandle, client: Client
) -> None:
    approval, requester, approver, subject, role = await requested_grant(realm, client)
    weak = await realm.user("weak@example.com")  # active, but cannot assign the role
    guest = await realm.user("guest@example.com", guest=True)
    await realm.assign(guest, await realm.builtin_role("realm-admin"))
    deputy = await realm.user("deputy@example.com")
    await realm.assign(deputy, await realm.role("payments-assigner", ["realm.users.read", "realm.roles.write"]))
    token = bearer(await realm.token(approver, audience="account"))
    url = f"{realm.api}/approvals/{approval['id']}/delegate"

    for who, why in (
        (requester, "whoever asked for the assignment (its granter) never approves it"),
        (subject, "the subject never decides about it"),
        (approver, "choose someone other than yourself"),
        (weak, "must be able to assign the role payments themselves"),
        (guest, "must be an active user of this realm who is not a guest"),
    ):
        refused = await client.post(url, json={"user_id": who.id}, headers=token)
        assert refused.status_code == 422, (who.email, refused.text)
        assert refused.json()["errors"] == [{"path": "/user_id", "code": "invalid", "message": why}], who.email
    [(approvers, delegations)] = await rows(
        realm, "SELECT approvers, delegations FROM workflow_approvals WHERE id = :a", a=approval["id"]
    )
    assert (approvers, delegations) == ([approver.id], [])

    # The page refuses the same way (the field is the email there) and records nothing.
    login = await browser_session(realm, approver, mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    on_page = await client.post(
        f"/realms/{realm.slug}/approvals/{approval['id']}/delegate",
        data={"email": weak.email, "_csrf": login.csrf},
        headers=HTML,
    )
    assert on_page.status_code == 422 and "must be able to assign the role payments themselves" in on_page.text
    client.cookies.clear()

    handed = await client.post(url, json={"user_id": deputy.id}, headers=token)
    assert handed.status_code == 200 and handed.json()["approvers"] == [deputy.id]
    decided = await client.post(
        f"{realm.api}/approvals/{approval['id']}/approve", headers=await mfa_session(realm, deputy)
    )
    assert decided.status_code == 200, decided.text
    made = await rows(realm, "SELECT approver_id, granted_by FROM role_assignments WHERE role_id = :r", r=role.id)
    assert made == [(deputy.id, requester.id)]


async def test_a_role_assignment_whose_role_is_gone_is_handed_on_to_nobody(realm: RealmHandle, client: Client) -> None:
    approval, _requester, approver, _subject, role = await requested_grant(realm, client)
    deputy = await realm.user("deputy@example.com")
    await realm.assign(deputy, await realm.builtin_role("realm-admin"))
    async with realm.sessions() as session, session.begin():
        from sqlalchemy import text

        await session.execute(text("DELETE FROM roles WHERE id = :r"), {"r": role.id})
    refused = await client.post(
        f"{realm.api}/approvals/{approval['id']}/delegate",
        json={"user_id": deputy.id},
        headers=bearer(await realm.token(approver, audience="account")),
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"] == [
        {"path": "/user_id", "code": "invalid", "message": "the requested role no longer exists"}
    ]
    [(approvers,)] = await rows(realm, "SELECT approvers FROM workflow_approvals WHERE id = :a", a=approval["id"])
    assert approvers == [approver.id]


async def test_a_run_approval_is_never_handed_to_its_starter_or_publisher(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user()
    approver = await realm.user()
    deputy = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    await start(realm, wid, subject.id)  # started and published by the realm's administrator
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5))))
    token = await realm.token(approver, audience="account")
    approval = await approval_of(client, realm, token)
    url = f"{realm.api}/approvals/{approval['id']}/delegate"
    refused = await client.post(url, json={"user_id": realm.admin.id}, headers=bearer(token))
    assert refused.status_code == 422
    assert (
        refused.json()["errors"][0]["message"]
        == "the run's starter and its accountable publisher never decide about it"
    )
    handed = await client.post(url, json={"user_id": deputy.id}, headers=bearer(token))
    assert handed.status_code == 200 and handed.json()["approvers"] == [deputy.id]
