"""An operator gives realm-admin back to a realm nobody administers (``cockpit admin grant-realm-admin``):
to an active user of that realm only, once, realm-wide and without end, audited as the system with a
security alert beside it."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from engine.directory.admins import active_admin_count, grant_realm_admin, is_admin
from engine.directory.models import Realm, User
from engine.platform.errors import Conflict
from testing.factories import RealmHandle

VIA = "cockpit admin grant-realm-admin"


async def grant(realm: RealmHandle, user: User) -> str:
    async with realm.sessions() as session, session.begin():
        row = await session.get(Realm, realm.id)
        person = await session.get(User, user.id)
        assert row is not None and person is not None
        return (await grant_realm_admin(session, row, person, via=VIA)).id


async def refusal(realm: RealmHandle, user: User) -> Conflict:
    with pytest.raises(Conflict) as refused:
        await grant(realm, user)
    return refused.value


async def test_an_operator_gives_realm_admin_to_an_active_user_once_and_it_is_audited(realm: RealmHandle) -> None:
    user = await realm.user("heir@example.com")
    assignment_id = await grant(realm, user)
    async with realm.sessions() as session:
        assert await is_admin(session, realm.id, user.id) is True
        assert await active_admin_count(session, realm.id) == 2
        held = (
            await session.execute(
                text(
                    "SELECT ra.realm_id, ra.user_id, ra.organization_id, ra.expires_at, ra.granted_by, ra.approver_id,"
                    " r.name, r.builtin, r.id FROM role_assignments ra JOIN roles r ON r.id = ra.role_id"
                    " WHERE ra.id = :a"
                ),
                {"a": assignment_id},
            )
        ).one()
        audited = (
            await session.execute(
                text(
                    "SELECT type, actor_type, actor_id, category, subject_type, subject_id, details FROM audit_events"
                    " WHERE realm_id = :r AND subject_id = :u AND type IN ('role.assigned', 'security.alert') ORDER BY id"
                ),
                {"r": realm.id, "u": user.id},
            )
        ).all()
    role_id = held[-1]
    assert tuple(held[:-1]) == (realm.id, user.id, None, None, None, None, "realm-admin", True)
    assert [tuple(row) for row in audited] == [
        (
            "role.assigned",
            "system",
            None,
            "authorization",
            "user",
            user.id,
            {
                "assignment_id": assignment_id,
                "role_id": role_id,
                "role": "realm-admin",
                "organization_id": None,
                "expires_at": None,
                "approver_id": None,
                "via": VIA,
            },
        ),
        (
            "security.alert",
            "system",
            None,
            "security",
            "user",
            user.id,
            {"reason": "realm_admin_granted_by_operator", "via": VIA, "assignment_id": assignment_id},
        ),
    ]

    again = await refusal(realm, user)
    assert (again.code, again.detail) == ("conflict", "heir@example.com already holds realm-admin.")


async def test_nobody_suspended_or_of_another_realm_is_given_realm_admin(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    away = await realm.user("away@example.com")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": away.id})
    suspended = await refusal(realm, away)
    assert (suspended.code, suspended.detail) == (
        "conflict",
        "The user is suspended: reactivate them or choose an active user.",
    )
    stranger = await other_realm.user("stranger@example.com")
    foreign = await refusal(realm, stranger)
    assert (foreign.code, foreign.detail) == ("conflict", "The user is not in this realm.")
    async with realm.sessions() as session:
        assert await active_admin_count(session, realm.id) == 1
        assert (
            await session.scalar(
                text("SELECT count(*) FROM audit_events WHERE type = 'security.alert' AND realm_id IN (:a, :b)"),
                {"a": realm.id, "b": other_realm.id},
            )
            == 0
        )
