"""The pickers' search: a page of the realm's roles, groups, users, organizations or subscriptions.

What the step builder's pickers list as someone types (``cockpit/pages/pickers.py``): directory
objects only, so it lives with the directory. Naming ids (workflows and runs among them) is
``engine/runs/name_lookup.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.input_checks import like
from engine.directory.models import Group, Organization, Role, User, WebhookSubscription


@dataclass(frozen=True)
class Candidate:
    """One answer of a picker: the id it writes, the name it shows, a detail that tells it apart."""

    id: str
    name: str
    detail: str


PICKER_KINDS = ("role", "group", "user", "organization", "subscription")


async def search_directory(
    session: AsyncSession, realm_id: str, kind: str, q: str, *, offset: int = 0, limit: int = 20
) -> tuple[list[Candidate], bool]:
    """One page of the realm's objects of ``kind`` whose name (or email, or id) contains ``q``.

    Answers ``(candidates, more)``: ``more`` says a next page exists. Ordered by name, so the
    same query pages stably; one statement, ``limit + 1`` rows.
    """
    if kind not in PICKER_KINDS:
        raise KeyError(kind)
    pattern = like(q.strip()) if q.strip() else None
    query: Any
    if kind == "role":
        query = select(col(Role.id), col(Role.name), col(Role.boundary)).where(col(Role.realm_id) == realm_id)
        if pattern:
            query = query.where(or_(col(Role.name).ilike(pattern, escape="\\"), col(Role.id) == q.strip()))
        query = query.order_by(col(Role.name), col(Role.id))
    elif kind == "group":
        query = (
            select(col(Group.id), col(Group.name), col(Organization.name))
            .join(Organization, col(Organization.id) == col(Group.organization_id))
            .where(col(Group.realm_id) == realm_id)
        )
        if pattern:
            query = query.where(or_(col(Group.name).ilike(pattern, escape="\\"), col(Group.id) == q.strip()))
        query = query.order_by(col(Group.name), col(Group.id))
    elif kind == "user":
        query = select(col(User.id), col(User.display_name), col(User.email)).where(col(User.realm_id) == realm_id)
        if pattern:
            query = query.where(
                or_(
                    col(User.display_name).ilike(pattern, escape="\\"),
                    col(User.email).ilike(pattern, escape="\\"),
                    col(User.id) == q.strip(),
                )
            )
        # In id order, not name order: a common match is found by walking (realm_id, id) until a
        # page is full, a rare one through the trigram indexes. Ordering by name would sort every
        # match of a common query, or walk far for a rare one that sorts late. Each page is then
        # shown by name.
        query = query.order_by(col(User.id))
    elif kind == "organization":
        query = select(col(Organization.id), col(Organization.name), col(Organization.state)).where(
            col(Organization.realm_id) == realm_id
        )
        if pattern:
            query = query.where(
                or_(col(Organization.name).ilike(pattern, escape="\\"), col(Organization.id) == q.strip())
            )
        query = query.order_by(col(Organization.name), col(Organization.id))
    else:
        query = select(
            col(WebhookSubscription.id), col(WebhookSubscription.destination), col(WebhookSubscription.state)
        ).where(col(WebhookSubscription.realm_id) == realm_id, col(WebhookSubscription.state) != "deleted")
        if pattern:
            query = query.where(
                or_(
                    col(WebhookSubscription.destination).ilike(pattern, escape="\\"),
                    col(WebhookSubscription.id) == q.strip(),
                )
            )
        query = query.order_by(col(WebhookSubscription.destination), col(WebhookSubscription.id))
    rows = (await session.execute(query.offset(max(offset, 0)).limit(limit + 1))).all()
    candidates = [Candidate(str(r[0]), str(r[1]), str(r[2] or "")) for r in rows[:limit]]
    if kind == "user":
        candidates.sort(key=lambda c: (c.name.casefold(), c.id))
    return candidates, len(rows) > limit
