"""Groups of an organization, their members and the roles they grant.

Groups belong to one organization, may have a parent in the same organization, and grant roles:
a member of a group holds the roles of the group and of its ancestors. Putting someone in a group
is therefore a grant, and passes the grant ceiling for every role it gives them; so does taking
them out, like revoking an assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models, rules
from engine.directory.admins import holds_admin_role, is_admin, keeping_an_admin
from engine.directory.audit import Actor, record_audit
from engine.directory.authz import Authority, needs_permission, require_authority_over
from engine.directory.group_grants import check_group_grant, inherited_roles, lineage, roles_of_groups
from engine.directory.input_checks import raise_issues, text_issues
from engine.directory.models import Group, GroupMember, GroupRole, Organization, Role, User
from engine.directory.organizations import NAME_MAX, UNCHANGED, Unchanged, get_organization, is_member, user_in_realm
from engine.directory.roles import require_ceiling
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Issue, NotFound
from engine.platform.ids import new_id
from engine.platform.names import normalize
from engine.platform.pagination import Page, keyset_page


def group_view(group: Group, role_ids: Sequence[str]) -> read_models.Group:
    return read_models.Group(
        id=group.id,
        organization_id=group.organization_id,
        name=group.name,
        parent_id=group.parent_id,
        role_ids=list(role_ids),
        created_at=group.created_at,
    )


def group_membership_view(member: GroupMember) -> read_models.GroupMembership:
    return read_models.GroupMembership(
        group_id=member.group_id,
        user_id=member.user_id,
        added_by=member.added_by,
        source_run_id=member.source_run_id,
        created_at=member.created_at,
    )


def group_member_view(member: GroupMember, user: User) -> read_models.GroupMember:
    """A group membership with the member's name and status, as lists show it."""
    return read_models.GroupMember(
        group_id=member.group_id,
        user_id=member.user_id,
        added_by=member.added_by,
        source_run_id=member.source_run_id,
        created_at=member.created_at,
        email=user.email,
        display_name=user.display_name,
        status=user.status,
    )


async def get_group(session: AsyncSession, realm_id: str, org_id: str, group_id: str) -> Group:
    group = await session.get(Group, group_id)
    if group is None or group.realm_id != realm_id or group.organization_id != org_id:
        raise NotFound("No such group in this organization.")
    return group


