"""What the organizations API promises beyond its status codes: the refusals' words, the audit
events' subjects and details, and the engine's membership and name look-ups."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.organizations import is_member, organization_names
from testing.factories import RealmHandle, bearer


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def test_an_unknown_organization_is_named_in_the_refusal(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    missing = await client.get(f"{realm.api}/organizations/org_{'0' * 26}", headers=realm.headers)
    assert missing.status_code == 404 and missing.json()["detail"] == "No such organization."


async def test_names_with_line_breaks_or_hidden_characters_are_refused(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    for bad in ("Fin\u200bance", "Fin\nance"):
        created = await client.post(realm.api + "/organizations", json={"name": bad}, headers=realm.headers)
        assert created.status_code == 422 and created.json()["errors"][0]["path"] == "/name", bad
    org = await realm.organization("Stays")
    renamed = await client.patch(
        f"{realm.api}/organizations/{org.id}", json={"name": "St\u200bays"}, headers=realm.headers
    )
    assert renamed.status_code == 422 and renamed.json()["errors"][0]["path"] == "/name"
    assert await fetch(realm, "SELECT name FROM organizations WHERE id = :o", o=org.id) == [("Stays",)]


async def test_an_update_audits_exactly_what_changed(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    org = await realm.organization("Finance")
    url = f"{realm.api}/organizations/{org.id}"
    both = await client.patch(url, json={"name": "Finance EU", "state": "inactive"}, headers=realm.headers)
    assert both.status_code == 200, both.text
    same = await client.patch(url, json={"name": "Finance EU", "state": "inactive"}, headers=realm.headers)
    assert same.status_code == 200
    state = await client.patch(url, json={"state": "active"}, headers=realm.headers)
    assert state.json()["state"] == "active" and state.json()["name"] == "Finance EU"
    created = await client.post(realm.api + "/organizations", json={"name": "Legal"}, headers=realm.headers)
    assert await fetch(realm, "SELECT details FROM audit_events WHERE subject_id = :o", o=created.json()["id"]) == [
        ({"name": "Legal"},)
    ]
    audit = await fetch(
        realm,
        "SELECT subject_type, details FROM audit_events WHERE type = 'organization.updated' AND subject_id = :o "
        "ORDER BY id",
        o=org.id,
    )
    assert audit == [
        ("organization", {"name": "Finance EU", "state": "inactive"}),
        ("organization", {"state": "active"}),
    ]


async def test_membership_audit_events_name_the_user_and_the_membership(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("Sales")
    user = await realm.user("ana@example.com")
    added = await client.post(
        f"{realm.api}/organizations/{org.id}/members", json={"user_id": user.id}, headers=realm.headers
    )
    assert added.status_code == 201, added.text
    listed = await client.get(f"{realm.api}/organizations/{org.id}/members", headers=realm.headers)
    assert [m["created_at"] for m in listed.json()["items"]] == [added.json()["created_at"]]
    removed = await client.delete(f"{realm.api}/organizations/{org.id}/members/{user.id}", headers=realm.headers)
    assert removed.status_code == 204
    payload = {"membership_id": added.json()["id"], "organization_id": org.id, "user_id": user.id}
    audit = await fetch(
        realm,
        "SELECT type, subject_type, subject_id, details FROM audit_events "
        "WHERE type LIKE 'organization.membership.%' ORDER BY id",
    )
    assert audit == [
        ("organization.membership.added", "user", user.id, payload),
        ("organization.membership.removed", "user", user.id, payload),
    ]


async def test_a_member_manager_cannot_add_or_remove_someone_stronger(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("North")
    manager = await realm.user("manager@example.com")
    role = await realm.role("north-manager", ["org.members.write", "realm.organizations.read"], boundary="organization")
    await realm.assign(manager, role, organization_id=org.id)
    token = bearer(await realm.token(manager))
    members = f"{realm.api}/organizations/{org.id}/members"

    added = await client.post(members, json={"user_id": realm.admin.id}, headers=token)
    assert added.status_code == 403 and added.json()["code"] == "target_outranks_actor"
    assert added.json()["detail"].startswith("This user holds permissions you do not hold (")
    assert added.json()["detail"].endswith("; you cannot change their memberships.")
    assert await fetch(realm, "SELECT count(*) FROM memberships WHERE organization_id = :o", o=org.id) == [(0,)]

    await realm.member(org, realm.admin)
    removed = await client.delete(f"{members}/{realm.admin.id}", headers=token)
    assert removed.status_code == 403 and removed.json()["code"] == "target_outranks_actor"
    assert removed.json()["detail"].startswith("This user holds permissions you do not hold (")
    assert removed.json()["detail"].endswith("; you cannot change their memberships.")
    assert await fetch(realm, "SELECT user_id FROM memberships WHERE organization_id = :o", o=org.id) == [
        (realm.admin.id,)
    ]


async def test_membership_and_names_are_read_within_the_realm(realm: RealmHandle, other_realm: RealmHandle) -> None:
    org, other = await realm.organization("Sales"), await realm.organization("Support")
    foreign = await other_realm.organization("Foreign")
    user = await realm.user()
    await realm.member(org, user)
    async with realm.sessions() as session:
        assert await is_member(session, org.id, user.id) is True
        assert await is_member(session, other.id, user.id) is False
        assert await organization_names(session, realm.id, [None, org.id, org.id, foreign.id]) == {org.id: "Sales"}
        assert await organization_names(session, realm.id, [None]) == {}
        assert await organization_names(session, realm.id, []) == {}


async def test_leaving_the_organization_is_refused_as_revoking_its_groups_roles(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("Eng")
    powerful = await realm.role("powerful", ["realm.users.write"], boundary="organization")
    groups = f"{realm.api}/organizations/{org.id}/groups"
    group = await client.post(groups, json={"name": "Core", "role_ids": [powerful.id]}, headers=realm.headers)
    member = await realm.user("member@example.com")
    await realm.member(org, member)
    joined = await client.post(
        f"{groups}/{group.json()['id']}/members", json={"user_id": member.id}, headers=realm.headers
    )
    assert joined.status_code in {200, 201}, joined.text
    manager = await realm.user("manager@example.com")
    await realm.assign(manager, await realm.role("member-manager", ["org.members.write", "realm.organizations.read"]))
    refused = await client.delete(
        f"{realm.api}/organizations/{org.id}/members/{member.id}", headers=bearer(await realm.token(manager))
    )
    assert refused.status_code == 403 and refused.json()["code"] == "grant_ceiling_exceeded"
    assert refused.json()["detail"].startswith("To revoke powerful ")
