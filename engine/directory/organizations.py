"""Organizations and their memberships.

Adding and removing a member write the outbox events ``organization.membership.added`` and
``.removed`` (they can start workflows). Groups: engine/directory/groups.py.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models, rules
from engine.directory.admins import is_admin, keeping_an_admin
from engine.directory.audit import Actor, emit_event, record_audit
from engine.directory.authz import Authority, needs_permission, require_authority_over
from engine.directory.group_grants import check_group_grant
from engine.directory.input_checks import like, raise_issues, text_issues
from engine.directory.models import Group, GroupMember, Membership, Organization, User
from engine.platform.errors import Conflict, Issue, NotFound
from engine.platform.ids import new_id
from engine.platform.names import normalize
from engine.platform.pagination import Page, keyset_page

ORGANIZATION_STATES = ("active", "inactive")
NAME_MAX = 200


class Unchanged(enum.Enum):
    """Marks an optional argument that was not given (``None`` is a value: no parent)."""

    UNCHANGED = "unchanged"


UNCHANGED = Unchanged.UNCHANGED


def organization_view(org: Organization) -> read_models.Organization:
    return read_models.Organization(id=org.id, name=org.name, state=org.state, created_at=org.created_at)


async def get_organization(session: AsyncSession, realm_id: str, org_id: str) -> Organization:
    org = await session.get(Organization, org_id)
    if org is None or org.realm_id != realm_id:
        raise NotFound("No such organization.")
    return org


async def _org_name_taken(session: AsyncSession, realm_id: str, name: str, other_than: str | None = None) -> bool:
    query = (
        select(func.count())
        .select_from(Organization)
        .where(col(Organization.realm_id) == realm_id, col(Organization.name) == name)
    )
    if other_than:
        query = query.where(col(Organization.id) != other_than)
    return bool(await session.scalar(query))


def _state_issues(path: str, state: str | None) -> list[Issue]:
    if state is not None and state not in ORGANIZATION_STATES:
        return [Issue(path, "invalid", "state is active or inactive")]
    return []


async def create_organization(session: AsyncSession, actor: Actor, *, name: str) -> Organization:
    raise_issues(text_issues("/name", name, maximum=NAME_MAX, name=True))
    name = normalize(name)
    if await _org_name_taken(session, actor.realm_id, name):
        raise Conflict("An organization with this name already exists in the realm.")
    org = Organization(id=new_id("org"), realm_id=actor.realm_id, name=name)
    session.add(org)
    await session.flush()
    await record_audit(
        session, actor, "organization.created", subject_type="organization", subject_id=org.id, details={"name": name}
    )
    return org


async def list_organizations(
    session: AsyncSession,
    realm_id: str,
    *,
    q: str | None = None,
    state: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[Organization]:
    query = select(Organization).where(col(Organization.realm_id) == realm_id)
    if q:
        query = query.where(col(Organization.name).ilike(like(q)))
    if state:
        raise_issues(_state_issues("query:state", state))
        query = query.where(col(Organization.state) == state)
    return await keyset_page(session, query, col(Organization.id), cursor=cursor, limit=limit)


async def update_organization(
    session: AsyncSession, actor: Actor, org_id: str, *, name: str | None = None, state: str | None = None
) -> Organization:
    raise_issues(text_issues("/name", name, maximum=NAME_MAX, name=True) + _state_issues("/state", state))
    org = await get_organization(session, actor.realm_id, org_id)
    changed: dict[str, Any] = {}
    if name is not None and normalize(name) != org.name:
        if await _org_name_taken(session, actor.realm_id, normalize(name), other_than=org.id):
            raise Conflict("An organization with this name already exists in the realm.")
        org.name = normalize(name)
        changed["name"] = org.name
    if state is not None and state != org.state:
        org.state = state
        changed["state"] = state
    if changed:
        await session.flush()
        await record_audit(
            session, actor, "organization.updated", subject_type="organization", subject_id=org.id, details=changed
        )
    return org


def membership_view(membership: Membership) -> read_models.OrganizationMembership:
    return read_models.OrganizationMembership(
        id=membership.id,
        organization_id=membership.organization_id,
        user_id=membership.user_id,
        created_at=membership.created_at,
    )


def member_view(membership: Membership, user: User) -> read_models.OrganizationMember:
    """A membership with the member's name and status, as lists show it."""
    return read_models.OrganizationMember(
        id=membership.id,
        organization_id=membership.organization_id,
        user_id=membership.user_id,
        created_at=membership.created_at,
        email=user.email,
        display_name=user.display_name,
        status=user.status,
    )


async def user_in_realm(session: AsyncSession, realm_id: str, user_id: str) -> User:
    user = await session.get(User, user_id)
    if user is None or user.realm_id != realm_id:
        raise NotFound("No such user.")
    return user


async def _membership(session: AsyncSession, org_id: str, user_id: str) -> Membership | None:
    result = await session.execute(
        select(Membership).where(col(Membership.organization_id) == org_id, col(Membership.user_id) == user_id)
    )
    return result.scalar_one_or_none()


