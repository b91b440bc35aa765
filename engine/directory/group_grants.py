"""The roles a group grants (its own and its ancestors') and the grant ceiling a change of its
members passes: putting someone in a group, or taking them out, is checked like assigning or
revoking every role it gives.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import rules
from engine.directory.authz import Authority
from engine.directory.models import Group, GroupRole, Role

_ANCESTORS_SQL = text(
    """
    WITH RECURSIVE chain(id, parent_id, depth) AS (
        SELECT id, parent_id, 0 FROM groups WHERE id = :start
        UNION ALL
        SELECT g.id, g.parent_id, c.depth + 1 FROM groups g JOIN chain c ON g.id = c.parent_id
         WHERE c.depth < 1000
    )
    SELECT id FROM chain ORDER BY depth
    """
)


async def lineage(session: AsyncSession, group_id: str) -> list[str]:
    """The group and its ancestors, nearest first."""
    return list((await session.execute(_ANCESTORS_SQL, {"start": group_id})).scalars().all())


async def roles_of_groups(session: AsyncSession, group_ids: Sequence[str]) -> list[Role]:
    if not group_ids:
        return []
    result = await session.execute(
        select(Role)
        .join(GroupRole, col(GroupRole.role_id) == col(Role.id))
        .where(col(GroupRole.group_id).in_(list(group_ids)))
        .distinct()
    )
    return list(result.scalars().all())


async def inherited_roles(session: AsyncSession, group: Group) -> list[Role]:
    """Every role a member of ``group`` holds through it (its own and its ancestors')."""
    return await roles_of_groups(session, await lineage(session, group.id))


async def check_group_grant(session: AsyncSession, authority: Authority, group: Group, verb: str = "grant") -> None:
    """The grant ceiling for every role that membership of ``group`` gives (ancestors included)."""
    roles = await inherited_roles(session, group)
    rules.check_group_ceiling(
        authority, [(r.name, r.permissions, r.boundary) for r in roles], group.organization_id, verb
    )
