"""A realm always keeps an active administrator, whichever path would take the last one away.

Every refusal is 409 ``last_admin`` and changes nothing; the same change is allowed as soon as
someone else holds ``realm-admin`` (the limit on its other side).
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.admins import active_admin_count
from engine.directory.authz import load_authority
from engine.directory.models import Group, GroupMember, GroupRole, User
from engine.directory.role_assignments import revoke_assignment
from engine.platform.errors import Conflict
from engine.platform.ids import new_id
from testing.factories import HTML, RealmHandle, bearer, browser_session

Client = AsyncTestClient[Litestar]


async def admins(realm: RealmHandle) -> int:
    async with realm.sessions() as session:
        return await active_admin_count(session, realm.id)


async def admin_assignment(realm: RealmHandle, user: User) -> str:
    async with realm.sessions() as session:
        found = await session.scalar(
            text(
                "SELECT ra.id FROM role_assignments ra JOIN roles r ON r.id = ra.role_id"
                " WHERE ra.user_id = :u AND r.name = 'realm-admin' AND r.builtin"
            ),
            {"u": user.id},
        )
        assert found is not None
        return str(found)


def refused_as_last_admin(response: Any) -> None:
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "last_admin"


async def test_the_last_administrator_cannot_revoke_their_own_realm_admin(realm: RealmHandle, client: Client) -> None:
    mine = await admin_assignment(realm, realm.admin)
    refused = await client.delete(f"{realm.api}/role-assignments/{mine}", headers=realm.headers)
    refused_as_last_admin(refused)
    assert await admins(realm) == 1
    types = await client.get(realm.api + "/audit-events", params={"type": "role.revoked"}, headers=realm.headers)
    assert types.json()["items"] == []
    # With a second administrator, the same revocation is allowed.
    second = await realm.user("second@example.com")
    await realm.assign(second, await realm.builtin_role("realm-admin"))
    assert (await client.delete(f"{realm.api}/role-assignments/{mine}", headers=realm.headers)).status_code == 204
    assert await admins(realm) == 1
    theirs = await admin_assignment(realm, second)
    refused_as_last_admin(
        await client.delete(f"{realm.api}/role-assignments/{theirs}", headers=bearer(await realm.token(second)))
    )


async def test_the_last_administrator_cannot_be_suspended(realm: RealmHandle, client: Client) -> None:
    # Someone who outranks them without holding realm-admin itself: every permission, in a custom role.
    operator = await realm.user("operator@example.com")
    await realm.assign(operator, await realm.role("operators", ["realm.*", "org.*"]))
    token = bearer(await realm.token(operator))
    refused_as_last_admin(await client.post(f"{realm.api}/users/{realm.admin.id}/suspend", headers=token))
    assert await admins(realm) == 1
    second = await realm.user("second@example.com")
    await realm.assign(second, await realm.builtin_role("realm-admin"))
    assert (await client.post(f"{realm.api}/users/{realm.admin.id}/suspend", headers=token)).status_code == 200
    refused_as_last_admin(await client.post(f"{realm.api}/users/{second.id}/suspend", headers=token))


async def admin_through_a_group(realm: RealmHandle) -> tuple[Any, Group, Group]:
    """The realm's only administrator holds realm-admin through a group's parent, not directly."""
    org = await realm.organization("Acme")
    await realm.member(org, realm.admin)
    admin_role = await realm.builtin_role("realm-admin")
    async with realm.sessions() as session, session.begin():
        parent = Group(id=new_id("grp"), realm_id=realm.id, organization_id=org.id, name="Admins")
        child = Group(id=new_id("grp"), realm_id=realm.id, organization_id=org.id, name="Operators")
        session.add_all([parent, child])
        await session.flush()
        child.parent_id = parent.id
        session.add(GroupRole(group_id=parent.id, role_id=admin_role.id))
        session.add(GroupMember(group_id=child.id, user_id=realm.admin.id, realm_id=realm.id))
        await session.execute(
            text("DELETE FROM role_assignments WHERE user_id = :u AND role_id = :r"),
            {"u": realm.admin.id, "r": admin_role.id},
        )
    assert await admins(realm) == 1
    return org, parent, child


async def test_group_changes_never_take_realm_admin_from_the_last_administrator(
    realm: RealmHandle, client: Client
) -> None:
    org, parent, child = await admin_through_a_group(realm)
    groups = f"{realm.api}/organizations/{org.id}/groups"
    refused_as_last_admin(await client.delete(f"{groups}/{child.id}/members/{realm.admin.id}", headers=realm.headers))
    refused_as_last_admin(await client.patch(f"{groups}/{child.id}", json={"parent_id": None}, headers=realm.headers))
    refused_as_last_admin(await client.patch(f"{groups}/{parent.id}", json={"role_ids": []}, headers=realm.headers))
    refused_as_last_admin(
        await client.delete(f"{realm.api}/organizations/{org.id}/members/{realm.admin.id}", headers=realm.headers)
    )
    assert await admins(realm) == 1
    # Renaming changes nothing of what anyone holds: allowed.
    renamed = await client.patch(f"{groups}/{parent.id}", json={"name": "Administrators"}, headers=realm.headers)
    assert renamed.status_code == 200, renamed.text


async def test_the_pages_refuse_the_same_way_and_keep_nothing(realm: RealmHandle, client: Client) -> None:
    org, _parent, child = await admin_through_a_group(realm)
    operator = await realm.user("operator@example.com")
    await realm.assign(operator, await realm.role("operators", ["realm.*", "org.*"]))
    login = await browser_session(realm, operator)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    suspend = await client.post(
        f"/realms/{realm.slug}/users/{realm.admin.id}/suspend", data={"_csrf": login.csrf}, headers=HTML
    )
    assert suspend.status_code == 409 and "without an active administrator" in suspend.text
    remove = await client.post(
        f"/realms/{realm.slug}/organizations/{org.id}/groups/{child.id}/members/{realm.admin.id}/remove",
        data={"_csrf": login.csrf},
        headers=HTML,
    )
    assert remove.status_code == 409 and "without an active administrator" in remove.text
    leave = await client.post(
        f"/realms/{realm.slug}/organizations/{org.id}/members/{realm.admin.id}/remove",
        data={"_csrf": login.csrf},
        headers=HTML,
    )
    assert leave.status_code == 409 and "without an active administrator" in leave.text
    assert await admins(realm) == 1
    async with realm.sessions() as session:
        status = await session.scalar(text("SELECT status FROM users WHERE id = :u"), {"u": realm.admin.id})
    assert status == "active"


async def test_revoking_ones_own_realm_admin_on_the_role_page_is_refused(realm: RealmHandle, client: Client) -> None:
    admin_role = await realm.builtin_role("realm-admin")
    mine = await admin_assignment(realm, realm.admin)
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    refused = await client.post(
        f"/realms/{realm.slug}/roles/{admin_role.id}/assignments/{mine}/revoke",
        data={"_csrf": login.csrf},
        headers=HTML,
    )
    assert refused.status_code == 409 and "without an active administrator" in refused.text
    assert await admins(realm) == 1


async def test_two_administrators_revoking_each_other_at_once_leave_one(realm: RealmHandle) -> None:
    second = await realm.user("second@example.com")
    await realm.assign(second, await realm.builtin_role("realm-admin"))
    first_grant, second_grant = await admin_assignment(realm, realm.admin), await admin_assignment(realm, second)
    async with realm.sessions() as session:
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
    async with realm.sessions() as one, realm.sessions() as two:
        await one.begin()
        await revoke_assignment(one, realm.actor, authority, second_grant)  # uncommitted

        async def other() -> Any:
            async with two.begin():
                return await revoke_assignment(two, realm.actor, authority, first_grant)

        task = asyncio.create_task(other())
        await asyncio.sleep(0.5)
        await one.commit()
        try:
            await task
            outcome: Any = None
        except Conflict as exc:
            outcome = exc
    assert isinstance(outcome, Conflict) and outcome.code == "last_admin"
    assert await admins(realm) == 1


async def test_an_admin_role_that_is_not_the_builtin_one_does_not_count(realm: RealmHandle, client: Client) -> None:
    """Only the built-in realm-admin keeps a realm administered (a custom role may lose permissions)."""
    operator = await realm.user("operator@example.com")
    await realm.assign(operator, await realm.role("operators", ["realm.*", "org.*"]))
    mine = await admin_assignment(realm, realm.admin)
    refused_as_last_admin(
        await client.delete(f"{realm.api}/role-assignments/{mine}", headers=bearer(await realm.token(operator)))
    )
