from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.models import Organization, User
from testing.factories import RealmHandle, bearer


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


def groups_url(realm: RealmHandle, org: Organization) -> str:
    return f"{realm.api}/organizations/{org.id}/groups"


async def member_of(realm: RealmHandle, org: Organization, email: str | None = None) -> User:
    user = await realm.user(email)
    await realm.member(org, user)
    return user


async def test_create_groups_with_parent_and_roles(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    org = await realm.organization("Ops")
    role = await realm.role("ops-members", ["org.members.write"], boundary="organization")
    url = groups_url(realm, org)
    parent = await client.post(url, json={"name": "Engineering", "role_ids": [role.id]}, headers=realm.headers)
    assert parent.status_code == 201, parent.text
    p = parent.json()
    assert p["id"].startswith("grp_") and p["organization_id"] == org.id
    assert p["parent_id"] is None and p["role_ids"] == [role.id]
    child = await client.post(url, json={"name": "Platform", "parent_id": p["id"]}, headers=realm.headers)
    assert child.status_code == 201 and child.json()["parent_id"] == p["id"] and child.json()["role_ids"] == []

    fetched = await client.get(f"{url}/{p['id']}", headers=realm.headers)
    assert fetched.json() == p
    listed = (await client.get(url, headers=realm.headers)).json()
    assert [(g["name"], g["parent_id"]) for g in listed["items"]] == [("Engineering", None), ("Platform", p["id"])]
    assert (await client.post(url, json={"name": "Platform"}, headers=realm.headers)).status_code == 409
    audit = await fetch(realm, "SELECT type, actor_id FROM audit_events WHERE type = 'group.created' ORDER BY id")
    assert audit == [("group.created", realm.admin.id)] * 2


async def test_bad_group_input_lists_every_error(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    org, other = await realm.organization("A"), await realm.organization("B")
    foreign_parent = (
        await client.post(groups_url(realm, other), json={"name": "Theirs"}, headers=realm.headers)
    ).json()
    response = await client.post(
        groups_url(realm, org),
        json={"name": "", "parent_id": foreign_parent["id"], "role_ids": ["rol_" + "0" * 26]},
        headers=realm.headers,
    )
    assert response.status_code == 422
    assert {e["path"] for e in response.json()["errors"]} == {"/name", "/parent_id", "/role_ids/0"}
    malformed = await client.post(
        groups_url(realm, org), json={"name": "X", "role_ids": ["admin"]}, headers=realm.headers
    )
    assert malformed.status_code == 422 and malformed.json()["errors"][0]["path"] == "/role_ids/0"
    assert await fetch(realm, "SELECT name FROM groups WHERE organization_id = :o", o=org.id) == []
    assert (
        await client.get(f"{groups_url(realm, org)}/{foreign_parent['id']}", headers=realm.headers)
    ).status_code == 404


async def test_each_malformed_id_is_a_422_at_its_own_path_and_changes_nothing(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization()
    url = groups_url(realm, org)
    group = (await client.post(url, json={"name": "Team"}, headers=realm.headers)).json()

    created = await client.post(url, json={"name": "Sub", "parent_id": "Team"}, headers=realm.headers)
    assert created.status_code == 422
    assert [(e["path"], e["code"]) for e in created.json()["errors"]] == [("/parent_id", "invalid_id")]
    moved = await client.patch(f"{url}/{group['id']}", json={"parent_id": "top"}, headers=realm.headers)
    assert moved.status_code == 422
    assert [(e["path"], e["code"]) for e in moved.json()["errors"]] == [("/parent_id", "invalid_id")]
    joined = await client.post(f"{url}/{group['id']}/members", json={"user_id": "nobody"}, headers=realm.headers)
    assert joined.status_code == 422
    assert [(e["path"], e["code"]) for e in joined.json()["errors"]] == [("/user_id", "invalid_id")]

    assert await fetch(realm, "SELECT name, parent_id FROM groups WHERE organization_id = :o", o=org.id) == [
        ("Team", None)
    ]
    assert await fetch(realm, "SELECT user_id FROM group_members WHERE group_id = :g", g=group["id"]) == []


async def test_group_members_must_belong_to_the_organization(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization()
    group = (await client.post(groups_url(realm, org), json={"name": "Team"}, headers=realm.headers)).json()
    url = f"{groups_url(realm, org)}/{group['id']}/members"
    outsider = await realm.user()
    refused = await client.post(url, json={"user_id": outsider.id}, headers=realm.headers)
    assert refused.status_code == 409 and refused.json()["code"] == "not_a_member"

    insider = await member_of(realm, org, "in@example.com")
    added = await client.post(url, json={"user_id": insider.id}, headers=realm.headers)
    assert added.status_code == 201, added.text
    assert added.json()["group_id"] == group["id"] and added.json()["user_id"] == insider.id
    assert added.json()["added_by"] == realm.admin.id
    assert (await client.post(url, json={"user_id": insider.id}, headers=realm.headers)).status_code == 409
    listed = (await client.get(url, headers=realm.headers)).json()
    assert [(m["user_id"], m["email"]) for m in listed["items"]] == [(insider.id, "in@example.com")]

    assert (await client.delete(f"{url}/{insider.id}", headers=realm.headers)).status_code == 204
    assert (await client.delete(f"{url}/{insider.id}", headers=realm.headers)).status_code == 404
    audit = await fetch(
        realm,
        "SELECT type, actor_id, details->>'group_id' FROM audit_events WHERE subject_id = :u "
        "AND type LIKE 'group.%' ORDER BY id",
        u=insider.id,
    )
    assert audit == [
        ("group.member_added", realm.admin.id, group["id"]),
        ("group.member_removed", realm.admin.id, group["id"]),
    ]


async def test_members_inherit_the_roles_of_the_group_and_its_ancestors(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org, other = await realm.organization("Home"), await realm.organization("Away")
    role = await realm.role("member-admin", ["org.members.write"], boundary="organization")
    url = groups_url(realm, org)
    parent = (await client.post(url, json={"name": "Parent", "role_ids": [role.id]}, headers=realm.headers)).json()
    child = (await client.post(url, json={"name": "Child", "parent_id": parent["id"]}, headers=realm.headers)).json()
    user = await member_of(realm, org)
    token = bearer(await realm.token(user))
    newcomer = await realm.user()

    async def add_newcomer(target: Organization) -> int:
        response = await client.post(
            f"{realm.api}/organizations/{target.id}/members", json={"user_id": newcomer.id}, headers=token
        )
        return response.status_code

    assert await add_newcomer(org) == 403
    joined = await client.post(f"{url}/{child['id']}/members", json={"user_id": user.id}, headers=realm.headers)
    assert joined.status_code == 201
    assert await add_newcomer(org) == 201
    assert await add_newcomer(other) == 403  # an organization role of a group holds in its organization only
    await client.delete(f"{realm.api}/organizations/{org.id}/members/{newcomer.id}", headers=realm.headers)
    await client.delete(f"{url}/{child['id']}/members/{user.id}", headers=realm.headers)
    assert await add_newcomer(org) == 403


async def test_removing_a_membership_removes_the_users_groups(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization()
    role = await realm.role("members", ["org.members.write"], boundary="organization")
    group = (
        await client.post(groups_url(realm, org), json={"name": "G", "role_ids": [role.id]}, headers=realm.headers)
    ).json()
    user = await member_of(realm, org)
    await client.post(
        f"{groups_url(realm, org)}/{group['id']}/members", json={"user_id": user.id}, headers=realm.headers
    )
    removed = await client.delete(f"{realm.api}/organizations/{org.id}/members/{user.id}", headers=realm.headers)
    assert removed.status_code == 204
    assert await fetch(realm, "SELECT group_id FROM group_members WHERE user_id = :u", u=user.id) == []
    audit = await fetch(realm, "SELECT details->>'reason' FROM audit_events WHERE type = 'group.member_removed'")
    assert audit == [("membership_removed",)]


async def test_granting_through_a_group_passes_the_grant_ceiling(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("Delegated")
    lead = await member_of(realm, org, "lead@example.com")
    lead_role = await realm.role(
        "group-lead", ["org.groups.write", "org.members.write", "realm.organizations.read"], boundary="organization"
    )
    await realm.assign(lead, lead_role, organization_id=org.id)
    token = bearer(await realm.token(lead))
    url = groups_url(realm, org)
    admin_role = await realm.builtin_role("realm-admin")
    small = await realm.role("small", ["org.members.write"], boundary="organization")
    realm_reader = await realm.role("realm-reader", ["realm.organizations.read"])

    escalate = await client.post(url, json={"name": "Admins", "role_ids": [admin_role.id]}, headers=token)
    assert escalate.status_code == 403 and escalate.json()["code"] == "grant_ceiling_exceeded"
    # A realm role granted through a group holds realm-wide, so it needs realm-wide authority.
    widen = await client.post(url, json={"name": "Readers", "role_ids": [realm_reader.id]}, headers=token)
    assert widen.status_code == 403 and widen.json()["code"] == "grant_ceiling_exceeded"
    ok = await client.post(url, json={"name": "Helpers", "role_ids": [small.id]}, headers=token)
    assert ok.status_code == 201

    admins = (
        await client.post(url, json={"name": "Admins", "role_ids": [admin_role.id]}, headers=realm.headers)
    ).json()
    below = (await client.post(url, json={"name": "Below", "parent_id": admins["id"]}, headers=token)).json()
    peer = await member_of(realm, org)
    inherit = await client.post(f"{url}/{below['id']}/members", json={"user_id": peer.id}, headers=token)
    assert inherit.status_code == 403 and inherit.json()["code"] == "grant_ceiling_exceeded"
    helped = await client.post(f"{url}/{ok.json()['id']}/members", json={"user_id": peer.id}, headers=token)
    assert helped.status_code == 201
    await client.post(f"{url}/{admins['id']}/members", json={"user_id": peer.id}, headers=realm.headers)
    strip = await client.delete(f"{url}/{admins['id']}/members/{peer.id}", headers=token)
    assert strip.status_code == 403 and strip.json()["code"] == "grant_ceiling_exceeded"

    other = await realm.organization("Elsewhere")
    assert (await client.post(groups_url(realm, other), json={"name": "X"}, headers=token)).status_code == 403


async def test_moving_groups_never_makes_a_cycle(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    org = await realm.organization()
    url = groups_url(realm, org)
    a = (await client.post(url, json={"name": "A"}, headers=realm.headers)).json()
    b = (await client.post(url, json={"name": "B", "parent_id": a["id"]}, headers=realm.headers)).json()
    c = (await client.post(url, json={"name": "C", "parent_id": b["id"]}, headers=realm.headers)).json()
    cycle = await client.patch(f"{url}/{a['id']}", json={"parent_id": c["id"]}, headers=realm.headers)
    assert cycle.status_code == 422
    assert cycle.json()["errors"] == [
        {"path": "/parent_id", "code": "cycle", "message": cycle.json()["errors"][0]["message"]}
    ]
    itself = await client.patch(f"{url}/{a['id']}", json={"parent_id": a["id"]}, headers=realm.headers)
    assert itself.status_code == 422
    moved = await client.patch(f"{url}/{c['id']}", json={"parent_id": a["id"], "name": "C2"}, headers=realm.headers)
    assert moved.status_code == 200 and moved.json()["parent_id"] == a["id"] and moved.json()["name"] == "C2"
    root = await client.patch(f"{url}/{c['id']}", json={"parent_id": None}, headers=realm.headers)
    assert root.json()["parent_id"] is None
    kept = await client.patch(f"{url}/{b['id']}", json={"name": "B2"}, headers=realm.headers)
    assert kept.json()["parent_id"] == a["id"]


async def test_removing_a_member_needs_the_ceiling_of_the_groups_they_leave(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """Leaving the organization takes the user out of its groups: the same check as leaving one group."""
    org = await realm.organization("Eng")
    powerful = await realm.role("powerful", ["realm.users.write"], boundary="organization")
    group = (
        await client.post(
            f"{realm.api}/organizations/{org.id}/groups",
            json={"name": "Core", "role_ids": [powerful.id]},
            headers=realm.headers,
        )
    ).json()
    member = await realm.user("member@example.com")
    await realm.member(org, member)
    added = await client.post(
        f"{realm.api}/organizations/{org.id}/groups/{group['id']}/members",
        json={"user_id": member.id},
        headers=realm.headers,
    )
    assert added.status_code in {200, 201}, added.text
    manager_role = await realm.role("member-manager", ["org.members.write", "realm.organizations.read"])
    manager = await realm.user("manager@example.com")
    await realm.assign(manager, manager_role)
    token = {"Authorization": f"Bearer {await realm.token(manager)}"}
    refused = await client.delete(f"{realm.api}/organizations/{org.id}/members/{member.id}", headers=token)
    assert refused.status_code == 403 and refused.json()["code"] == "grant_ceiling_exceeded"
    still = await client.get(f"{realm.api}/organizations/{org.id}/groups/{group['id']}/members", headers=realm.headers)
    assert [m["user_id"] for m in still.json()["items"]] == [member.id]  # nothing changed
    plain = await realm.user("plain@example.com")
    await realm.member(org, plain)
    assert (
        await client.delete(f"{realm.api}/organizations/{org.id}/members/{plain.id}", headers=token)
    ).status_code == 204


async def test_a_groups_member_list_shows_each_membership_whole(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """Who added the member, the run that did (if one did), when, and the member's name and status."""
    org = await realm.organization()
    group = (await client.post(groups_url(realm, org), json={"name": "Team"}, headers=realm.headers)).json()
    url = f"{groups_url(realm, org)}/{group['id']}/members"
    insider = await member_of(realm, org, "in@example.com")
    added = await client.post(url, json={"user_id": insider.id}, headers=realm.headers)
    assert added.status_code == 201, added.text
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE group_members SET source_run_id = 'run_by_a_workflow' WHERE user_id = :u"), {"u": insider.id}
        )
    listed = (await client.get(url, headers=realm.headers)).json()
    assert listed["items"] == [
        {
            "group_id": group["id"],
            "user_id": insider.id,
            "added_by": realm.admin.id,
            "source_run_id": "run_by_a_workflow",
            "created_at": added.json()["created_at"],
            "email": "in@example.com",
            "display_name": insider.display_name,
            "status": "active",
        }
    ]


async def test_a_group_is_audited_whole_and_a_role_added_to_it_takes_none_away(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization()
    first = await realm.role("first", ["org.members.write"], boundary="organization")
    second = await realm.role("second", ["org.groups.write"], boundary="organization")
    url = groups_url(realm, org)
    group = (await client.post(url, json={"name": "Team", "role_ids": [first.id]}, headers=realm.headers)).json()
    both = sorted([first.id, second.id])
    added = await client.patch(f"{url}/{group['id']}", json={"role_ids": both}, headers=realm.headers)
    assert added.status_code == 200, added.text
    assert added.json()["role_ids"] == both
    audit = await fetch(
        realm,
        "SELECT type, subject_type, details FROM audit_events WHERE subject_id = :g ORDER BY occurred_at, id",
        g=group["id"],
    )
    assert audit == [
        (
            "group.created",
            "group",
            {"organization_id": org.id, "name": "Team", "parent_id": None, "role_ids": [first.id]},
        ),
        ("group.updated", "group", {"organization_id": org.id, "role_ids": both}),
    ]
