"""Changing, listing and deleting roles: each limit on both sides, what each change audits."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import roles
from testing.factories import RealmHandle, bearer, make_realm
from testing.pages import signed_in


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def test_each_limit_of_a_role_is_pinned_on_both_sides(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    url = realm.api + "/roles"

    async def create(name: str, description: str = "", permissions: list[str] | None = None) -> Any:
        body = {
            "name": name,
            "permissions": ["realm.users.read"] if permissions is None else permissions,
            "boundary": "realm",
        }
        return await client.post(url, json=body | {"description": description}, headers=realm.headers)

    longest = await create("n" * 100, "d" * 500)
    assert longest.status_code == 201, longest.text
    too_long = await create("m" * 101, "d" * 501)
    assert too_long.status_code == 422
    assert [(e["path"], e["code"]) for e in too_long.json()["errors"]] == [
        ("/name", "too_long"),
        ("/description", "too_long"),
    ]
    empty = await create("none", permissions=[])
    assert empty.status_code == 422
    assert [(e["path"], e["code"]) for e in empty.json()["errors"]] == [("/permissions", "too_short")]
    nowhere = await client.post(
        url, json={"name": "x", "permissions": ["realm.users.read"], "boundary": "world"}, headers=realm.headers
    )
    assert [(e["path"], e["code"]) for e in nowhere.json()["errors"]] == [("/boundary", "invalid")]
    reserved = await create("Realm-Auditor")
    assert reserved.status_code == 409 and reserved.json()["code"] == "reserved_name"
    assert reserved.json()["detail"] == "This name belongs to a built-in role."

    role = (await create("editable", "Something")).json()
    patch_url = f"{url}/{role['id']}"
    refused = await client.patch(patch_url, json={"name": "m" * 101, "description": "d" * 501}, headers=realm.headers)
    assert refused.status_code == 422
    assert [(e["path"], e["code"]) for e in refused.json()["errors"]] == [
        ("/name", "too_long"),
        ("/description", "too_long"),
    ]
    hidden = await client.patch(patch_url, json={"name": "edit\u200bable"}, headers=realm.headers)
    assert [(e["path"], e["code"]) for e in hidden.json()["errors"]] == [("/name", "invisible_character")]
    two_lines = await client.patch(patch_url, json={"name": "two\nlines"}, headers=realm.headers)
    assert [(e["path"], e["code"]) for e in two_lines.json()["errors"]] == [("/name", "invalid")]
    builtin = await realm.builtin_role("realm-auditor")
    frozen = await client.patch(f"{url}/{builtin.id}", json={"description": "x"}, headers=realm.headers)
    assert frozen.json()["detail"] == "Built-in roles cannot be changed."
    kept = await client.get(patch_url, headers=realm.headers)
    assert kept.json() == role


async def test_changing_a_role_changes_only_what_is_given_and_audits_it(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    url = realm.api + "/roles"
    body = {"name": "editors", "permissions": ["realm.users.read"], "boundary": "realm", "description": "Some"}
    role = (await client.post(url, json=body | {"requires_approval": True}, headers=realm.headers)).json()
    await client.post(url, json=body | {"name": "taken"}, headers=realm.headers)
    role_url = f"{url}/{role['id']}"

    taken = await client.patch(role_url, json={"name": "TAKEN"}, headers=realm.headers)
    assert taken.status_code == 409 and taken.json()["detail"] == "A role with this name already exists in the realm."
    renamed = await client.patch(role_url, json={"name": "  Editors  ", "description": ""}, headers=realm.headers)
    assert renamed.status_code == 200, renamed.text
    assert renamed.json() | {"name": "Editors", "description": ""} == renamed.json()
    assert renamed.json()["requires_approval"] is True and renamed.json()["permissions"] == ["realm.users.read"]
    same = await client.patch(
        role_url, json={"name": "Editors", "permissions": ["realm.users.read"]}, headers=realm.headers
    )
    assert same.status_code == 200
    widened = await client.patch(
        role_url, json={"permissions": ["realm.users.read", "realm.audit.read"]}, headers=realm.headers
    )
    assert widened.status_code == 200
    assert (
        (await client.get(role_url, headers=realm.headers)).json()
        == widened.json()
        == renamed.json() | {"permissions": ["realm.users.read", "realm.audit.read"]}
    )
    assert (await client.patch(role_url, json={"requires_approval": False}, headers=realm.headers)).json()[
        "requires_approval"
    ] is False
    assert (await client.delete(role_url, headers=realm.headers)).status_code == 204

    audit = await fetch(
        realm,
        "SELECT type, category, subject_type, actor_id, details - 'permissions', details->'permissions' "
        "FROM audit_events WHERE subject_id = :r ORDER BY id",
        r=role["id"],
    )
    assert audit == [
        (
            "role.created",
            "authorization",
            "role",
            realm.admin.id,
            {"name": "editors", "boundary": "realm", "requires_approval": True},
            ["realm.users.read"],
        ),
        (
            "role.updated",
            "authorization",
            "role",
            realm.admin.id,
            {"changed": ["name", "description"]},
            ["realm.users.read"],
        ),
        (
            "role.updated",
            "authorization",
            "role",
            realm.admin.id,
            {"changed": ["permissions"]},
            ["realm.users.read", "realm.audit.read"],
        ),
        (
            "role.updated",
            "authorization",
            "role",
            realm.admin.id,
            {"changed": ["requires_approval"]},
            ["realm.users.read", "realm.audit.read"],
        ),
        ("role.deleted", "authorization", "role", realm.admin.id, {"name": "Editors"}, None),
    ]


async def test_roles_are_listed_page_by_page_and_filtered(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    await realm.role("north-desk", ["org.members.write"], boundary="organization")
    await realm.role("south_desk", ["realm.users.read"])
    url = realm.api + "/roles"
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(5):  # a cursor that never moves on must not loop forever
        params = {"limit": 1} | ({"cursor": cursor} if cursor else {})
        page = (await client.get(url, params=params, headers=realm.headers)).json()
        seen += [r["name"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == ["north-desk", "realm-admin", "realm-auditor", "south_desk"]

    async def names(**params: str) -> list[str]:
        return sorted(r["name"] for r in (await client.get(url, params=params, headers=realm.headers)).json()["items"])

    assert await names(q="DESK") == ["north-desk", "south_desk"]
    assert await names(q="_") == ["south_desk"]
    assert await names(boundary="organization") == ["north-desk"]
    assert await names(boundary="realm", q="desk") == ["south_desk"]
    wrong = await client.get(url, params={"boundary": "world"}, headers=realm.headers)
    assert wrong.status_code == 422 and wrong.json()["detail"] == "The request is not valid."
    assert [(e["path"], e["code"]) for e in wrong.json()["errors"]] == [("query:boundary", "invalid")]

    other = await make_realm(realm.sessions)
    await other.role("elsewhere", ["realm.users.read"])
    async with realm.sessions() as session:
        every = await roles.all_roles(session, realm.id)
    assert [role.name for role in every] == ["north-desk", "realm-admin", "realm-auditor", "south_desk"]


async def test_deleting_a_role_needs_its_permissions_and_no_group_granting_it(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    strong = await realm.role("strong", ["realm.users.write"])
    delegate = await realm.user("delegate@example.com")
    await realm.assign(delegate, await realm.role("role-writer", ["realm.roles.*"]))
    refused = await client.delete(f"{realm.api}/roles/{strong.id}", headers=bearer(await realm.token(delegate)))
    assert refused.status_code == 403 and refused.json()["code"] == "grant_ceiling_exceeded"
    assert refused.json()["detail"] == (
        "You cannot delete a role holding permissions you do not hold realm-wide: realm.users.write"
    )

    org = await realm.organization()
    granted = await client.post(
        f"{realm.api}/organizations/{org.id}/groups",
        json={"name": "Strong", "role_ids": [strong.id]},
        headers=realm.headers,
    )
    assert granted.status_code == 201
    in_use = await client.delete(f"{realm.api}/roles/{strong.id}", headers=realm.headers)
    assert in_use.status_code == 409 and in_use.json()["code"] == "role_in_use"
    assert in_use.json()["detail"] == "The role is in use (0 assignment(s), 1 group(s)); remove those first."
    assert await fetch(realm, "SELECT name FROM roles WHERE id = :r", r=strong.id) == [("strong",)]


async def test_a_role_page_links_holders_only_for_a_reader_who_may_open_them(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("Linked org")
    holder = await realm.user("holder@example.com")
    scoped = await realm.role("scoped-reader", ["org.members.write"], boundary="organization")
    await realm.assign(holder, scoped, organization_id=org.id)
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, await realm.role("roles-reader", ["realm.roles.read"]))
    page_of_role = f"/realms/{realm.slug}/roles/{scoped.id}"
    user_link = f'href="/realms/{realm.slug}/users/{holder.id}"'
    org_link = f'href="/realms/{realm.slug}/organizations/{org.id}"'

    await signed_in(client, realm, reader)
    as_reader = await client.get(page_of_role)
    assert as_reader.status_code == 200
    assert "holder@example.com" in as_reader.text and "Linked org" in as_reader.text
    assert user_link not in as_reader.text and org_link not in as_reader.text

    await signed_in(client, realm)
    as_admin = await client.get(page_of_role)
    assert user_link in as_admin.text and org_link in as_admin.text
