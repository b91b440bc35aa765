"""The guard keeps a caller's authority between requests; nothing it keeps outlives a change.

Every request reads its credential afresh (with the realm's and the user's authorization epochs);
the authority is kept by the web process while those epochs stand (engine/directory/credentials.py).
Each test makes a change through the product, then shows that the very next request sees it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.state import context_of
from engine.directory import credentials, tokens
from engine.directory.models import Group, GroupMember, GroupRole, ServicePrincipal
from engine.directory.sessions import revoke_session
from engine.directory.tokens import mint_token
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.db import driver_connection
from engine.platform.ids import new_id
from testing.factories import HTML, RealmHandle, bearer, browser_session

Client = AsyncTestClient[Litestar]
DEFINITION = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


async def validate(client: Client, realm: RealmHandle, token: str) -> int:
    """``POST /workflows/validate`` (needs realm.workflows.write) as the token's holder: its status."""
    response = await client.post(
        f"{realm.api}/workflows/validate", json={"definition": DEFINITION}, headers=bearer(token)
    )
    if response.status_code == 200:
        assert response.json() == {"valid": True, "errors": []}
    return response.status_code


async def editor(realm: RealmHandle, client: Client) -> tuple[Any, str, str]:
    """A user holding a role with realm.workflows.write (granted through the API), their admin token
    and the assignment's id."""
    role = await realm.role("editor", ["realm.workflows.write"])
    user = await realm.user()
    token = await realm.token(user)
    granted = await client.post(
        f"{realm.api}/role-assignments", json={"role_id": role.id, "user_id": user.id}, headers=realm.headers
    )
    assert granted.status_code == 201, granted.text
    return user, token, granted.json()["id"]


async def test_a_kept_authority_answers_without_reading_it_again(
    client: Client, app: Litestar, realm: RealmHandle
) -> None:
    _, token, _ = await editor(realm, client)
    assert await validate(client, realm, token) == 200
    cache = context_of(app).authorities
    before = cache.reads
    for _ in range(3):
        assert await validate(client, realm, token) == 200
    assert cache.reads == before


async def test_a_revoked_role_is_refused_on_the_next_request(client: Client, app: Litestar, realm: RealmHandle) -> None:
    _, token, assignment_id = await editor(realm, client)
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200  # kept now

    revoked = await client.delete(f"{realm.api}/role-assignments/{assignment_id}", headers=realm.headers)
    assert revoked.status_code == 204, revoked.text
    assert await validate(client, realm, token) == 403


async def test_a_granted_role_is_honoured_on_the_next_request(client: Client, realm: RealmHandle) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    user = await realm.user()
    token = await realm.token(user)
    assert await validate(client, realm, token) == 403
    assert await validate(client, realm, token) == 403  # the empty authority is kept too

    granted = await client.post(
        f"{realm.api}/role-assignments", json={"role_id": role.id, "user_id": user.id}, headers=realm.headers
    )
    assert granted.status_code == 201, granted.text
    assert await validate(client, realm, token) == 200


async def test_a_role_s_permissions_changed_take_effect_on_the_next_request(client: Client, realm: RealmHandle) -> None:
    role = await realm.role("editor", ["realm.workflows.write", "realm.workflows.read"])
    user = await realm.user()
    await realm.assign(user, role)
    token = await realm.token(user)
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200

    changed = await client.patch(
        f"{realm.api}/roles/{role.id}", json={"permissions": ["realm.workflows.read"]}, headers=realm.headers
    )
    assert changed.status_code == 200, changed.text
    assert await validate(client, realm, token) == 403


async def test_leaving_a_group_that_grants_the_role_takes_effect_on_the_next_request(
    client: Client, realm: RealmHandle
) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    org = await realm.organization("Engineering")
    user = await realm.user()
    await realm.member(org, user)
    token = await realm.token(user)
    groups = f"{realm.api}/organizations/{org.id}/groups"
    group = await client.post(groups, json={"name": "Authors", "role_ids": [role.id]}, headers=realm.headers)
    assert group.status_code in (200, 201), group.text
    group_id = group.json()["id"]
    assert await validate(client, realm, token) == 403

    joined = await client.post(f"{groups}/{group_id}/members", json={"user_id": user.id}, headers=realm.headers)
    assert joined.status_code in (200, 201), joined.text
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200

    left = await client.delete(f"{groups}/{group_id}/members/{user.id}", headers=realm.headers)
    assert left.status_code in (200, 204), left.text
    assert await validate(client, realm, token) == 403


