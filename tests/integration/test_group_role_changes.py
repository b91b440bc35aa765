"""Taking roles away through a group passes the grant ceiling, like giving them: a group lead who
could not revoke a role directly cannot drop it from a group's roles nor move a group out from
under the parent that grants it."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import RealmHandle, bearer

Client = AsyncTestClient[Litestar]


async def test_a_group_lead_cannot_take_away_through_a_group_a_role_above_their_ceiling(
    client: Client, realm: RealmHandle
) -> None:
    org = await realm.organization("Eng")
    lead = await realm.user("lead@example.com")
    await realm.member(org, lead)
    lead_role = await realm.role(
        "group-lead", ["org.groups.write", "realm.organizations.read"], boundary="organization"
    )
    await realm.assign(lead, lead_role, organization_id=org.id)
    token = bearer(await realm.token(lead))
    powerful = await realm.role("powerful", ["realm.users.write"], boundary="organization")
    small = await realm.role("small", ["org.groups.write"], boundary="organization")
    url = f"{realm.api}/organizations/{org.id}/groups"

    async def create(**body: Any) -> str:
        response = await client.post(url, json=body, headers=realm.headers)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    core = await create(name="Core", role_ids=[powerful.id, small.id])
    top = await create(name="Top", role_ids=[powerful.id])
    team = await create(name="Team", parent_id=top)
    expected_detail = (
        "To revoke powerful you need every permission of the role in that scope;"
        f" missing: realm.users.write in {org.id}"
    )

    dropped = await client.patch(f"{url}/{core}", json={"role_ids": [small.id]}, headers=token)
    assert dropped.status_code == 403 and dropped.json()["code"] == "grant_ceiling_exceeded", dropped.text
    assert dropped.json()["detail"] == expected_detail
    moved = await client.patch(f"{url}/{team}", json={"parent_id": None}, headers=token)
    assert moved.status_code == 403 and moved.json()["code"] == "grant_ceiling_exceeded", moved.text
    assert moved.json()["detail"] == expected_detail

    async with realm.sessions() as session:
        roles = await session.execute(
            text("SELECT role_id FROM group_roles WHERE group_id = :g ORDER BY role_id"), {"g": core}
        )
        parent = await session.scalar(text("SELECT parent_id FROM groups WHERE id = :g"), {"g": team})
    assert (list(roles.scalars()), parent) == (sorted([powerful.id, small.id]), top)
    # What is within the lead's ceiling they may take away.
    kept = await client.patch(f"{url}/{core}", json={"role_ids": [powerful.id]}, headers=token)
    assert kept.status_code == 200 and kept.json()["role_ids"] == [powerful.id], kept.text
