"""A realm always keeps an active administrator.

Whatever takes ``realm-admin`` away from someone — revoking their assignment (their own
included), suspending them, removing them from a group that grants it (or from the organization
whose groups do), changing a group's roles or parent — makes its change inside
:func:`keeping_an_admin`: a savepoint, and after the change :func:`require_an_admin_remains`.
When no active user holds the built-in ``realm-admin`` any more (directly, or through a group or
one of its ancestors), the change is refused with 409 ``last_admin`` and the savepoint undoes it,
so a caller that goes on in the same transaction (a page showing the refusal) keeps nothing of it.

The realm's row is locked first, so two such changes made at once (two administrators each
revoking the other) are checked one after the other: the second sees the first.

An operator recovers a realm locked some other way (the last administrator's assignment expired,
a database restored from elsewhere) with ``cockpit admin grant-realm-admin`` (:func:`grant_realm_admin`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.models import Realm, Role, RoleAssignment, User
from engine.platform.errors import Conflict
from engine.platform.ids import new_id

ADMIN_ROLE = "realm-admin"

_ADMINS = """
    WITH RECURSIVE admin_groups AS (
        SELECT gr.group_id AS id
          FROM group_roles gr JOIN roles r ON r.id = gr.role_id
         WHERE r.realm_id = :realm AND r.builtin AND r.name = :role
        UNION
        SELECT g.id FROM groups g JOIN admin_groups ag ON g.parent_id = ag.id
    )
    SELECT count(*) FROM users u
     WHERE u.realm_id = :realm AND u.status = 'active' AND {only}
       AND (EXISTS (SELECT 1 FROM role_assignments ra JOIN roles r ON r.id = ra.role_id
                     WHERE ra.realm_id = :realm AND ra.user_id = u.id AND r.builtin AND r.name = :role
                       AND (ra.expires_at IS NULL OR ra.expires_at > now()))
            OR EXISTS (SELECT 1 FROM group_members gm JOIN admin_groups ag ON ag.id = gm.group_id
                        WHERE gm.user_id = u.id))
    """
_ACTIVE_ADMINS = text(_ADMINS.format(only="true"))
_IS_ADMIN = text(_ADMINS.format(only="u.id = :user"))


async def active_admin_count(session: AsyncSession, realm_id: str) -> int:
    """Active users who hold ``realm-admin`` now, directly or through groups."""
    return int(await session.scalar(_ACTIVE_ADMINS, {"realm": realm_id, "role": ADMIN_ROLE}) or 0)


async def is_admin(session: AsyncSession, realm_id: str, user_id: str) -> bool:
    """Does this active user hold ``realm-admin`` now? Only taking something from an
    administrator can leave the realm without one, so changes about anyone else skip the check
    (and its lock on the realm)."""
    found = await session.scalar(_IS_ADMIN, {"realm": realm_id, "role": ADMIN_ROLE, "user": user_id})
    return bool(found)


async def require_an_admin_remains(session: AsyncSession, realm_id: str) -> None:
    """409 ``last_admin`` when the change just made (flushed) left the realm without an active
    administrator. Serialized per realm by a lock on its row, held until the transaction ends."""
    await session.flush()
    await session.execute(select(col(Realm.id)).where(col(Realm.id) == realm_id).with_for_update(key_share=True))
    if await active_admin_count(session, realm_id) == 0:
        raise Conflict(
            "This would leave the realm without an active administrator (realm-admin): "
            "give the role to someone else first.",
            code="last_admin",
        )


@asynccontextmanager
async def keeping_an_admin(
    session: AsyncSession, realm_id: str, *, check: bool = True, reload: Sequence[object] = ()
) -> AsyncIterator[None]:
    """The change made inside, in a savepoint: undone with 409 ``last_admin`` when it leaves the
    realm without an active administrator (``check=False`` when it cannot take the role away).

    The objects in ``reload`` — those the change modified, which the caller may still show —
    are read again when the change is undone, so they hold what the database holds.
    """
    try:
        async with session.begin_nested():
            yield
            if check:
                await require_an_admin_remains(session, realm_id)
    except Exception:
        for obj in reload:
            await session.refresh(obj)
        raise


async def holds_admin_role(session: AsyncSession, role_ids: list[str]) -> bool:
    """Is one of these roles the built-in ``realm-admin``? (A cheap test before the count.)"""
    if not role_ids:
        return False
    found = await session.scalar(
        select(col(Role.id))
        .where(col(Role.id).in_(role_ids), col(Role.builtin).is_(True), col(Role.name) == ADMIN_ROLE)
        .limit(1)
    )
    return found is not None


async def grant_realm_admin(session: AsyncSession, realm: Realm, user: User, *, via: str) -> RoleAssignment:
    """Operator recovery: give ``realm-admin`` to an active user of the realm, realm-wide.

    No authority is checked — only an operator with access to the database's host runs it (the
    CLI) — and it is audited as the system acting, ``via`` naming the command, with a
    ``security.alert`` beside the assignment.
    """
    if user.realm_id != realm.id:
        raise Conflict("The user is not in this realm.", code="conflict")
    if user.status != "active":
        raise Conflict(f"The user is {user.status}: reactivate them or choose an active user.", code="conflict")
    role = (
        await session.execute(
            select(Role).where(
                col(Role.realm_id) == realm.id, col(Role.builtin).is_(True), col(Role.name) == ADMIN_ROLE
            )
        )
    ).scalar_one()
    held = await session.scalar(
        select(col(RoleAssignment.id)).where(
            col(RoleAssignment.realm_id) == realm.id,
            col(RoleAssignment.role_id) == role.id,
            col(RoleAssignment.user_id) == user.id,
            col(RoleAssignment.organization_id).is_(None),
            col(RoleAssignment.expires_at).is_(None),
        )
    )
    if held is not None:
        raise Conflict(f"{user.email} already holds {ADMIN_ROLE}.", code="conflict")
    assignment = RoleAssignment(
        id=new_id("ras"), realm_id=realm.id, role_id=role.id, user_id=user.id, granted_by=None, approver_id=None
    )
    session.add(assignment)
    await session.flush()
    actor = Actor(type="system", id=None, realm_id=realm.id)
    details = {
        "assignment_id": assignment.id,
        "role_id": role.id,
        "role": role.name,
        "organization_id": None,
        "expires_at": None,
        "approver_id": None,
        "via": via,
    }
    await record_audit(
        session,
        actor,
        "role.assigned",
        category="authorization",
        subject_type="user",
        subject_id=user.id,
        details=details,
    )
    await record_audit(
        session,
        actor,
        "security.alert",
        category="security",
        subject_type="user",
        subject_id=user.id,
        details={"reason": "realm_admin_granted_by_operator", "via": via, "assignment_id": assignment.id},
    )
    return assignment
