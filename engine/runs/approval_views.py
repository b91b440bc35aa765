"""Approvals as people see them: counts, a user's list, one approval for its user, the API's shape,
and a run's steps in words.

Someone who is not (or no longer) named, who did not decide and did not hand it on, sees nothing:
404, exactly as for an approval that does not exist; nor does the subject.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.models import Group, Organization, Role, User
from engine.platform.errors import Issue, NotFound, ValidationFailed
from engine.platform.ids import is_id
from engine.platform.pagination import Page, keyset_page
from engine.runs.approval_models import APPROVAL_STATUSES, PENDING, WorkflowApproval


async def count_pending_approvals(session: AsyncSession, realm_id: str | None, workflow_id: str | None = None) -> int:
    """Approvals waiting for a decision in the realm (or one workflow; every realm when ``realm_id`` is None)."""
    query = select(func.count()).where(col(WorkflowApproval.status) == PENDING)
    if realm_id is not None:
        query = query.where(col(WorkflowApproval.realm_id) == realm_id)
    if workflow_id is not None:
        query = query.where(col(WorkflowApproval.workflow_id) == workflow_id)
    return int(await session.scalar(query) or 0)


async def count_waiting_for(session: AsyncSession, realm_id: str, user_id: str) -> int:
    query = select(func.count()).where(
        col(WorkflowApproval.realm_id) == realm_id,
        col(WorkflowApproval.status) == PENDING,
        col(WorkflowApproval.approvers).contains([user_id]),
    )
    return int(await session.scalar(query) or 0)


# --- People deciding --------------------------------------------------------------------------------


def _mine(user_id: str) -> Any:
    """Rows the user may see: named now, or decided by them, or handed on by them."""
    return or_(
        col(WorkflowApproval.approvers).contains([user_id]),
        col(WorkflowApproval.decided_by) == user_id,
        col(WorkflowApproval.delegations).contains([{"from": user_id}]),
    )


async def list_for_user(
    session: AsyncSession,
    realm_id: str,
    user_id: str,
    *,
    status: str | None = None,
    decided_by_me: bool = False,
    run_id: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[WorkflowApproval]:
    issues = []
    if status is not None and status not in APPROVAL_STATUSES:
        issues.append(Issue("query:status", "invalid", f"must be one of {', '.join(APPROVAL_STATUSES)}"))
    if run_id is not None and not is_id(run_id, "wrn"):
        issues.append(Issue("query:run_id", "invalid_id", "must be an id starting with wrn_"))
    if issues:
        raise ValidationFailed("The filter is not valid.", issues=issues)
    query: Select[Any] = select(WorkflowApproval).where(
        col(WorkflowApproval.realm_id) == realm_id, col(WorkflowApproval.subject_id) != user_id
    )
    if decided_by_me:
        query = query.where(col(WorkflowApproval.decided_by) == user_id)
    elif status == PENDING:
        query = query.where(col(WorkflowApproval.approvers).contains([user_id]))
    else:
        query = query.where(_mine(user_id))
    if status is not None:
        query = query.where(col(WorkflowApproval.status) == status)
    if run_id is not None:
        query = query.where(col(WorkflowApproval.run_id) == run_id)
    return await keyset_page(session, query, col(WorkflowApproval.id), cursor=cursor, limit=limit, descending=True)


async def get_for_user(session: AsyncSession, realm_id: str, approval_id: str, user_id: str) -> WorkflowApproval:
    """The approval as ``user_id`` may see it; 404 for the subject and for anyone not involved."""
    row = await session.get(WorkflowApproval, approval_id)
    if (
        row is None
        or row.realm_id != realm_id
        or row.subject_id == user_id
        or not (
            user_id in row.approvers
            or row.decided_by == user_id
            or any(d.get("from") == user_id for d in row.delegations)
        )
    ):
        raise NotFound("No such approval.")
    return row


def approval_view(row: WorkflowApproval) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "request": {k: v for k, v in (row.request or {}).items() if k != "role"} if row.request else None,
        "run_id": row.run_id,
        "workflow_id": row.workflow_id,
        "step_id": row.step_id,
        "subject_id": row.subject_id,
        "status": row.status,
        "approvers": list(row.approvers),
        "reminder_at": row.remind_at,
        "reminded_at": row.reminded_at,
        "expires_at": row.expires_at,
        "decided_by": row.decided_by,
        "decided_at": row.decided_at,
        "comment": row.comment,
        "delegations": list(row.delegations),
        "created_at": row.created_at,
    }


# --- What the run will do, in words -----------------------------------------------------------------


@dataclass(frozen=True)
class StepWords:
    step_id: str
    text: str


async def _names(
    session: AsyncSession, model: Any, ids: set[str], realm_id: str, column: str = "name"
) -> dict[str, str]:
    """One query per kind of thing: id -> name, for ids of this realm only."""
    if not ids:
        return {}
    rows = await session.execute(
        select(model.id, getattr(model, column)).where(model.id.in_(sorted(ids)), model.realm_id == realm_id)
    )
    return {str(i): str(n) for i, n in rows}


async def describe_steps(
    session: AsyncSession, realm_id: str, plans: list[tuple[list[dict[str, Any]], str | None]]
) -> list[list[StepWords]]:
    """Each plan's steps as sentences with names, not ids ("grants role Billing admin in Acme").

    A plan is the steps of one run with the run's organization; names are read once for all plans
    (one query per kind of thing, whatever the number of plans).
    """
    every = [step for steps, _org in plans for step in steps]
    role_ids = {s["role_id"] for s in every if s.get("role_id")}
    group_ids = {s["group_id"] for s in every if s.get("group_id")}
    org_ids = {s["organization_id"] for s in every if s.get("organization_id")} | {o for _s, o in plans if o}
    user_ids = {a for s in every for a in (s.get("approvers") or [])}
    roles = await _names(session, Role, role_ids, realm_id)
    groups = await _names(session, Group, group_ids, realm_id)
    orgs = await _names(session, Organization, org_ids, realm_id)
    users = await _names(session, User, user_ids, realm_id, column="display_name")
    return [_words(steps, org, roles, groups, orgs, users) for steps, org in plans]


def _named(names: dict[str, str], key: object, missing: str) -> str:
    """The name of ``key`` (an id a step holds, not always a string), or ``missing``."""
    return names.get(key, missing) if isinstance(key, str) else missing


def _words(
    steps: list[dict[str, Any]],
    organization_id: str | None,
    roles: dict[str, str],
    groups: dict[str, str],
    orgs: dict[str, str],
    users: dict[str, str],
) -> list[StepWords]:
    def org_of(step: dict[str, Any]) -> str:
        oid = step.get("organization_id") or organization_id
        return f" in {orgs.get(oid, 'an organization that no longer exists')}" if oid else ""

    out = []
    for step in steps:
        kind = step.get("type")
        sid = str(step.get("id", ""))
        if kind == "assign_role":
            scope = org_of(step) if step.get("scope") == "organization" else " across the realm"
            until = f", for {step['expires_in']}" if step.get("expires_in") else ""
            words = f"grants role {_named(roles, step.get('role_id'), 'a role that no longer exists')}{scope}{until}"
        elif kind == "remove_role":
            words = f"removes role {_named(roles, step.get('role_id'), 'a role that no longer exists')}{org_of(step)}"
        elif kind == "add_to_group":
            words = f"adds them to group {_named(groups, step.get('group_id'), 'a group that no longer exists')}"
        elif kind == "remove_from_group":
            words = f"removes them from group {_named(groups, step.get('group_id'), 'a group that no longer exists')}"
        elif kind == "remove_membership":
            words = f"removes their membership{org_of(step)}"
        elif kind == "suspend_user":
            words = "suspends their account"
        elif kind == "notify":
            words = f"sends them the notice “{str(step.get('notice', '')).replace('_', ' ')}”"
        elif kind == "call_webhook":
            words = "calls an external service"
        elif kind == "wait":
            words = f"waits {step.get('duration')}"
        elif kind == "approval":
            names = ", ".join(users.get(a, "a former user") for a in step.get("approvers") or [])
            words = f"asks {names} for another approval"
        elif kind == "end":
            words = "ends the run"
        else:
            words = f"does {kind}"
        out.append(StepWords(sid, words))
    return out
