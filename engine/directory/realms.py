"""Realms: creating one with its built-in roles, its policy and a first administrator; finding one."""

from __future__ import annotations

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.accounts import create_user
from engine.directory.audit import Actor, record_audit
from engine.directory.authz import BUILTIN_ROLES
from engine.directory.models import Realm, RealmPolicy, Role, RoleAssignment, User
from engine.platform.errors import Conflict, invalid
from engine.platform.ids import new_id

SLUG_PATTERN = r"^[a-z][a-z0-9-]{1,62}$"


async def realm_by_slug(session: AsyncSession, slug: str) -> Realm | None:
    result = await session.execute(select(Realm).where(col(Realm.slug) == slug))
    return result.scalar_one_or_none()


async def create_realm(
    session: AsyncSession,
    slug: str,
    *,
    admin_email: str,
    admin_display_name: str | None = None,
    name: str | None = None,
    admin_password: str | None = None,
) -> tuple[Realm, User]:
    """A realm with its built-in roles, its policy and a first administrator holding realm-admin."""
    import re

    if not re.match(SLUG_PATTERN, slug):
        raise invalid("/slug", "A realm slug is 2–63 lower-case letters, digits or dashes, starting with a letter.")
    if await realm_by_slug(session, slug):
        raise Conflict(f"A realm {slug!r} already exists.")
    realm = Realm(id=new_id("rlm"), slug=slug, name=name or slug)
    session.add(realm)
    await session.flush()
    session.add(RealmPolicy(realm_id=realm.id, extensions={"workflow_publish_approval": False}))
    system = Actor.system(realm.id)
    await record_audit(
        session, system, "realm.created", subject_type="realm", subject_id=realm.id, details={"slug": slug}
    )
    roles: dict[str, Role] = {}
    for role_name, spec in BUILTIN_ROLES.items():
        role = Role(
            id=new_id("rol"),
            realm_id=realm.id,
            name=role_name,
            description=spec.description,
            permissions=list(spec.permissions),
            boundary=spec.boundary,
            builtin=True,
        )
        session.add(role)
        roles[role_name] = role
    await session.flush()
    admin = await create_user(
        session,
        system,
        email=admin_email,
        display_name=admin_display_name or admin_email.split("@", 1)[0],
        password=admin_password,
        authority=None,
    )
    assignment = RoleAssignment(
        id=new_id("ras"), realm_id=realm.id, role_id=roles["realm-admin"].id, user_id=admin.id, granted_by=None
    )
    session.add(assignment)
    await session.flush()
    await record_audit(
        session,
        system,
        "role.assigned",
        category="authorization",
        subject_type="user",
        subject_id=admin.id,
        details={"role_id": assignment.role_id, "role": "realm-admin", "assignment_id": assignment.id},
    )
    return realm, admin


async def builtin_role(session: AsyncSession, realm_id: str, name: str) -> Role:
    result = await session.execute(select(Role).where(col(Role.realm_id) == realm_id, col(Role.name) == name))
    return result.scalar_one()


async def first_start_done(session: AsyncSession) -> bool:
    return bool(await session.scalar(text("SELECT EXISTS (SELECT 1 FROM realms)")))