async def test_a_revoked_token_is_refused_on_the_next_request(client: Client, realm: RealmHandle) -> None:
    _, token, _ = await editor(realm, client)
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200

    token_id = await token_id_of(realm, token)
    async with realm.sessions() as session, session.begin():
        await tokens.revoke(session, realm.actor, token_id, may_revoke_any=True, authority=None)
    assert await validate(client, realm, token) == 401


async def test_an_expired_token_is_refused_without_any_change_in_the_database(
    client: Client, realm: RealmHandle
) -> None:
    user, _, _ = await editor(realm, client)
    token = await realm.token(user, expires_in=timedelta(hours=1))
    assert await validate(client, realm, token) == 200
    # The clock is what moves: the credential's expiry is compared at every request.
    caller_now = SYSTEM_CLOCK.now()
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        assert await credentials.check_token(conn, token, moment=caller_now) is not None
        assert await credentials.check_token(conn, token, moment=caller_now + timedelta(hours=2)) is None


async def test_a_suspended_user_is_refused_on_the_next_request_by_token_and_by_session(
    client: Client, realm: RealmHandle
) -> None:
    user, token, _ = await editor(realm, client)
    reader = await realm.role("reader", ["realm.workflows.read"])
    await realm.assign(user, reader)
    login = await browser_session(realm, user)
    page = f"/realms/{realm.slug}/runs"
    client.cookies.set("cockpit_session", login.cookie)
    assert (await client.get(page, headers=HTML)).status_code == 200
    assert await validate(client, realm, token) == 200
    client.cookies.clear()

    suspended = await client.post(f"{realm.api}/users/{user.id}/suspend", headers=realm.headers)
    assert suspended.status_code == 200, suspended.text
    assert await validate(client, realm, token) == 401
    client.cookies.set("cockpit_session", login.cookie)
    assert (await client.get(page, headers=HTML, follow_redirects=False)).status_code in (303, 401)
    client.cookies.clear()

    reactivated = await client.post(f"{realm.api}/users/{user.id}/reactivate", headers=realm.headers)
    assert reactivated.status_code == 200, reactivated.text
    # Reactivation revives no credential made before the suspension.
    assert await validate(client, realm, token) == 401
    client.cookies.set("cockpit_session", login.cookie)
    assert (await client.get(page, headers=HTML, follow_redirects=False)).status_code in (303, 401)


async def test_an_ended_browser_session_is_refused_on_the_next_request(client: Client, realm: RealmHandle) -> None:
    user = await realm.user()
    reader = await realm.role("reader", ["realm.workflows.read"])
    await realm.assign(user, reader)
    login = await browser_session(realm, user)
    api = f"{realm.api}/workflows"
    client.cookies.set("cockpit_session", login.cookie)
    assert (await client.get(api)).status_code == 200
    assert (await client.get(api)).status_code == 200

    async with realm.sessions() as session, session.begin():
        await revoke_session(session, login.session_id)
    assert (await client.get(api)).status_code == 401


async def test_a_service_principal_s_revoked_role_is_refused_on_the_next_request(
    client: Client, realm: RealmHandle
) -> None:
    role = await realm.role("automation", ["realm.workflows.write"])
    async with realm.sessions() as session, session.begin():
        principal = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="deployer")
        session.add(principal)
        await session.flush()
        token, _ = await mint_token(session, realm.actor, audience="admin", service_principal=principal)
    granted = await client.post(
        f"{realm.api}/role-assignments",
        json={"role_id": role.id, "service_principal_id": principal.id},
        headers=realm.headers,
    )
    assert granted.status_code == 201, granted.text
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200

    revoked = await client.delete(f"{realm.api}/role-assignments/{granted.json()['id']}", headers=realm.headers)
    assert revoked.status_code == 204, revoked.text
    assert await validate(client, realm, token) == 403


async def test_a_kept_authority_ends_with_its_earliest_expiring_grant(realm: RealmHandle) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    user = await realm.user()
    await realm.assign(user, role, expires_in=timedelta(hours=1))
    token = await realm.token(user)
    cache = credentials.AuthorityCache()
    moment = SYSTEM_CLOCK.now()
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        caller = await credentials.check_token(conn, token, moment=moment)
        assert caller is not None
        assert (await cache.authority(conn, caller, moment=moment)).holds("realm.workflows.write")
        assert (await cache.authority(conn, caller, moment=moment + timedelta(minutes=59))).holds(
            "realm.workflows.write"
        )
        assert cache.reads == 1
        # No epoch moved, but the grant has expired by then: the authority is read again, without it.
        later = await cache.authority(conn, caller, moment=moment + timedelta(hours=2))
        assert cache.reads == 2
        assert not later.holds("realm.workflows.write")


