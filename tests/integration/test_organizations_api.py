from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import RealmHandle, bearer


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def test_create_get_and_update_an_organization(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    created = await client.post(realm.api + "/organizations", json={"name": "Finance"}, headers=realm.headers)
    assert created.status_code == 201, created.text
    org = created.json()
    assert org["id"].startswith("org_") and org["name"] == "Finance" and org["state"] == "active"
    assert (await client.get(f"{realm.api}/organizations/{org['id']}", headers=realm.headers)).json() == org

    duplicate = await client.post(realm.api + "/organizations", json={"name": "Finance"}, headers=realm.headers)
    assert duplicate.status_code == 409 and duplicate.json()["code"] == "conflict"

    patched = await client.patch(
        f"{realm.api}/organizations/{org['id']}",
        json={"state": "inactive", "name": "Finance EU"},
        headers=realm.headers,
    )
    assert patched.status_code == 200
    assert patched.json()["state"] == "inactive" and patched.json()["name"] == "Finance EU"
    audit = await fetch(realm, "SELECT type, actor_id FROM audit_events WHERE subject_id = :o ORDER BY id", o=org["id"])
    assert audit == [("organization.created", realm.admin.id), ("organization.updated", realm.admin.id)]


async def test_bad_organization_input_lists_every_error_and_changes_nothing(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    empty = await client.post(realm.api + "/organizations", json={"name": "  "}, headers=realm.headers)
    assert empty.status_code == 422 and [e["path"] for e in empty.json()["errors"]] == ["/name"]
    long = await client.post(realm.api + "/organizations", json={"name": "x" * 201}, headers=realm.headers)
    assert long.status_code == 422 and long.json()["errors"][0]["code"] == "too_long"
    unknown = await client.post(realm.api + "/organizations", json={"name": "A", "owner": "me"}, headers=realm.headers)
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["path"] == "/owner"
    org = await realm.organization("Stays")
    both = await client.patch(
        f"{realm.api}/organizations/{org.id}", json={"name": "", "state": "closed"}, headers=realm.headers
    )
    assert both.status_code == 422
    assert {e["path"] for e in both.json()["errors"]} == {"/name", "/state"}
    assert await fetch(realm, "SELECT name, state FROM organizations WHERE realm_id = :r", r=realm.id) == [
        ("Stays", "active")
    ]


async def test_list_is_filtered_and_keyset_paginated(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    for i in range(5):
        await realm.organization(f"Team {i}")
    closed = await realm.organization("Closed shop")
    await client.patch(f"{realm.api}/organizations/{closed.id}", json={"state": "inactive"}, headers=realm.headers)
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = (await client.get(realm.api + "/organizations", params=params, headers=realm.headers)).json()
        seen += [o["name"] for o in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [f"Team {i}" for i in range(5)] + ["Closed shop"]
    found = (await client.get(realm.api + "/organizations", params={"q": "team 3"}, headers=realm.headers)).json()
    assert [o["name"] for o in found["items"]] == ["Team 3"]
    inactive = (
        await client.get(realm.api + "/organizations", params={"state": "inactive"}, headers=realm.headers)
    ).json()
    assert [o["name"] for o in inactive["items"]] == ["Closed shop"]
    bad = await client.get(realm.api + "/organizations", params={"state": "gone"}, headers=realm.headers)
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query:state"


async def test_members_are_added_listed_and_removed_with_outbox_and_audit_events(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("Sales")
    user = await realm.user("ana@example.com", display_name="Ana")
    added = await client.post(
        f"{realm.api}/organizations/{org.id}/members", json={"user_id": user.id}, headers=realm.headers
    )
    assert added.status_code == 201, added.text
    membership = added.json()
    assert membership["id"].startswith("mem_")
    assert membership["organization_id"] == org.id and membership["user_id"] == user.id
    assert membership["created_at"]

    again = await client.post(
        f"{realm.api}/organizations/{org.id}/members", json={"user_id": user.id}, headers=realm.headers
    )
    assert again.status_code == 409

    listed = (await client.get(f"{realm.api}/organizations/{org.id}/members", headers=realm.headers)).json()
    assert [(m["user_id"], m["email"], m["display_name"]) for m in listed["items"]] == [
        (user.id, "ana@example.com", "Ana")
    ]
    assert listed["next_cursor"] is None

    removed = await client.delete(f"{realm.api}/organizations/{org.id}/members/{user.id}", headers=realm.headers)
    assert removed.status_code == 204
    gone = await client.delete(f"{realm.api}/organizations/{org.id}/members/{user.id}", headers=realm.headers)
    assert gone.status_code == 404

    outbox = await fetch(
        realm,
        "SELECT type, subject_id, organization_id, payload FROM outbox_events "
        "WHERE type LIKE 'organization.membership.%' ORDER BY id",
    )
    payload = {"membership_id": membership["id"], "organization_id": org.id, "user_id": user.id}
    assert outbox == [
        ("organization.membership.added", user.id, org.id, payload),
        ("organization.membership.removed", user.id, org.id, payload),
    ]
    audit = await fetch(
        realm,
        "SELECT type, actor_type, actor_id FROM audit_events WHERE type LIKE 'organization.membership.%' ORDER BY id",
    )
    assert audit == [
        ("organization.membership.added", "user", realm.admin.id),
        ("organization.membership.removed", "user", realm.admin.id),
    ]


async def test_unknown_ids_get_404_and_realms_never_leak(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle
) -> None:
    org = await realm.organization()
    foreign_org = await other_realm.organization()
    foreign_user = await other_realm.user()
    missing_user = "usr_" + "0" * 26
    assert (
        await client.post(
            f"{realm.api}/organizations/{org.id}/members", json={"user_id": missing_user}, headers=realm.headers
        )
    ).status_code == 404
    assert (
        await client.post(
            f"{realm.api}/organizations/{org.id}/members", json={"user_id": foreign_user.id}, headers=realm.headers
        )
    ).status_code == 404
    user = await realm.user()
    assert (
        await client.post(
            f"{realm.api}/organizations/{foreign_org.id}/members", json={"user_id": user.id}, headers=realm.headers
        )
    ).status_code == 404
    assert (await client.get(f"{realm.api}/organizations/{foreign_org.id}", headers=realm.headers)).status_code == 404
    assert (
        await client.get(f"{realm.api}/organizations/{foreign_org.id}/members", headers=realm.headers)
    ).status_code == 404
    listed = (await client.get(realm.api + "/organizations", headers=realm.headers)).json()
    assert [o["id"] for o in listed["items"]] == [org.id]
    malformed = await client.post(
        f"{realm.api}/organizations/{org.id}/members", json={"user_id": "nobody"}, headers=realm.headers
    )
    assert malformed.status_code == 422 and malformed.json()["errors"][0]["path"] == "/user_id"


async def test_member_writes_are_checked_in_that_organization(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    north, south = await realm.organization("North"), await realm.organization("South")
    manager = await realm.user("manager@example.com")
    role = await realm.role("north-manager", ["org.members.write", "realm.organizations.read"], boundary="organization")
    await realm.assign(manager, role, organization_id=north.id)
    token = bearer(await realm.token(manager))
    user = await realm.user()

    ok = await client.post(f"{realm.api}/organizations/{north.id}/members", json={"user_id": user.id}, headers=token)
    assert ok.status_code == 201
    assert (await client.get(f"{realm.api}/organizations/{north.id}/members", headers=token)).status_code == 200
    elsewhere = await client.post(
        f"{realm.api}/organizations/{south.id}/members", json={"user_id": user.id}, headers=token
    )
    assert elsewhere.status_code == 403 and elsewhere.json()["code"] == "forbidden"
    assert (await client.get(f"{realm.api}/organizations/{south.id}/members", headers=token)).status_code == 403
    assert (await client.post(realm.api + "/organizations", json={"name": "Mine"}, headers=token)).status_code == 403
    assert (
        await client.delete(f"{realm.api}/organizations/{north.id}/members/{user.id}", headers=token)
    ).status_code == 204
