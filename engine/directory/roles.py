"""Roles: creating, changing, deleting and listing them; the permission catalog as the API shows it.

Every grant passes the grant ceiling (engine/directory/authz.py): nobody creates, changes, assigns or
revokes a role holding a permission they do not hold themselves in that scope. A role bound to
the realm takes effect realm-wide, so its ceiling is checked at realm scope; an
organization-bound role is checked in its organization. Assignments: engine/directory/role_assignments.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models, rules
from engine.directory.audit import Actor, record_audit
from engine.directory.authz import (
    BUILTIN_ROLES,
    PERMISSIONS,
    Authority,
    authority_gaps,
    is_valid_pattern,
    needs_permission,
    role_authority,
)
from engine.directory.input_checks import like, raise_issues, text_issues
from engine.directory.models import GroupRole, Role, RoleAssignment
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import (
    Conflict,
    GrantCeilingExceeded,
    Issue,
    NotFound,
    ValidationFailed,
    missing_permissions,
)
from engine.platform.ids import new_id
from engine.platform.names import fold, normalize
from engine.platform.pagination import Page, keyset_page

ROLE_BOUNDARIES = ("realm", "organization")
ROLE_NAME_MAX = 100
DESCRIPTION_MAX = 500


def permission_catalog() -> read_models.PermissionCatalog:
    return read_models.PermissionCatalog(
        items=[
            read_models.Permission(name=name, level=level, description=description)
            for name, (level, description) in PERMISSIONS.items()
        ]
    )


def role_view(role: Role) -> read_models.Role:
    return read_models.Role(
        id=role.id,
        name=role.name,
        description=role.description,
        permissions=list(role.permissions),
        boundary=role.boundary,
        requires_approval=role.requires_approval,
        builtin=role.builtin,
        created_at=role.created_at,
    )


def grant_scope(role: Role, organization_id: str | None) -> str | None:
    """Where a grant of ``role`` takes effect: its organization when organization-bound, else the realm."""
    return rules.grant_scope(role.boundary, organization_id)


def require_ceiling(authority: Authority, role: Role, organization_id: str | None, verb: str = "assign") -> None:
    """The grant ceiling for one role in one scope (403 grant_ceiling_exceeded naming what is missing)."""
    rules.check_grant_ceiling(authority, role.name, role.permissions, role.boundary, organization_id, verb)


def _permission_issues(permissions: Sequence[str]) -> tuple[list[str], list[Issue]]:
    issues: list[Issue] = []
    if not permissions:
        issues.append(Issue("/permissions", "too_short", "a role has at least one permission"))
    for index, pattern in enumerate(permissions):
        if not is_valid_pattern(pattern):
            issues.append(
                Issue(
                    f"/permissions/{index}",
                    "unknown_permission",
                    f"{pattern!r} is not a permission of the catalog nor a wildcard covering one",
                )
            )
    unique = list(dict.fromkeys(permissions))
    return unique, issues


def _require_role_ceiling(authority: Authority, permissions: Iterable[str], verb: str) -> None:
    missing = authority_gaps(authority, role_authority(permissions, None))
    if missing:
        raise GrantCeilingExceeded(
            f"You cannot {verb} a role holding permissions you do not hold realm-wide: " + ", ".join(missing),
            members=missing_permissions(missing),
        )


RESERVED_ROLE_NAMES = frozenset(fold(name) for name in BUILTIN_ROLES)
NAME_TAKEN = "A role with this name already exists in the realm."


async def _refuse_taken_name(session: AsyncSession, realm_id: str, name: str, *, other_than: str | None = None) -> None:
    """409 when the name is a built-in role's, or another role's once normalized and case-folded.

    This answers early with a clear message; the unique ``(realm_id, name_key)`` constraint is
    what holds when two changes race (:func:`_write_role`).
    """
    key = fold(name)
    if key in RESERVED_ROLE_NAMES:
        raise Conflict("This name belongs to a built-in role.", code="reserved_name")
    query = select(col(Role.id)).where(col(Role.realm_id) == realm_id, col(Role.name_key) == key)
    if other_than:
        query = query.where(col(Role.id) != other_than)
    if await session.scalar(query.limit(1)) is not None:
        raise Conflict(NAME_TAKEN)


async def _write_role(session: AsyncSession, role: Role) -> None:
    """Flush a new or renamed role; a name taken meanwhile by a concurrent change is a 409."""
    try:
        async with session.begin_nested():
            session.add(role)
            await session.flush()
    except IntegrityError as exc:
        if "name_key" not in str(exc.orig) and "uq_roles_realm_id_name" not in str(exc.orig):
            raise
        raise Conflict(NAME_TAKEN) from exc


async def get_role(session: AsyncSession, realm_id: str, role_id: str) -> Role:
    role = await session.get(Role, role_id)
    if role is None or role.realm_id != realm_id:
        raise NotFound("No such role.")
    return role


async def list_roles(
    session: AsyncSession,
    realm_id: str,
    *,
    q: str | None = None,
    boundary: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[Role]:
    query = select(Role).where(col(Role.realm_id) == realm_id)
    if q:
        query = query.where(col(Role.name).ilike(like(q)))
    if boundary:
        if boundary not in ROLE_BOUNDARIES:
            raise ValidationFailed(
                "The request is not valid.", issues=[Issue("query:boundary", "invalid", "realm or organization")]
            )
        query = query.where(col(Role.boundary) == boundary)
    return await keyset_page(session, query, col(Role.id), cursor=cursor, limit=limit)


async def all_roles(session: AsyncSession, realm_id: str) -> list[Role]:
    """Every role of the realm by name (for pickers: realms hold a handful of roles)."""
    result = await session.execute(
        select(Role).where(col(Role.realm_id) == realm_id).order_by(col(Role.name)).limit(1000)
    )
    return list(result.scalars().all())


@needs_permission("realm.roles.write")
async def create_role(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    *,
    name: str,
    permissions: Sequence[str],
    boundary: str,
    requires_approval: bool = False,
    description: str = "",
) -> Role:
    """A custom role; its creator must hold every permission put in it (realm-wide)."""
    unique, issues = _permission_issues(permissions)
    issues = text_issues("/name", name, maximum=ROLE_NAME_MAX, name=True) + issues
    issues += text_issues("/description", description, minimum=0, maximum=DESCRIPTION_MAX)
    if boundary not in ROLE_BOUNDARIES:
        issues.append(Issue("/boundary", "invalid", "boundary is realm or organization"))
    raise_issues(issues)
    _require_role_ceiling(authority, unique, "create")
    name = normalize(name)
    await _refuse_taken_name(session, actor.realm_id, name)
    role = Role(
        id=new_id("rol"),
        realm_id=actor.realm_id,
        name=name,
        description=description.strip(),
        permissions=unique,
        boundary=boundary,
        requires_approval=requires_approval,
    )
    await _write_role(session, role)
    await record_audit(
        session,
        actor,
        "role.created",
        category="authorization",
        subject_type="role",
        subject_id=role.id,
        details={"name": name, "permissions": unique, "boundary": boundary, "requires_approval": requires_approval},
    )
    return role


@needs_permission("realm.roles.write")
async def update_role(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    role_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    permissions: Sequence[str] | None = None,
    requires_approval: bool | None = None,
) -> Role:
    """Change a custom role. Built-in roles never change; the boundary is fixed at creation."""
    role = await get_role(session, actor.realm_id, role_id)
    issues = text_issues("/name", name, maximum=ROLE_NAME_MAX, name=True)
    issues += text_issues("/description", description, minimum=0, maximum=DESCRIPTION_MAX)
    unique: list[str] | None = None
    if permissions is not None:
        unique, permission_issues = _permission_issues(permissions)
        issues += permission_issues
    raise_issues(issues)
    if role.builtin:
        raise Conflict("Built-in roles cannot be changed.", code="builtin_role")
    # Whoever changes a role must be able to hold it before and after the change.
    _require_role_ceiling(authority, list(role.permissions) + (unique or []), "change")
    changed: list[str] = []
    if name is not None and normalize(name) != role.name:
        await _refuse_taken_name(session, actor.realm_id, normalize(name), other_than=role.id)
        role.name = normalize(name)
        changed.append("name")
    if description is not None and description.strip() != role.description:
        role.description = description.strip()
        changed.append("description")
    if unique is not None and unique != list(role.permissions):
        role.permissions = unique
        role.permissions_set_by, role.permissions_set_at = actor.principal_id, SYSTEM_CLOCK.now()
        changed.append("permissions")
    if requires_approval is not None and requires_approval != role.requires_approval:
        role.requires_approval = requires_approval
        changed.append("requires_approval")
    if changed:
        await _write_role(session, role)
        await record_audit(
            session,
            actor,
            "role.updated",
            category="authorization",
            subject_type="role",
            subject_id=role.id,
            details={"changed": changed, "permissions": list(role.permissions)},
        )
    return role


@needs_permission("realm.roles.write")
async def delete_role(session: AsyncSession, actor: Actor, authority: Authority, role_id: str) -> None:
    """Delete a custom role nobody holds (revoke its assignments and group grants first).

    The callers first refuse a role a published workflow names (``workflows.refuse_if_referenced``).
    """
    role = await get_role(session, actor.realm_id, role_id)
    if role.builtin:
        raise Conflict("Built-in roles cannot be changed.", code="builtin_role")
    _require_role_ceiling(authority, role.permissions, "delete")
    held = await session.scalar(
        select(func.count()).select_from(RoleAssignment).where(col(RoleAssignment.role_id) == role.id)
    )
    granted = await session.scalar(select(func.count()).select_from(GroupRole).where(col(GroupRole.role_id) == role.id))
    if held or granted:
        raise Conflict(
            f"The role is in use ({held or 0} assignment(s), {granted or 0} group(s)); remove those first.",
            code="role_in_use",
        )
    await session.delete(role)
    await session.flush()
    await record_audit(
        session,
        actor,
        "role.deleted",
        category="authorization",
        subject_type="role",
        subject_id=role.id,
        details={"name": role.name},
    )
