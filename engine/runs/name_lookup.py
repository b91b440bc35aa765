"""Names for ids: what a page shows beside every ``usr_…``, ``rol_…``, ``grp_…`` it prints.

A page collects the ids it is about to show and asks once: :func:`lookup_names` answers with one
statement (a ``UNION ALL`` over the directory tables, each arm filtered on the realm and its
own id prefix), so a page's cost does not grow with the number of ids it names. Ids of another
realm, and ids that no longer exist, are simply absent from the answer: the caller shows them
as they are. The search behind the step builder's pickers (:func:`search_directory`) is here
too, for the same reason: one place knows which table holds which kind of object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, func, literal, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased
from sqlalchemy.sql import Select
from sqlmodel import col

from engine.directory.models import Group, Organization, Role, ServicePrincipal, User, WebhookSubscription
from engine.runs.approval_models import WorkflowApproval
from engine.runs.models import WorkflowRun
from engine.runs.outcome import run_title
from engine.workflows.models import Workflow

# Prefix → kind. Realms are addressed by slug and never shown by id.
KINDS: dict[str, str] = {
    "usr": "user",
    "spn": "service_principal",
    "org": "organization",
    "rol": "role",
    "grp": "group",
    "whk": "subscription",
    "wfl": "workflow",
    "wrn": "run",
    "wap": "approval",
}
ID_PATTERN = re.compile(r"\b(?:usr|spn|org|rol|grp|whk|wfl|wrn|wap)_[0-9a-z]{26}\b")
MAX_IDS = 2000  # what one page can name; more are left unresolved rather than slow the page


@dataclass(frozen=True)
class NamedObject:
    """What an id names: its kind, a name a person recognises, and (for groups) its organization."""

    id: str
    kind: str
    name: str
    parent_id: str | None = None


def ids_in(value: object) -> list[str]:
    """Every object id inside a JSON value or a text, in order of appearance, each once."""
    found: dict[str, None] = {}

    def walk(item: object) -> None:
        if isinstance(item, str):
            for match in ID_PATTERN.findall(item):
                found.setdefault(match, None)
        elif isinstance(item, dict):
            for key, child in item.items():
                walk(key)
                walk(child)
        elif isinstance(item, (list, tuple)):
            for child in item:
                walk(child)

    walk(value)
    return list(found)


def _wanted(ids: Iterable[str | None]) -> dict[str, list[str]]:
    by_kind: dict[str, list[str]] = {}
    seen: set[str] = set()
    for item in ids:
        if not item or item in seen or len(seen) >= MAX_IDS:
            continue
        prefix = item.split("_", 1)[0]
        if prefix in KINDS and ID_PATTERN.fullmatch(item):
            seen.add(item)
            by_kind.setdefault(prefix, []).append(item)
    return by_kind


async def lookup_names(session: AsyncSession, realm_id: str, ids: Iterable[str | None]) -> dict[str, NamedObject]:
    """The objects of this realm among ``ids``, in one statement (none when no id is known)."""
    by_kind = _wanted(ids)
    if not by_kind:
        return {}
    none = literal(None, String)
    arms: list[Select[tuple[str, str, str, str | None]]] = []

    def arm(prefix: str, id_col: object, name: object, parent: object, realm_col: object, *extra: object) -> None:
        if prefix not in by_kind:
            return
        query = select(
            id_col.label("id"),  # type: ignore[attr-defined]
            literal(KINDS[prefix], String).label("kind"),
            name.label("name"),  # type: ignore[attr-defined]
            parent.label("parent_id"),  # type: ignore[attr-defined]
        ).where(
            realm_col == realm_id,  # type: ignore[arg-type]
            id_col.in_(bindparam(f"ids_{prefix}", by_kind[prefix], expanding=True)),  # type: ignore[attr-defined]
            *extra,  # type: ignore[arg-type]
        )
        arms.append(query)

    arm("usr", User.id, User.display_name, User.email, User.realm_id)
    arm("spn", ServicePrincipal.id, ServicePrincipal.name, none, ServicePrincipal.realm_id)
    arm("org", Organization.id, Organization.name, none, Organization.realm_id)
    arm("rol", Role.id, Role.name, none, Role.realm_id)
    arm("grp", Group.id, Group.name, Group.organization_id, Group.realm_id)
    arm("whk", WebhookSubscription.id, WebhookSubscription.destination, none, WebhookSubscription.realm_id)
    arm("wfl", Workflow.id, Workflow.name, none, Workflow.realm_id)
    subject = aliased(User)
    if "wrn" in by_kind:
        # A run by its title: its workflow's name, and (in parent_id here) its subject's name.
        arms.append(
            select(
                WorkflowRun.id.label("id"),  # type: ignore[attr-defined]
                literal("run", String).label("kind"),
                Workflow.name.label("name"),  # type: ignore[attr-defined]
                subject.display_name.label("parent_id"),  # type: ignore[attr-defined]
            )
            .join(Workflow, Workflow.id == WorkflowRun.workflow_id)  # type: ignore[arg-type]
            .outerjoin(subject, (subject.id == WorkflowRun.subject_id) & (subject.realm_id == WorkflowRun.realm_id))
            .where(
                WorkflowRun.realm_id == realm_id,  # type: ignore[arg-type]
                WorkflowRun.id.in_(bindparam("ids_wrn", by_kind["wrn"], expanding=True)),  # type: ignore[attr-defined]
            )
        )
    if "wap" in by_kind:
        # An approval by what was asked: the workflow (or the role asked for by hand) and for whom;
        # its page is its run's timeline (the approval's own page is only for its approvers).
        what = func.coalesce(Workflow.name, Role.name, "a deleted workflow")
        arms.append(
            select(
                WorkflowApproval.id.label("id"),  # type: ignore[attr-defined]
                literal("approval", String).label("kind"),
                (
                    literal("approval of ", String)
                    + what
                    + " for "
                    + func.coalesce(subject.display_name, "a former user")
                ).label("name"),
                col(WorkflowApproval.run_id).label("parent_id"),
            )
            .outerjoin(Workflow, Workflow.id == WorkflowApproval.workflow_id)  # type: ignore[arg-type]
            .outerjoin(
                Role,
                (Role.id == WorkflowApproval.request["role_id"].astext)  # type: ignore[index]
                & (Role.realm_id == WorkflowApproval.realm_id),
            )
            .outerjoin(
                subject, (subject.id == WorkflowApproval.subject_id) & (subject.realm_id == WorkflowApproval.realm_id)
            )
            .where(
                WorkflowApproval.realm_id == realm_id,  # type: ignore[arg-type]
                WorkflowApproval.id.in_(bindparam("ids_wap", by_kind["wap"], expanding=True)),  # type: ignore[attr-defined]
            )
        )
    statement = arms[0] if len(arms) == 1 else union_all(*arms)
    rows = (await session.execute(statement)).all()
    out: dict[str, NamedObject] = {}
    for row in rows:
        name = row.name
        parent = row.parent_id
        if row.kind == "user":
            # A user is known by display name and email; the email is what tells two Alexes apart.
            name = f"{row.name} <{row.parent_id}>" if row.name and row.name != row.parent_id else row.parent_id
            parent = None
        elif row.kind == "run":
            name = run_title(row.name, row.parent_id)
            parent = None
        out[row.id] = NamedObject(row.id, row.kind, name, parent)
    return out


@dataclass(frozen=True)
class Candidate:
    """One answer of a picker: the id it writes, the name it shows, a detail that tells it apart."""

    id: str
    name: str
    detail: str


PICKER_KINDS = ("role", "group", "user", "organization", "subscription")


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def search_directory(
    session: AsyncSession, realm_id: str, kind: str, q: str, *, offset: int = 0, limit: int = 20
) -> tuple[list[Candidate], bool]:
    """One page of the realm's objects of ``kind`` whose name (or email, or id) contains ``q``.

    Answers ``(candidates, more)``: ``more`` says a next page exists. Ordered by name, so the
    same query pages stably; one statement, ``limit + 1`` rows.
    """
    if kind not in PICKER_KINDS:
        raise KeyError(kind)
    pattern = _like(q.strip()) if q.strip() else None
    query: Any
    if kind == "role":
        query = select(Role.id, Role.name, Role.boundary).where(Role.realm_id == realm_id)  # type: ignore[call-overload]
        if pattern:
            query = query.where(or_(Role.name.ilike(pattern, escape="\\"), Role.id == q.strip()))  # type: ignore[attr-defined]
        query = query.order_by(Role.name, Role.id)
    elif kind == "group":
        query = (
            select(Group.id, Group.name, Organization.name)  # type: ignore[call-overload]
            .join(Organization, Organization.id == Group.organization_id)
            .where(Group.realm_id == realm_id)
        )
        if pattern:
            query = query.where(or_(Group.name.ilike(pattern, escape="\\"), Group.id == q.strip()))  # type: ignore[attr-defined]
        query = query.order_by(Group.name, Group.id)
    elif kind == "user":
        query = select(User.id, User.display_name, User.email).where(User.realm_id == realm_id)  # type: ignore[call-overload]
        if pattern:
            query = query.where(
                or_(
                    User.display_name.ilike(pattern, escape="\\"),  # type: ignore[attr-defined]
                    User.email.ilike(pattern, escape="\\"),  # type: ignore[attr-defined]
                    User.id == q.strip(),
                )
            )
        # In id order, not name order: a common match is found by walking (realm_id, id) until a
        # page is full, a rare one through the trigram indexes. Ordering by name would sort every
        # match of a common query, or walk far for a rare one that sorts late. Each page is then
        # shown by name.
        query = query.order_by(User.id)
    elif kind == "organization":
        query = select(Organization.id, Organization.name, Organization.state).where(  # type: ignore[call-overload]
            Organization.realm_id == realm_id
        )
        if pattern:
            query = query.where(
                or_(Organization.name.ilike(pattern, escape="\\"), Organization.id == q.strip())  # type: ignore[attr-defined]
            )
        query = query.order_by(Organization.name, Organization.id)
    else:
        query = select(WebhookSubscription.id, WebhookSubscription.destination, WebhookSubscription.state).where(  # type: ignore[call-overload]
            WebhookSubscription.realm_id == realm_id, WebhookSubscription.state != "deleted"
        )
        if pattern:
            query = query.where(
                or_(
                    WebhookSubscription.destination.ilike(pattern, escape="\\"),  # type: ignore[attr-defined]
                    WebhookSubscription.id == q.strip(),
                )
            )
        query = query.order_by(WebhookSubscription.destination, WebhookSubscription.id)
    rows = (await session.execute(query.offset(max(offset, 0)).limit(limit + 1))).all()
    candidates = [Candidate(str(r[0]), str(r[1]), str(r[2] or "")) for r in rows[:limit]]
    if kind == "user":
        candidates.sort(key=lambda c: (c.name.casefold(), c.id))
    return candidates, len(rows) > limit


async def match_names(session: AsyncSession, realm_id: str, text: str, *, limit: int = 50) -> list[NamedObject]:
    """Objects of this realm that ``text`` names: an id, an email, or a name (case-insensitive, whole).

    For filters that take what a person knows ("alice@example.com", "Payroll") rather than an
    id. One statement; at most ``limit`` objects.
    """
    wanted = text.strip()
    if not wanted:
        return []
    if ID_PATTERN.fullmatch(wanted):
        return list((await lookup_names(session, realm_id, [wanted])).values())
    lowered = wanted.lower()
    arms: list[Any] = []
    for prefix, model, name_col in (
        ("spn", ServicePrincipal, ServicePrincipal.name),
        ("org", Organization, Organization.name),
        ("rol", Role, Role.name),
        ("grp", Group, Group.name),
        ("wfl", Workflow, Workflow.name),
    ):
        arms.append(
            select(model.id.label("id"), literal(KINDS[prefix], String).label("kind")).where(  # type: ignore[attr-defined]
                model.realm_id == realm_id, func.lower(name_col) == lowered
            )  # type: ignore[attr-defined]
        )
    # Email and display name in two arms, so each reads its own index (an OR would read them all).
    arms.append(
        select(User.id.label("id"), literal("user", String).label("kind")).where(  # type: ignore[attr-defined]
            User.realm_id == realm_id, func.lower(User.email) == lowered
        )
    )
    arms.append(
        select(User.id.label("id"), literal("user", String).label("kind")).where(  # type: ignore[attr-defined]
            User.realm_id == realm_id,
            User.display_name.ilike(_like(wanted)[1:-1], escape="\\"),  # type: ignore[attr-defined]
        )
    )
    rows = list({row.id: row for row in (await session.execute(union_all(*arms).limit(limit))).all()}.values())
    found = await lookup_names(session, realm_id, [row.id for row in rows]) if rows else {}
    return [found[row.id] for row in rows if row.id in found]