@needs_permission("org.members.write", organization="org_id")
async def add_member(
    session: AsyncSession, actor: Actor, org_id: str, user_id: str, *, authority: Authority | None
) -> Membership:
    """Make a user a member; with the caller's ``authority``, the caller must hold all the user holds."""
    org = await get_organization(session, actor.realm_id, org_id)
    user = await user_in_realm(session, actor.realm_id, user_id)
    await require_authority_over(session, actor.realm_id, authority, "user", user.id, what="change their memberships")
    if await _membership(session, org.id, user.id):
        raise Conflict("The user is already a member of this organization.", code="already_a_member")
    membership = Membership(id=new_id("mem"), realm_id=actor.realm_id, organization_id=org.id, user_id=user.id)
    session.add(membership)
    await session.flush()
    payload = {"membership_id": membership.id, "organization_id": org.id, "user_id": user.id}
    await emit_event(
        session, actor, "organization.membership.added", subject_id=user.id, organization_id=org.id, payload=payload
    )
    await record_audit(
        session, actor, "organization.membership.added", subject_type="user", subject_id=user.id, details=payload
    )
    return membership


async def list_members(
    session: AsyncSession, realm_id: str, org_id: str, *, cursor: str | None = None, limit: int | None = None
) -> Page[tuple[Membership, User]]:
    org = await get_organization(session, realm_id, org_id)
    query = (
        select(Membership, User)
        .join(User, col(User.id) == col(Membership.user_id))
        .where(col(Membership.realm_id) == realm_id, col(Membership.organization_id) == org.id)
    )
    return await keyset_page(session, query, col(Membership.id), cursor=cursor, limit=limit)


@needs_permission("org.members.write", organization="org_id")
async def remove_member(
    session: AsyncSession, actor: Actor, org_id: str, user_id: str, *, authority: Authority | None
) -> None:
    """Remove a membership, and with it the user's places in the organization's groups.

    Leaving a group takes away the roles it grants, so with the caller's ``authority`` the
    removal needs the ceiling for those roles too, exactly as removing from one group does.
    """
    org = await get_organization(session, actor.realm_id, org_id)
    membership = await _membership(session, org.id, user_id)
    rules.check_membership_removal(membership is not None and membership.realm_id == actor.realm_id)
    assert membership is not None
    if authority is not None:
        joined = await session.execute(
            select(Group)
            .join(GroupMember, col(GroupMember.group_id) == col(Group.id))
            .where(col(GroupMember.user_id) == user_id, col(Group.organization_id) == org.id)
        )
        for group in joined.scalars().all():
            await check_group_grant(session, authority, group, "revoke")
    await require_authority_over(session, actor.realm_id, authority, "user", user_id, what="change their memberships")
    await apply_member_removal(session, actor, org.id, membership, user_id)


async def apply_member_removal(
    session: AsyncSession, actor: Actor, org_id: str, membership: Membership, user_id: str
) -> None:
    """Take a user out of an organization and its groups, as every rule already allowed; with the
    audit events of each group left and of the membership, and the outbox event. Whoever decided
    it (an administrator or a run), the realm keeps an active administrator (409 ``last_admin``)."""
    async with keeping_an_admin(session, actor.realm_id, check=await is_admin(session, actor.realm_id, user_id)):
        left = await session.execute(
            delete(GroupMember)
            .where(
                col(GroupMember.user_id) == user_id,
                col(GroupMember.group_id).in_(select(col(Group.id)).where(col(Group.organization_id) == org_id)),
            )
            .returning(col(GroupMember.group_id))
        )
        left_groups = list(left.scalars().all())
    for group_id in left_groups:
        await record_audit(
            session,
            actor,
            "group.member_removed",
            subject_type="user",
            subject_id=user_id,
            details={"group_id": group_id, "organization_id": org_id, "reason": "membership_removed"},
        )
    await session.delete(membership)
    await session.flush()
    payload = {"membership_id": membership.id, "organization_id": org_id, "user_id": user_id}
    await emit_event(
        session, actor, "organization.membership.removed", subject_id=user_id, organization_id=org_id, payload=payload
    )
    await record_audit(
        session, actor, "organization.membership.removed", subject_type="user", subject_id=user_id, details=payload
    )


async def is_member(session: AsyncSession, org_id: str, user_id: str) -> bool:
    return await _membership(session, org_id, user_id) is not None


async def organization_names(session: AsyncSession, realm_id: str, ids: Sequence[str | None]) -> dict[str, str]:
    """Names of the organizations among ``ids`` (to show scopes by name)."""
    wanted = list({i for i in ids if i})
    if not wanted:
        return {}
    rows = await session.execute(
        select(col(Organization.id), col(Organization.name)).where(
            col(Organization.realm_id) == realm_id, col(Organization.id).in_(wanted)
        )
    )
    return {oid: name for oid, name in rows}