async def group_role_ids(session: AsyncSession, group_ids: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {gid: [] for gid in group_ids}
    if group_ids:
        rows = await session.execute(
            select(col(GroupRole.group_id), col(GroupRole.role_id))
            .where(col(GroupRole.group_id).in_(list(group_ids)))
            .order_by(col(GroupRole.role_id))
        )
        for gid, rid in rows:
            out[gid].append(rid)
    return out


async def _roles_by_id(session: AsyncSession, role_ids: Sequence[str]) -> list[Role]:
    if not role_ids:
        return []
    result = await session.execute(select(Role).where(col(Role.id).in_(list(role_ids))))
    return list(result.scalars().all())


async def _group_name_taken(session: AsyncSession, org_id: str, name: str, other_than: str | None = None) -> bool:
    query = select(func.count()).select_from(Group).where(col(Group.organization_id) == org_id, col(Group.name) == name)
    if other_than:
        query = query.where(col(Group.id) != other_than)
    return bool(await session.scalar(query))


async def _resolve_parent(
    session: AsyncSession, realm_id: str, org_id: str, parent_id: str | None, issues: list[Issue]
) -> Group | None:
    if not parent_id:
        return None
    parent = await session.get(Group, parent_id)
    if parent is None or parent.realm_id != realm_id or parent.organization_id != org_id:
        issues.append(Issue("/parent_id", "not_in_organization", "must be a group of the same organization"))
        return None
    return parent


async def _resolve_roles(
    session: AsyncSession, realm_id: str, role_ids: Sequence[str] | None, issues: list[Issue]
) -> list[Role]:
    if not role_ids:
        return []
    found = {
        role.id: role
        for role in (
            await session.execute(select(Role).where(col(Role.realm_id) == realm_id, col(Role.id).in_(list(role_ids))))
        ).scalars()
    }
    roles: list[Role] = []
    for index, role_id in enumerate(role_ids):
        role = found.get(role_id)
        if role is None:
            issues.append(Issue(f"/role_ids/{index}", "not_found", "is not a role of this realm"))
        elif role not in roles:
            roles.append(role)
    return roles


async def _set_roles(session: AsyncSession, actor: Actor, group: Group, roles: Sequence[Role]) -> None:
    """The group grants exactly ``roles``: the ones it keeps keep who granted them and when."""
    wanted = [role.id for role in roles]
    await session.execute(
        delete(GroupRole).where(col(GroupRole.group_id) == group.id, col(GroupRole.role_id).not_in(wanted))
    )
    held = set((await group_role_ids(session, [group.id]))[group.id])
    for role_id in wanted:
        if role_id not in held:
            session.add(GroupRole(group_id=group.id, role_id=role_id, granted_by=actor.principal_id))
    await session.flush()


@needs_permission("org.groups.write", organization="org_id")
async def create_group(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    org_id: str,
    *,
    name: str,
    parent_id: str | None = None,
    role_ids: Sequence[str] | None = None,
) -> tuple[Group, list[str]]:
    """A group of the organization; granting roles through it needs the ceiling for each role."""
    org = await get_organization(session, actor.realm_id, org_id)
    issues = text_issues("/name", name, maximum=NAME_MAX, name=True)
    parent = await _resolve_parent(session, actor.realm_id, org.id, parent_id, issues)
    roles = await _resolve_roles(session, actor.realm_id, role_ids, issues)
    raise_issues(issues)
    for role in roles:
        require_ceiling(authority, role, org.id, "grant")
    name = normalize(name)
    if await _group_name_taken(session, org.id, name):
        raise Conflict("A group with this name already exists in the organization.")
    group = Group(
        id=new_id("grp"),
        realm_id=actor.realm_id,
        organization_id=org.id,
        parent_id=parent.id if parent else None,
        name=name,
    )
    session.add(group)
    await session.flush()
    await _set_roles(session, actor, group, roles)
    role_list = [r.id for r in roles]
    await record_audit(
        session,
        actor,
        "group.created",
        subject_type="group",
        subject_id=group.id,
        details={"organization_id": org.id, "name": name, "parent_id": group.parent_id, "role_ids": role_list},
    )
    return group, role_list


async def _lock_group_tree(session: AsyncSession, realm_id: str, org_id: str) -> None:
    """Hold the organization's group tree until this transaction ends (``FOR NO KEY UPDATE``: new
    memberships and groups, which only take a key share of the row, are not held up)."""
    await session.execute(
        select(col(Organization.id))
        .where(col(Organization.id) == org_id, col(Organization.realm_id) == realm_id)
        .with_for_update(key_share=True)  # renders FOR NO KEY UPDATE
    )


@needs_permission("org.groups.write", organization="org_id")
async def update_group(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    org_id: str,
    group_id: str,
    *,
    name: str | None = None,
    parent_id: str | Unchanged | None = UNCHANGED,
    role_ids: Sequence[str] | None = None,
) -> tuple[Group, list[str]]:
    """Rename, move (no cycles) or change the roles a group grants.

    A new role, or a new parent whose roles the members would inherit, passes the ceiling.

    Moves under a parent are serialized per organization (groups only have parents in their own
    organization): the organization's row is locked before the cycle check, so two moves made at
    once (A under B, B under A) are checked one after the other and the second sees the first.
    """
    if not isinstance(parent_id, Unchanged) and parent_id:
        await _lock_group_tree(session, actor.realm_id, org_id)
    group = await get_group(session, actor.realm_id, org_id, group_id)
    issues = text_issues("/name", name, maximum=NAME_MAX, name=True)
    parent: Group | None = None
    if not isinstance(parent_id, Unchanged) and parent_id:
        parent = await _resolve_parent(session, actor.realm_id, org_id, parent_id, issues)
        if parent is not None and group.id in await lineage(session, parent.id):
            issues.append(Issue("/parent_id", "cycle", "a group cannot sit under itself or one of its descendants"))
    roles = await _resolve_roles(session, actor.realm_id, role_ids, issues) if role_ids is not None else None
    raise_issues(issues)
    # Every check comes before any write: a refused change changes nothing.
    current_roles = (await group_role_ids(session, [group.id]))[group.id]
    new_name = normalize(name) if name is not None and normalize(name) != group.name else None
    if new_name and await _group_name_taken(session, group.organization_id, new_name, other_than=group.id):
        raise Conflict("A group with this name already exists in the organization.")
    roles_change = roles is not None and sorted(r.id for r in roles) != sorted(current_roles)
    taken: list[str] = []  # roles the group's members stop holding through it
    if roles is not None and roles_change:
        kept = {r.id for r in roles}
        for role in roles:
            if role.id not in current_roles:
                require_ceiling(authority, role, group.organization_id, "grant")
        for role in await _roles_by_id(session, [r for r in current_roles if r not in kept]):
            require_ceiling(authority, role, group.organization_id, "revoke")
            taken.append(role.id)
    new_parent_id = parent.id if parent else None
    moves = not isinstance(parent_id, Unchanged) and new_parent_id != group.parent_id
    if moves:
        # Members gain the roles above the new parent and lose those above the old one.
        if parent is not None:
            for role in await inherited_roles(session, parent):
                require_ceiling(authority, role, group.organization_id, "grant")
        if group.parent_id is not None:
            for role in await roles_of_groups(session, await lineage(session, group.parent_id)):
                require_ceiling(authority, role, group.organization_id, "revoke")
                taken.append(role.id)
    changed: dict[str, Any] = {}
    # Fewer roles, or another parent, can take realm-admin away from the group's members.
    check = await holds_admin_role(session, taken)
    async with keeping_an_admin(session, actor.realm_id, check=check, reload=[group]):
        if roles is not None and roles_change:
            await _set_roles(session, actor, group, roles)
            changed["role_ids"] = [r.id for r in roles]
        if moves:
            group.parent_id = new_parent_id
            group.parent_set_by, group.parent_set_at = actor.principal_id, SYSTEM_CLOCK.now()
            changed["parent_id"] = new_parent_id
        if new_name:
            group.name = new_name
            changed["name"] = new_name
        await session.flush()
    if changed:
        await record_audit(
            session,
            actor,
            "group.updated",
            subject_type="group",
            subject_id=group.id,
            details={"organization_id": group.organization_id} | changed,
        )
    return group, (await group_role_ids(session, [group.id]))[group.id]


async def list_groups(
    session: AsyncSession, realm_id: str, org_id: str, *, cursor: str | None = None, limit: int | None = None
) -> Page[Group]:
    org = await get_organization(session, realm_id, org_id)
    query = select(Group).where(col(Group.realm_id) == realm_id, col(Group.organization_id) == org.id)
    return await keyset_page(session, query, col(Group.id), cursor=cursor, limit=limit)


@needs_permission("org.groups.write", organization="org_id")
async def add_group_member(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    org_id: str,
    group_id: str,
    user_id: str,
    *,
    source_run_id: str | None = None,
) -> GroupMember:
    group = await get_group(session, actor.realm_id, org_id, group_id)
    user = await user_in_realm(session, actor.realm_id, user_id)
    rules.check_group_join(
        await is_member(session, group.organization_id, user.id),
        await session.get(GroupMember, (group.id, user.id)) is not None,
    )
    await check_group_grant(session, authority, group, "grant")
    await require_authority_over(session, actor.realm_id, authority, "user", user.id, what="change their groups")
    return await apply_group_join(session, actor, group.id, group.organization_id, user.id, source_run_id=source_run_id)


async def apply_group_join(
    session: AsyncSession, actor: Actor, group_id: str, organization_id: str, user_id: str, *, source_run_id: str | None
) -> GroupMember:
    """Put a user in a group, as every rule already allowed, with its ``group.member_added`` audit event."""
    member = GroupMember(
        group_id=group_id, user_id=user_id, realm_id=actor.realm_id, added_by=actor.id, source_run_id=source_run_id
    )
    session.add(member)
    await session.flush()
    await record_audit(
        session,
        actor,
        "group.member_added",
        subject_type="user",
        subject_id=user_id,
        details=rules.group_member_details(group_id, organization_id),
    )
    return member


async def list_group_members(
    session: AsyncSession,
    realm_id: str,
    org_id: str,
    group_id: str,
    *,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[tuple[User, GroupMember]]:
    """Members ordered by user id (the cursor is a user id)."""
    group = await get_group(session, realm_id, org_id, group_id)
    query = (
        select(User, GroupMember)
        .join(GroupMember, col(GroupMember.user_id) == col(User.id))
        .where(col(GroupMember.realm_id) == realm_id, col(GroupMember.group_id) == group.id)
    )
    return await keyset_page(session, query, col(User.id), cursor=cursor, limit=limit)


@needs_permission("org.groups.write", organization="org_id")
async def remove_group_member(
    session: AsyncSession, actor: Actor, authority: Authority, org_id: str, group_id: str, user_id: str
) -> None:
    group = await get_group(session, actor.realm_id, org_id, group_id)
    member = await session.get(GroupMember, (group.id, user_id))
    rules.check_group_leave(member is not None and member.realm_id == actor.realm_id)
    assert member is not None
    await check_group_grant(session, authority, group, "revoke")
    await require_authority_over(session, actor.realm_id, authority, "user", user_id, what="change their groups")
    await apply_group_leave(session, actor, member, group.organization_id)


async def apply_group_leave(session: AsyncSession, actor: Actor, member: GroupMember, organization_id: str) -> None:
    """Take a user out of a group, as every rule already allowed, with its ``group.member_removed``
    audit event. Whoever decided it, the realm keeps an active administrator (409 ``last_admin``)."""
    async with keeping_an_admin(
        session, member.realm_id, check=await is_admin(session, member.realm_id, member.user_id)
    ):
        await session.delete(member)
        await session.flush()
    await record_audit(
        session,
        actor,
        "group.member_removed",
        subject_type="user",
        subject_id=member.user_id,
        details=rules.group_member_details(member.group_id, organization_id),
    )


async def all_groups(session: AsyncSession, realm_id: str, org_id: str) -> list[Group]:
    """Every group of one organization by name (for pickers)."""
    result = await session.execute(
        select(Group)
        .where(col(Group.realm_id) == realm_id, col(Group.organization_id) == org_id)
        .order_by(col(Group.name))
        .limit(1000)
    )
    return list(result.scalars().all())
