"""A new realm: its slug's rule, its built-in roles, its policy, its first administrator and the
audit of each, on a real database."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory.authz import BUILTIN_ROLES
from engine.directory.realms import builtin_role, create_realm, first_start_done, realm_by_slug
from engine.platform.crypto import verify_password
from engine.platform.errors import Conflict, ValidationFailed

Sessions = async_sessionmaker[AsyncSession]
PASSWORD = "correct horse battery staple"
SLUG_RULE = "A realm slug is 2–63 lower-case letters, digits or dashes, starting with a letter."


async def test_a_realm_starts_with_its_roles_policy_administrator_and_their_audit(sessions: Sessions) -> None:
    async with sessions() as session:
        assert await first_start_done(session) is False
    async with sessions() as session, session.begin():
        realm, admin = await create_realm(session, "acme", admin_email="Root@Acme.example")
    assert (realm.slug, realm.name, admin.email, admin.display_name) == ("acme", "acme", "Root@Acme.example", "Root")
    async with sessions() as session:
        assert await first_start_done(session) is True
        found = await realm_by_slug(session, "acme")
        assert found is not None and found.id == realm.id
        assert await realm_by_slug(session, "acm") is None
        admin_role = await builtin_role(session, realm.id, "realm-admin")
        roles = (
            await session.execute(
                text("SELECT id, name, builtin, description, permissions, boundary FROM roles WHERE realm_id = :r"),
                {"r": realm.id},
            )
        ).all()
        policy = await session.scalar(
            text("SELECT extensions FROM realm_policies WHERE realm_id = :r"), {"r": realm.id}
        )
        holders = (
            await session.execute(
                text("SELECT role_id, user_id FROM role_assignments WHERE realm_id = :r"), {"r": realm.id}
            )
        ).all()
        audit = (
            await session.execute(
                text(
                    "SELECT type, actor_type, category, subject_type, subject_id, details FROM audit_events"
                    " WHERE realm_id = :r AND type IN ('realm.created', 'role.assigned') ORDER BY type"
                ),
                {"r": realm.id},
            )
        ).all()
    assert sorted(tuple(role)[1:] for role in roles) == [
        (name, True, spec.description, list(spec.permissions), spec.boundary)
        for name, spec in sorted(BUILTIN_ROLES.items())
    ]
    assert all(role.id.startswith("rol_") for role in roles)
    assert admin_role.name == "realm-admin" and admin_role.realm_id == realm.id
    assert policy == {"workflow_publish_approval": False}
    assert [tuple(h) for h in holders] == [(admin_role.id, admin.id)]
    assignment_id = await assignment_of(sessions, admin.id)
    assert [tuple(a) for a in audit] == [
        ("realm.created", "system", "directory", "realm", realm.id, {"slug": "acme"}),
        (
            "role.assigned",
            "system",
            "authorization",
            "user",
            admin.id,
            {"role_id": admin_role.id, "role": "realm-admin", "assignment_id": assignment_id},
        ),
    ]


async def assignment_of(sessions: Sessions, user_id: str) -> str:
    async with sessions() as session:
        found = await session.scalar(text("SELECT id FROM role_assignments WHERE user_id = :u"), {"u": user_id})
    assert isinstance(found, str)
    return found


@pytest.mark.parametrize("slug", ["a", "1acme", "Acme", "ac_me", "a" * 64, "-acme"])
async def test_a_slug_outside_the_rule_is_refused_at_its_path(sessions: Sessions, slug: str) -> None:
    async with sessions() as session:
        with pytest.raises(ValidationFailed) as refused:
            await create_realm(session, slug, admin_email="root@acme.example")
    assert [(i.path, i.message) for i in refused.value.issues] == [("/slug", SLUG_RULE)]


async def test_the_shortest_and_longest_slugs_are_allowed_and_a_taken_one_is_refused(sessions: Sessions) -> None:
    for slug in ("ab", "a" + "-9" * 31):
        async with sessions() as session, session.begin():
            realm, _ = await create_realm(session, slug, admin_email="root@acme.example", name="Acme")
        assert realm.name == "Acme" and len(slug) in (2, 63)
    async with sessions() as session:
        with pytest.raises(Conflict):
            await create_realm(session, "ab", admin_email="other@acme.example")


async def test_the_first_administrator_gets_the_name_and_password_given(sessions: Sessions) -> None:
    async with sessions() as session, session.begin():
        _realm, admin = await create_realm(
            session, "acme", admin_email="root@acme.example", admin_display_name="Root Admin", admin_password=PASSWORD
        )
    async with sessions() as session:
        stored = await session.scalar(text("SELECT password_hash FROM users WHERE id = :u"), {"u": admin.id})
    assert admin.display_name == "Root Admin"
    assert verify_password(stored, PASSWORD) and not verify_password(stored, PASSWORD + "x")
