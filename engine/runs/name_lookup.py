"""Names for ids and ids for names: in ``runs`` because the ids a page shows include workflows and runs.

A page collects the ids it is about to show and asks once: :func:`lookup_names` answers with one
statement (a ``UNION ALL`` over the tables of every kind, each arm filtered on the realm and its
own id prefix), so a page's cost does not grow with the number of ids it names. Ids of another
realm, and ids that no longer exist, are simply absent from the answer: the caller shows them
as they are. :func:`match_names` goes the other way, for filters that take a name or an email.
The pickers' search, which lists directory objects only, is ``engine/directory/search.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import String, bindparam, func, literal, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, aliased
from sqlalchemy.sql import ColumnElement, Select
from sqlmodel import col

from engine.directory.input_checks import like
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
    arms: list[Select[str, str, str, str | None]] = []

    def arm(
        prefix: str,
        id_col: Mapped[str],
        name: Mapped[str],
        parent: Mapped[str] | Mapped[str | None] | ColumnElement[str],
        realm_col: Mapped[str],
    ) -> None:
        if prefix not in by_kind:
            return
        query: Select[str, str, str, str | None] = select(
            id_col.label("id"),
            literal(KINDS[prefix], String).label("kind"),
            name.label("name"),
            parent.label("parent_id"),
        ).where(
            realm_col == realm_id,
            id_col.in_(bindparam(f"ids_{prefix}", by_kind[prefix], expanding=True)),
        )
        arms.append(query)

    arm("usr", col(User.id), col(User.display_name), col(User.email), col(User.realm_id))
    arm("spn", col(ServicePrincipal.id), col(ServicePrincipal.name), none, col(ServicePrincipal.realm_id))
    arm("org", col(Organization.id), col(Organization.name), none, col(Organization.realm_id))
    arm("rol", col(Role.id), col(Role.name), none, col(Role.realm_id))
    arm("grp", col(Group.id), col(Group.name), col(Group.organization_id), col(Group.realm_id))
    arm(
        "whk",
        col(WebhookSubscription.id),
        col(WebhookSubscription.destination),
        none,
        col(WebhookSubscription.realm_id),
    )
    arm("wfl", col(Workflow.id), col(Workflow.name), none, col(Workflow.realm_id))
    subject = aliased(User)
    if "wrn" in by_kind:
        # A run by its title: its workflow's name, and (in parent_id here) its subject's name.
        arms.append(
            select(
                col(WorkflowRun.id).label("id"),
                literal("run", String).label("kind"),
                col(Workflow.name).label("name"),
                col(subject.display_name).label("parent_id"),
            )
            .join(Workflow, col(Workflow.id) == col(WorkflowRun.workflow_id))
            .outerjoin(
                subject,
                (col(subject.id) == col(WorkflowRun.subject_id)) & (col(subject.realm_id) == col(WorkflowRun.realm_id)),
            )
            .where(
                col(WorkflowRun.realm_id) == realm_id,
                col(WorkflowRun.id).in_(bindparam("ids_wrn", by_kind["wrn"], expanding=True)),
            )
        )
    if "wap" in by_kind:
        # An approval by what was asked: the workflow (or the role asked for by hand) and for whom;
        # its page is its run's timeline (the approval's own page is only for its approvers).
        what = func.coalesce(col(Workflow.name), col(Role.name), "a deleted workflow")
        arms.append(
            select(
                col(WorkflowApproval.id).label("id"),
                literal("approval", String).label("kind"),
                (
                    literal("approval of ", String)
                    + what
                    + " for "
                    + func.coalesce(col(subject.display_name), "a former user")
                ).label("name"),
                col(WorkflowApproval.run_id).label("parent_id"),
            )
            .outerjoin(Workflow, col(Workflow.id) == col(WorkflowApproval.workflow_id))
            .outerjoin(
                Role,
                (col(Role.id) == col(WorkflowApproval.request)["role_id"].astext)
                & (col(Role.realm_id) == col(WorkflowApproval.realm_id)),
            )
            .outerjoin(
                subject,
                (col(subject.id) == col(WorkflowApproval.subject_id))
                & (col(subject.realm_id) == col(WorkflowApproval.realm_id)),
            )
            .where(
                col(WorkflowApproval.realm_id) == realm_id,
                col(WorkflowApproval.id).in_(bindparam("ids_wap", by_kind["wap"], expanding=True)),
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
    arms: list[Select[str, str]] = []
    for prefix, id_col, realm_col, name_col in (
        ("spn", col(ServicePrincipal.id), col(ServicePrincipal.realm_id), col(ServicePrincipal.name)),
        ("org", col(Organization.id), col(Organization.realm_id), col(Organization.name)),
        ("rol", col(Role.id), col(Role.realm_id), col(Role.name)),
        ("grp", col(Group.id), col(Group.realm_id), col(Group.name)),
        ("wfl", col(Workflow.id), col(Workflow.realm_id), col(Workflow.name)),
    ):
        arms.append(
            select(id_col.label("id"), literal(KINDS[prefix], String).label("kind")).where(
                realm_col == realm_id, func.lower(name_col) == lowered
            )
        )
    # Email and display name in two arms, so each reads its own index (an OR would read them all).
    arms.append(
        select(col(User.id).label("id"), literal("user", String).label("kind")).where(
            col(User.realm_id) == realm_id, func.lower(col(User.email)) == lowered
        )
    )
    arms.append(
        select(col(User.id).label("id"), literal("user", String).label("kind")).where(
            col(User.realm_id) == realm_id,
            col(User.display_name).ilike(like(wanted)[1:-1], escape="\\"),
        )
    )
    rows = list({row.id: row for row in (await session.execute(union_all(*arms).limit(limit))).all()}.values())
    found = await lookup_names(session, realm_id, [row.id for row in rows]) if rows else {}
    return [found[row.id] for row in rows if row.id in found]