async def test_a_handler_cannot_change_what_the_next_request_is_given(realm: RealmHandle) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    user = await realm.user()
    await realm.assign(user, role)
    token = await realm.token(user)
    cache = credentials.AuthorityCache()
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        caller = await credentials.check_token(conn, token)
        assert caller is not None
        first = await cache.authority(conn, caller)
        first.grants.clear()
        second = await cache.authority(conn, caller)
    assert cache.reads == 1
    assert second.holds("realm.workflows.write")


async def test_authority_is_kept_per_principal_and_realm(
    client: Client, app: Litestar, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """The admin of one realm and an editor of the same realm never share a kept authority; neither
    does a token of another realm reach this one."""
    _, token, _ = await editor(realm, client)
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, realm.admin_token) == 200
    roles = await client.get(f"{realm.api}/roles", headers=bearer(token))
    assert roles.status_code == 403  # the editor holds no realm.roles.read; the admin's authority is not theirs
    assert (await client.get(f"{realm.api}/roles", headers=realm.headers)).status_code == 200
    assert await validate(client, realm, other_realm.admin_token) == 404


async def token_id_of(realm: RealmHandle, token: str) -> str:
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        caller = await credentials.check_token(conn, token)
    assert caller is not None
    return caller.credential_id


# Every table the authority is read from, changed behind the product's back (raw SQL, as a
# migration, an operator or a run's fast path would): the triggers move an epoch, so the next
# request reads the authority again. The holder has the permission directly, or through a group
# whose parent grants it.
DIRECT_CHANGES = {
    "assignment deleted": "DELETE FROM role_assignments WHERE id = :assignment",
    "assignment expired": "UPDATE role_assignments SET expires_at = now() - interval '1 minute' WHERE id = :assignment",
    "assignment moved to another user": "UPDATE role_assignments SET user_id = :other WHERE id = :assignment",
    "role's permissions narrowed": "UPDATE roles SET permissions = ARRAY['realm.audit.read'] WHERE id = :role",
    "role deleted": "DELETE FROM roles WHERE id = :role",
}
GROUP_CHANGES = {
    "child group re-parented": "UPDATE groups SET parent_id = NULL WHERE id = :child",
    "parent group's role taken away": "DELETE FROM group_roles WHERE group_id = :parent",
    "group role re-pointed": "UPDATE group_roles SET role_id = :idle WHERE group_id = :parent",
    "membership of the child group ended": "DELETE FROM group_members WHERE group_id = :child",
    "membership moved to another user": "UPDATE group_members SET user_id = :other WHERE group_id = :child",
    "role deleted": "DELETE FROM roles WHERE id = :role",
}


async def _change(realm: RealmHandle, statement: str, values: dict[str, str]) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text(statement), values)


@pytest.mark.parametrize("change", sorted(DIRECT_CHANGES))
async def test_any_change_to_a_direct_grant_reaches_the_next_request(
    client: Client, realm: RealmHandle, change: str
) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    user, other = await realm.user(), await realm.user()
    assignment = await realm.assign(user, role)
    token = await realm.token(user)
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200  # kept now

    await _change(realm, DIRECT_CHANGES[change], {"assignment": assignment.id, "role": role.id, "other": other.id})
    assert await validate(client, realm, token) == 403


@pytest.mark.parametrize("change", sorted(GROUP_CHANGES))
async def test_any_change_to_an_inherited_grant_reaches_the_next_request(
    client: Client, realm: RealmHandle, change: str
) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    idle = await realm.role("idle", ["realm.audit.read"])
    org = await realm.organization("Engineering")
    user, other = await realm.user(), await realm.user()
    await realm.member(org, user)
    token = await realm.token(user)
    async with realm.sessions() as session, session.begin():
        parent = Group(id=new_id("grp"), realm_id=realm.id, organization_id=org.id, name="Writers")
        session.add(parent)
        await session.flush()
        child = Group(id=new_id("grp"), realm_id=realm.id, organization_id=org.id, name="Docs", parent_id=parent.id)
        session.add(child)
        await session.flush()
        session.add(GroupRole(group_id=parent.id, role_id=role.id))
        session.add(GroupMember(group_id=child.id, user_id=user.id, realm_id=realm.id))
    assert await validate(client, realm, token) == 200
    assert await validate(client, realm, token) == 200  # kept now

    values = {"parent": parent.id, "child": child.id, "role": role.id, "idle": idle.id, "other": other.id}
    await _change(realm, GROUP_CHANGES[change], values)
    assert await validate(client, realm, token) == 403
