"""Approvals as people see them: counts, a user's list, one approval for its user, the API's shape,
a run's steps in words, and the cards the approval pages show (everything in names).

Someone who is not (or no longer) named, who did not decide and did not hand it on, sees nothing:
404, exactly as for an approval that does not exist; nor does the subject.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.models import Group, Organization, Role, User
from engine.directory.principals import users_by_id
from engine.platform.errors import Issue, NotFound, ValidationFailed
from engine.platform.ids import is_id
from engine.platform.pagination import Page, keyset_page
from engine.runs import read_models
from engine.runs.approval_models import APPROVAL_STATUSES, PENDING, WorkflowApproval
from engine.runs.models import WorkflowRun
from engine.runs.outcome import decided_then, people_in, run_outcome
from engine.workflows.models import Workflow, WorkflowRevision

STATUS_WORDS = {
    "pending": "waiting for a decision",
    "approved": "approved",
    "rejected": "rejected",
    "expired": "expired without a decision",
    "cancelled": "cancelled (the run stopped)",
}


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


async def count_decided_by(session: AsyncSession, realm_id: str, user_id: str) -> int:
    query = select(func.count()).where(
        col(WorkflowApproval.realm_id) == realm_id, col(WorkflowApproval.decided_by) == user_id
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


def approval_view(row: WorkflowApproval) -> read_models.Approval:
    return read_models.Approval(
        id=row.id,
        kind=row.kind,
        request={k: v for k, v in (row.request or {}).items() if k != "role"} if row.request else None,
        run_id=row.run_id,
        workflow_id=row.workflow_id,
        step_id=row.step_id,
        subject_id=row.subject_id,
        status=row.status,
        approvers=list(row.approvers),
        reminder_at=row.remind_at,
        reminded_at=row.reminded_at,
        expires_at=row.expires_at,
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        comment=row.comment,
        delegations=[read_models.ApprovalDelegation(from_=d["from"], to=d["to"], at=d["at"]) for d in row.delegations],
        created_at=row.created_at,
    )


def approval_page(page: Page[WorkflowApproval]) -> read_models.ApprovalPage:
    return read_models.ApprovalPage(items=[approval_view(a) for a in page.items], next_cursor=page.next_cursor)


def pending_role_assignment(row: WorkflowApproval) -> read_models.PendingRoleAssignment:
    """The answer to a role assignment that waits for its approver."""
    return read_models.PendingRoleAssignment(status="pending_approval", approval=approval_view(row))


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


# --- The cards of the approval pages -----------------------------------------------------------------


@dataclass
class ApprovalCard:
    approval: WorkflowApproval
    workflow_name: str
    subject: str
    subject_email: str
    started_by: str
    started_at: datetime | None
    run_state: str
    next_steps: list[str]
    approvers: list[str]
    decided_by: str | None
    delegations: list[str]
    # Once decided: what the decision led to, in words ("approved — then failed: …"); None while
    # pending and for a role assignment asked for by hand (no run follows it).
    led_to: str | None = None

    @property
    def status_words(self) -> str:
        return STATUS_WORDS.get(self.approval.status, self.approval.status)


async def approval_cards(
    session: AsyncSession, realm_id: str, rows: list[WorkflowApproval], *, now: datetime
) -> list[ApprovalCard]:
    """Everything a list of approvals shows, in a fixed number of queries whatever its length."""
    if not rows:
        return []
    run_ids = [r.run_id for r in rows if r.run_id]
    run_rows = (await session.execute(select(WorkflowRun).where(col(WorkflowRun.id).in_(run_ids)))).scalars()
    runs = {r.id: r for r in run_rows}
    revision_ids = {r.revision_id for r in runs.values()}
    definitions = {
        rid: d
        for rid, d in await session.execute(
            select(col(WorkflowRevision.id), col(WorkflowRevision.definition)).where(
                col(WorkflowRevision.id).in_(revision_ids)
            )
        )
    }
    workflow_names = {
        wid: n
        for wid, n in await session.execute(
            select(col(Workflow.id), col(Workflow.name)).where(
                col(Workflow.id).in_({r.workflow_id for r in rows if r.workflow_id})
            )
        )
    }
    people_ids: set[str] = set()
    for row in rows:
        people_ids |= {row.subject_id, *row.approvers, *(d.get("from", "") for d in row.delegations)}
        people_ids |= {d.get("to", "") for d in row.delegations}
        if row.decided_by:
            people_ids.add(row.decided_by)
        run = runs.get(row.run_id or "")
        if run is not None:
            people_ids |= {run.starter_id or "", run.publisher_id, *people_in(run)}
        if row.request:
            people_ids.add(str(row.request.get("requested_by") or ""))
    people = await users_by_id(session, realm_id, people_ids)

    def name(user_id: str | None) -> str:
        user = people.get(user_id or "")
        return user.display_name if user else "a former user"

    plans: list[tuple[list[dict[str, Any]], str | None]] = []
    for row in rows:
        if row.request is not None:  # a role assignment asked for by hand: the grant is what follows
            org = row.request.get("organization_id")
            grant = {"type": "assign_role", "role_id": row.request.get("role_id"), "organization_id": org}
            plans.append(([grant | {"scope": "organization" if org else "realm"}], org))
            continue
        run = runs.get(row.run_id or "")
        steps = list((definitions.get(run.revision_id) or {}).get("steps", [])) if run else []
        plans.append((steps[(row.step_index or 0) + 1 :], run.organization_id if run else None))
    words = await describe_steps(session, realm_id, plans)
    names = {k: u.display_name or u.email for k, u in people.items()}
    out = []
    for row, described in zip(rows, words, strict=True):
        run = runs.get(row.run_id or "")
        if row.request is not None:
            started_by = f"{name(row.request.get('requested_by'))}, by hand"
        elif run is None:
            started_by = "unknown"
        elif run.starter_id:
            started_by = f"{name(run.starter_id)}, by hand"
        else:
            started_by = f"a {run.trigger_type} trigger, published by {name(run.publisher_id)}"
        subject = people.get(row.subject_id)
        led_to = None
        if row.status != PENDING and row.request is None:
            led_to = decided_then(row.status, run_outcome(run, names, now=now) if run is not None else None)
        out.append(
            ApprovalCard(
                approval=row,
                workflow_name=(
                    "Role assignment"
                    if row.request is not None
                    else workflow_names.get(row.workflow_id or "", "a deleted workflow")
                ),
                subject=subject.display_name if subject else "a former user",
                subject_email=subject.email if subject else "",
                started_by=started_by,
                started_at=run.created_at if run else row.created_at,
                run_state=run.state if run else "",
                next_steps=[w.text for w in described],
                approvers=[name(a) for a in row.approvers],
                decided_by=name(row.decided_by) if row.decided_by else None,
                delegations=[f"{name(d.get('from'))} handed it to {name(d.get('to'))}" for d in row.delegations],
                led_to=led_to,
            )
        )
    return out
