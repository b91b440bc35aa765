from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.authz import PERMISSIONS
from testing.factories import RealmHandle, bearer, independent_admin


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


def future(days: int = 1) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat()


async def test_permissions_catalog(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    response = await client.get(realm.api + "/permissions", headers=realm.headers)
    assert response.status_code == 200
    items = {p["name"]: p for p in response.json()["items"]}
    assert set(items) == set(PERMISSIONS)
    assert items["realm.workflows.publish"]["level"] == "privileged"
    assert items["realm.workflows.read"]["level"] == "normal"
    assert items["org.members.write"]["description"]


async def test_create_role_and_read_it_back(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    body = {
        "name": "helpdesk",
        "permissions": ["realm.users.read", "realm.users.suspend", "org.*"],
        "boundary": "organization",
        "requires_approval": True,
        "description": "First line",
    }
    created = await client.post(realm.api + "/roles", json=body, headers=realm.headers)
    assert created.status_code == 201, created.text
    role = created.json()
    assert role["id"].startswith("rol_") and role["builtin"] is False
    assert {k: role[k] for k in body} == body
    assert (await client.get(f"{realm.api}/roles/{role['id']}", headers=realm.headers)).json() == role
    names = [r["name"] for r in (await client.get(realm.api + "/roles", headers=realm.headers)).json()["items"]]
    assert names == ["realm-admin", "realm-auditor", "helpdesk"]
    duplicate = await client.post(realm.api + "/roles", json=body, headers=realm.headers)
    assert duplicate.status_code == 409
    audit = await fetch(realm, "SELECT type, category, actor_id FROM audit_events WHERE subject_id = :r", r=role["id"])
    assert audit == [("role.created", "authorization", realm.admin.id)]


async def test_bad_role_lists_every_error(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    response = await client.post(
        realm.api + "/roles",
        json={"name": "", "permissions": ["realm.users.read", "realm.nothing", "realm.*", "x.*"], "boundary": "world"},
        headers=realm.headers,
    )
    assert response.status_code == 422
    assert {e["path"] for e in response.json()["errors"]} == {"/name", "/permissions/1", "/permissions/3", "/boundary"}
    empty = await client.post(
        realm.api + "/roles", json={"name": "none", "permissions": [], "boundary": "realm"}, headers=realm.headers
    )
    assert empty.status_code == 422 and empty.json()["errors"][0]["path"] == "/permissions"
    assert len(await fetch(realm, "SELECT id FROM roles WHERE realm_id = :r", r=realm.id)) == 2


async def test_nobody_creates_a_role_more_powerful_than_themselves(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    delegate = await realm.user("delegate@example.com")
    await realm.assign(delegate, await realm.role("role-writer", ["realm.roles.*", "realm.users.read"]))
    token = bearer(await realm.token(delegate))
    stronger = await client.post(
        realm.api + "/roles",
        json={"name": "more", "permissions": ["realm.users.read", "realm.users.write"], "boundary": "realm"},
        headers=token,
    )
    assert stronger.status_code == 403 and stronger.json()["code"] == "grant_ceiling_exceeded"
    assert "realm.users.write" in stronger.json()["detail"]
    assert stronger.json()["missing_permissions"] == [{"permission": "realm.users.write", "organization_id": None}]
    wildcard = await client.post(
        realm.api + "/roles", json={"name": "all", "permissions": ["realm.*"], "boundary": "realm"}, headers=token
    )
    assert wildcard.status_code == 403 and wildcard.json()["code"] == "grant_ceiling_exceeded"
    within = await client.post(
        realm.api + "/roles",
        json={"name": "reader", "permissions": ["realm.users.read"], "boundary": "realm"},
        headers=token,
    )
    assert within.status_code == 201


async def test_builtin_roles_cannot_change_and_custom_roles_can(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    admin_role = await realm.builtin_role("realm-admin")
    patched = await client.patch(f"{realm.api}/roles/{admin_role.id}", json={"description": "x"}, headers=realm.headers)
    assert patched.status_code == 409 and patched.json()["code"] == "builtin_role"
    deleted = await client.delete(f"{realm.api}/roles/{admin_role.id}", headers=realm.headers)
    assert deleted.status_code == 409 and deleted.json()["code"] == "builtin_role"

    custom = await realm.role("custom", ["realm.users.read"])
    changed = await client.patch(
        f"{realm.api}/roles/{custom.id}",
        json={"permissions": ["realm.users.read", "realm.audit.read"], "requires_approval": True},
        headers=realm.headers,
    )
    assert changed.status_code == 200
    assert changed.json()["permissions"] == ["realm.users.read", "realm.audit.read"]
    assert changed.json()["requires_approval"] is True
    bad = await client.patch(f"{realm.api}/roles/{custom.id}", json={"permissions": ["nope"]}, headers=realm.headers)
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "/permissions/0"

    holder = await realm.user()
    await realm.assign(holder, custom)
    in_use = await client.delete(f"{realm.api}/roles/{custom.id}", headers=realm.headers)
    assert in_use.status_code == 409 and in_use.json()["code"] == "role_in_use"
    unused = await realm.role("unused", ["realm.audit.read"])
    assert (await client.delete(f"{realm.api}/roles/{unused.id}", headers=realm.headers)).status_code == 204
    assert (await client.get(f"{realm.api}/roles/{unused.id}", headers=realm.headers)).status_code == 404


async def test_a_custom_roles_name_and_description_change_and_are_read_back(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    custom = await realm.role("custom", ["realm.users.read"])
    changed = await client.patch(
        f"{realm.api}/roles/{custom.id}",
        json={"name": "  Help desk  ", "description": "Second line"},
        headers=realm.headers,
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["name"], changed.json()["description"]) == ("Help desk", "Second line")
    assert changed.json()["permissions"] == ["realm.users.read"]
    assert (await client.get(f"{realm.api}/roles/{custom.id}", headers=realm.headers)).json() == changed.json()
    audit = await fetch(
        realm,
        "SELECT details->'changed' FROM audit_events WHERE subject_id = :r AND type = 'role.updated'",
        r=custom.id,
    )
    assert audit == [(["name", "description"],)]


async def test_assign_and_revoke_a_role(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    user = await realm.user("reader@example.com")
    role = await realm.role("user-reader", ["realm.users.read"])
    token = bearer(await realm.token(user))
    assert (await client.get(realm.api + "/users", headers=token)).status_code == 403

    expires = future(30)
    created = await client.post(
        realm.api + "/role-assignments",
        json={"user_id": user.id, "role_id": role.id, "expires_at": expires},
        headers=realm.headers,
    )
    assert created.status_code == 201, created.text
    assignment = created.json()
    assert assignment["id"].startswith("ras_")
    assert assignment["user_id"] == user.id and assignment["service_principal_id"] is None
    assert assignment["role_id"] == role.id and assignment["organization_id"] is None
    assert assignment["granted_by"] == realm.admin.id and assignment["approver_id"] is None
    assert assignment["source_run_id"] is None and assignment["expires_at"] and assignment["created_at"]
    assert (await client.get(realm.api + "/users", headers=token)).status_code == 200

    again = await client.post(
        realm.api + "/role-assignments", json={"user_id": user.id, "role_id": role.id}, headers=realm.headers
    )
    assert again.status_code == 409

    listed = (
        await client.get(realm.api + "/role-assignments", params={"user_id": user.id}, headers=realm.headers)
    ).json()
    assert [a["id"] for a in listed["items"]] == [assignment["id"]]
    by_role = (
        await client.get(realm.api + "/role-assignments", params={"role_id": role.id}, headers=realm.headers)
    ).json()
    assert [a["id"] for a in by_role["items"]] == [assignment["id"]]
    fetched = await client.get(f"{realm.api}/role-assignments/{assignment['id']}", headers=realm.headers)
    assert fetched.json() == assignment

    revoked = await client.delete(f"{realm.api}/role-assignments/{assignment['id']}", headers=realm.headers)
    assert revoked.status_code == 204
    assert (await client.get(realm.api + "/users", headers=token)).status_code == 403
    assert (
        await client.delete(f"{realm.api}/role-assignments/{assignment['id']}", headers=realm.headers)
    ).status_code == 404
    audit = await fetch(
        realm,
        "SELECT type, category, actor_id, details->>'role_id' FROM audit_events WHERE subject_id = :u "
        "AND category = 'authorization' ORDER BY id",
        u=user.id,
    )
    assert audit == [
        ("role.assigned", "authorization", realm.admin.id, role.id),
        ("role.revoked", "authorization", realm.admin.id, role.id),
    ]


async def test_assignment_input_rules(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    user = await realm.user()
    org = await realm.organization()
    realm_role = await realm.role("realm-reader", ["realm.users.read"])
    org_role = await realm.role("org-member-writer", ["org.members.write"], boundary="organization")
    url = realm.api + "/role-assignments"

    neither = await client.post(url, json={"role_id": realm_role.id}, headers=realm.headers)
    assert neither.status_code == 422 and [e["path"] for e in neither.json()["errors"]] == ["/user_id"]
    sp = (await client.post(realm.api + "/service-principals", json={"name": "bot"}, headers=realm.headers)).json()
    both = await client.post(
        url,
        json={
            "role_id": realm_role.id,
            "user_id": user.id,
            "service_principal_id": sp["id"],
            "expires_at": "2001-01-01T00:00:00Z",
        },
        headers=realm.headers,
    )
    assert both.status_code == 422
    assert {e["path"] for e in both.json()["errors"]} == {"/service_principal_id", "/expires_at"}
    no_org = await client.post(url, json={"role_id": org_role.id, "user_id": user.id}, headers=realm.headers)
    assert no_org.status_code == 422 and no_org.json()["errors"][0]["path"] == "/organization_id"
    realm_with_org = await client.post(
        url, json={"role_id": realm_role.id, "user_id": user.id, "organization_id": org.id}, headers=realm.headers
    )
    assert realm_with_org.status_code == 422 and realm_with_org.json()["errors"][0]["path"] == "/organization_id"
    not_a_date = await client.post(
        url, json={"role_id": realm_role.id, "user_id": user.id, "expires_at": "tomorrow"}, headers=realm.headers
    )
    assert not_a_date.status_code == 422 and not_a_date.json()["errors"][0]["path"] == "/expires_at"

    missing = "0" * 26
    assert (
        await client.post(url, json={"role_id": "rol_" + missing, "user_id": user.id}, headers=realm.headers)
    ).status_code == 404
    assert (
        await client.post(url, json={"role_id": realm_role.id, "user_id": "usr_" + missing}, headers=realm.headers)
    ).status_code == 404
    assert (
        await client.post(
            url,
            json={"role_id": org_role.id, "user_id": user.id, "organization_id": "org_" + missing},
            headers=realm.headers,
        )
    ).status_code == 404
    assert len(await fetch(realm, "SELECT id FROM role_assignments WHERE realm_id = :r", r=realm.id)) == 1

    in_org = await client.post(
        url, json={"role_id": org_role.id, "user_id": user.id, "organization_id": org.id}, headers=realm.headers
    )
    assert in_org.status_code == 201 and in_org.json()["organization_id"] == org.id
    to_sp = await client.post(
        url, json={"role_id": realm_role.id, "service_principal_id": sp["id"]}, headers=realm.headers
    )
    assert to_sp.status_code == 201 and to_sp.json()["service_principal_id"] == sp["id"]
    listed = (await client.get(url, params={"service_principal_id": sp["id"]}, headers=realm.headers)).json()
    assert [a["id"] for a in listed["items"]] == [to_sp.json()["id"]]


async def test_each_malformed_id_of_an_assignment_is_a_422_at_its_own_path(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    body = {
        "role_id": "role-1",
        "user_id": "user-1",
        "service_principal_id": "bot-1",
        "organization_id": "org-1",
        "approver_id": "approver-1",
    }
    response = await client.post(realm.api + "/role-assignments", json=body, headers=realm.headers)
    assert response.status_code == 422
    errors = {e["path"]: e for e in response.json()["errors"]}
    assert set(errors) == {"/role_id", "/user_id", "/service_principal_id", "/organization_id", "/approver_id"}
    assert {e["code"] for e in errors.values()} == {"invalid_id"}
    assert errors["/approver_id"]["message"] == "must be an id starting with usr_"
    assert len(await fetch(realm, "SELECT id FROM role_assignments WHERE realm_id = :r", r=realm.id)) == 1


async def test_the_grant_ceiling_holds_for_assigning_and_revoking(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    north, south = await realm.organization("North"), await realm.organization("South")
    delegate = await realm.user("delegate@example.com")
    await realm.assign(delegate, await realm.role("assigner", ["realm.roles.write", "realm.roles.read"]))
    member_writer = await realm.role("member-writer", ["org.members.write"], boundary="organization")
    await realm.assign(delegate, member_writer, organization_id=north.id)
    token = bearer(await realm.token(delegate))
    subject = await realm.user()
    url = realm.api + "/role-assignments"

    admin_role = await realm.builtin_role("realm-admin")
    escalate = await client.post(url, json={"role_id": admin_role.id, "user_id": subject.id}, headers=token)
    assert escalate.status_code == 403 and escalate.json()["code"] == "grant_ceiling_exceeded"
    assert "realm.workflows.publish" in escalate.json()["detail"] and "org.*" in escalate.json()["detail"]
    ok = await client.post(
        url, json={"role_id": member_writer.id, "user_id": subject.id, "organization_id": north.id}, headers=token
    )
    assert ok.status_code == 201
    other_org = await client.post(
        url, json={"role_id": member_writer.id, "user_id": subject.id, "organization_id": south.id}, headers=token
    )
    assert other_org.status_code == 403 and other_org.json()["code"] == "grant_ceiling_exceeded"

    admins = (await client.get(url, params={"role_id": admin_role.id}, headers=token)).json()["items"]
    revoke = await client.delete(f"{url}/{admins[0]['id']}", headers=token)
    assert revoke.status_code == 403 and revoke.json()["code"] == "grant_ceiling_exceeded"
    assert (await client.delete(f"{url}/{ok.json()['id']}", headers=token)).status_code == 204


async def test_roles_that_require_approval_need_an_independent_approver(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    role = await realm.role("payments", ["realm.users.read"], requires_approval=True)
    subject = await realm.user("subject@example.com")
    weak = await realm.user("weak@example.com")
    approver, approver_session = await independent_admin(realm, "approver@example.com")
    suspended = await realm.user("gone@example.com")
    await realm.assign(suspended, await realm.builtin_role("realm-admin"))
    await client.post(f"{realm.api}/users/{suspended.id}/suspend", headers=realm.headers)
    url = realm.api + "/role-assignments"

    async def assign(approver_id: str | None, subject_id: str = subject.id) -> Any:
        body = {"role_id": role.id, "user_id": subject_id} | ({"approver_id": approver_id} if approver_id else {})
        return await client.post(url, json=body, headers=realm.headers)

    missing = await assign(None)
    assert missing.status_code == 422 and missing.json()["errors"][0]["path"] == "/approver_id"
    for who in (realm.admin.id, weak.id, suspended.id, "usr_" + "0" * 26):
        refused = await assign(who)
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden", who
    self_approved = await assign(approver.id, subject_id=approver.id)
    assert self_approved.status_code == 403
    requested = await assign(approver.id)
    assert requested.status_code == 202 and requested.json()["status"] == "pending_approval"
    approval = requested.json()["approval"]
    assert approval["kind"] == "role_assignment" and approval["approvers"] == [approver.id]
    # Nothing is assigned until the named approver approves, on the same approvals endpoints.
    assert await fetch(realm, "SELECT id FROM role_assignments WHERE role_id = :r", r=role.id) == []
    subject_token = await realm.token(subject, audience="account")
    subject_says = await client.post(
        f"{realm.api}/approvals/{approval['id']}/approve", headers={"Authorization": f"Bearer {subject_token}"}
    )
    assert subject_says.status_code == 404
    decided = await client.post(
        f"{realm.api}/approvals/{approval['id']}/approve", json={"comment": "ok"}, headers=approver_session
    )
    assert decided.status_code == 200, decided.text
    made = await fetch(realm, "SELECT approver_id, granted_by FROM role_assignments WHERE role_id = :r", r=role.id)
    assert made == [(approver.id, realm.admin.id)]
    types = [
        t
        for (t,) in await fetch(
            realm, "SELECT type FROM audit_events WHERE correlation_id = :a ORDER BY id", a=approval["id"]
        )
    ]
    assert types == ["role.assignment.approved", "role.assigned"]


async def test_roles_and_assignments_never_cross_realms(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle
) -> None:
    foreign_role = await other_realm.role("theirs", ["realm.users.read"])
    foreign_user = await other_realm.user()
    assert (await client.get(f"{realm.api}/roles/{foreign_role.id}", headers=realm.headers)).status_code == 404
    user = await realm.user()
    assert (
        await client.post(
            realm.api + "/role-assignments",
            json={"role_id": foreign_role.id, "user_id": user.id},
            headers=realm.headers,
        )
    ).status_code == 404
    mine = await realm.role("mine", ["realm.users.read"])
    assert (
        await client.post(
            realm.api + "/role-assignments",
            json={"role_id": mine.id, "user_id": foreign_user.id},
            headers=realm.headers,
        )
    ).status_code == 404
    theirs = (await client.get(other_realm.api + "/role-assignments", headers=other_realm.headers)).json()["items"]
    assert (
        await client.delete(f"{realm.api}/role-assignments/{theirs[0]['id']}", headers=realm.headers)
    ).status_code == 404
    names = [r["name"] for r in (await client.get(realm.api + "/roles", headers=realm.headers)).json()["items"]]
    assert "theirs" not in names
