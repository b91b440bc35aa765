"""Directory rules that must hold when two changes race, on separate connections, and role names
people cannot tell apart.

Each race is made deterministic: the first change is made and left uncommitted, the second is
started on another connection while the first still holds whatever it holds, and the first
commits only once the second is known to be under way. Without serialization, both would pass
their checks against what was committed before either of them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import roles
from engine.directory.authz import load_authority
from engine.directory.groups import create_group, update_group
from engine.platform.errors import Conflict, ValidationFailed
from testing.factories import RealmHandle

Client = AsyncTestClient[Litestar]
HELD = 0.5  # how long the first change keeps its transaction open while the second waits


async def race(realm: RealmHandle, first: Any, second: Any) -> tuple[Any, BaseException | Any]:
    """Run ``first`` (left uncommitted) and ``second`` on two connections; commit ``first`` only
    while ``second`` is running. Returns what ``first`` answered and what ``second`` answered or raised."""
    async with realm.sessions() as one, realm.sessions() as two:
        await one.begin()
        done_first = await first(one)
        task = asyncio.create_task(_in_transaction(two, second))
        await asyncio.sleep(HELD)  # the second is now blocked, or (without the rule) already through
        await one.commit()
        try:
            return done_first, await task
        except BaseException as exc:  # the refusal is the answer
            return done_first, exc


async def _in_transaction(session: Any, change: Any) -> Any:
    async with session.begin():
        return await change(session)


async def parents(realm: RealmHandle, *group_ids: str) -> dict[str, str | None]:
    async with realm.sessions() as session:
        found = await session.execute(
            text("SELECT id, parent_id FROM groups WHERE id = ANY(:ids)"), {"ids": list(group_ids)}
        )
        return {gid: parent for gid, parent in found}


async def test_two_moves_at_once_never_make_a_parent_cycle(realm: RealmHandle) -> None:
    org = await realm.organization("Acme")
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        a, _ = await create_group(session, realm.actor, authority, org.id, name="A")
        b, _ = await create_group(session, realm.actor, authority, org.id, name="B")

    def move(group_id: str, parent_id: str) -> Any:
        async def change(session: Any) -> Any:
            return await update_group(session, realm.actor, authority, org.id, group_id, parent_id=parent_id)

        return change

    _, second = await race(realm, move(a.id, b.id), move(b.id, a.id))
    assert isinstance(second, ValidationFailed), second
    assert [(i.path, i.code) for i in second.issues] == [("/parent_id", "cycle")]
    assert await parents(realm, a.id, b.id) == {a.id: b.id, b.id: None}

    # A longer loop closes the same way: C under B, then B under C's descendant... C is under A.
    async with realm.sessions() as session, session.begin():
        c, _ = await create_group(session, realm.actor, authority, org.id, name="C")
    _, second = await race(realm, move(c.id, a.id), move(b.id, c.id))
    assert isinstance(second, ValidationFailed), second
    assert await parents(realm, a.id, b.id, c.id) == {a.id: b.id, b.id: None, c.id: a.id}


async def test_two_creations_differing_only_by_case_cannot_both_succeed(realm: RealmHandle) -> None:
    async with realm.sessions() as session:
        authority = await load_authority(session, realm.id, "user", realm.admin.id)

    def create(name: str) -> Any:
        async def change(session: Any) -> Any:
            return await roles.create_role(
                session, realm.actor, authority, name=name, permissions=["realm.users.read"], boundary="realm"
            )

        return change

    first, second = await race(realm, create("Payments"), create("PAYMENTS"))
    assert first.name == "Payments"
    assert isinstance(second, Conflict) and second.code == "conflict", second
    async with realm.sessions() as session:
        names = (await session.execute(text("SELECT name FROM roles WHERE realm_id = :r"), {"r": realm.id})).scalars()
        assert sorted(n for n in names if n.casefold() == "payments") == ["Payments"]


async def test_two_renames_differing_only_by_case_cannot_both_succeed(realm: RealmHandle) -> None:
    one, two = await realm.role("North", ["realm.users.read"]), await realm.role("South", ["realm.users.read"])
    async with realm.sessions() as session:
        authority = await load_authority(session, realm.id, "user", realm.admin.id)

    def rename(role_id: str, name: str) -> Any:
        async def change(session: Any) -> Any:
            return await roles.update_role(session, realm.actor, authority, role_id, name=name)

        return change

    first, second = await race(realm, rename(one.id, "Payments"), rename(two.id, "PAYMENTS"))
    assert first.name == "Payments"
    assert isinstance(second, Conflict) and second.code == "conflict", second
    async with realm.sessions() as session:
        names = (await session.execute(text("SELECT name FROM roles WHERE realm_id = :r"), {"r": realm.id})).scalars()
        assert sorted(n for n in names if n in {"North", "South", "Payments", "PAYMENTS"}) == ["Payments", "South"]


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("REALM-ADMİN", "reserved_name"),  # a capital I with a dot: "i̇" once case-folded
        ("Realm-Admin", "reserved_name"),
        ("ｒｅａｌｍ-ａｕｄｉｔｏｒ", "reserved_name"),  # fullwidth
        ("PAYMENTS", "conflict"),
        ("Paymënts", "conflict"),
        ("PAYMENTS ", "conflict"),
    ],
)
async def test_role_names_people_cannot_tell_apart_are_refused(
    client: Client, realm: RealmHandle, name: str, code: str
) -> None:
    url = realm.api + "/roles"
    body = {"permissions": ["realm.users.read"], "boundary": "realm"}
    assert (await client.post(url, json=body | {"name": "payments"}, headers=realm.headers)).status_code == 201
    refused = await client.post(url, json=body | {"name": name}, headers=realm.headers)
    assert refused.status_code == 409 and refused.json()["code"] == code, refused.text
    other = await client.post(url, json=body | {"name": "Billing"}, headers=realm.headers)
    renamed = await client.patch(f"{url}/{other.json()['id']}", json={"name": name}, headers=realm.headers)
    assert renamed.status_code == 409 and renamed.json()["code"] == code, renamed.text
    assert (
        await client.patch(f"{url}/{other.json()['id']}", json={"name": "Billing team"}, headers=realm.headers)
    ).status_code == 200


async def test_the_database_refuses_a_second_role_of_the_same_folded_name(realm: RealmHandle) -> None:
    """Even a write that skipped the engine's check: the folded name is unique per realm."""
    await realm.role("Payments", ["realm.users.read"])
    with pytest.raises(Exception, match="uq_roles_realm_id_name_key"):
        await realm.role("PAYMENTS", ["realm.users.read"])
    with pytest.raises(Exception, match="uq_roles_realm_id_name_key"):
        await realm.role("REALM-ADMİN", ["realm.users.read"])
