"""Approvals: the decisions ``approval`` steps wait for (seed 000 "Concepts", "Separation of duties").

The runner asks for an approval (:func:`request_approval`) and later reads the outcome
(:func:`for_step`); people decide through :func:`decide` and :func:`delegate`. Deciding never
moves the run itself: it records the decision with a conditional update from ``pending`` (the
first decision wins, a second one is a 409), makes the run due, and the runner continues it
under its lease. The run's row is locked first, in the same order the runner locks, so a
decision and the runner never miss each other.

The subject is never an approver, and someone who is not (or no longer) named sees nothing:
404, exactly as for an approval that does not exist.

Approvers are told, with one-time links, by engine/runs/approval_links.py; role-assignment requests
are engine/runs/role_requests.py; what people see of approvals, engine/runs/approval_views.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory import rules
from engine.directory.audit import Actor, record_audit
from engine.directory.authz import load_authority
from engine.directory.models import Role, User
from engine.directory.roles import grant_scope
from engine.platform.errors import Conflict, Issue, NotFound, ValidationFailed
from engine.platform.ids import new_id
from engine.runs.approval_links import notify_approvers
from engine.runs.approval_models import (
    APPROVED,
    CANCELLED,
    DECISION_CATEGORY,
    EXPIRED,
    PENDING,
    REJECTED,
    ROLE_ASSIGNMENT,
    WorkflowApproval,
)
from engine.runs.approval_views import get_for_user
from engine.runs.models import WorkflowRun
from engine.runs.outcome_events import emit_approval_event
from engine.runs.role_requests import _assign_requested_role, _require_independent_decider
from engine.runs.runstore import scheduling
from engine.workflows.definitions.durations import parse_duration


class NoEligibleApprover(Exception):
    """Nobody named by the step may decide (suspended, guests, the subject, gone)."""


async def eligible_approvers(session: AsyncSession, realm_id: str, named: list[str], subject_id: str) -> list[str]:
    """The named users who may decide now: active users of the realm, not guests, never the subject."""
    return rules.eligible_approvers(named, subject_id, await approver_facts(session, realm_id, named))


async def approver_facts(session: AsyncSession, realm_id: str, named: list[Any]) -> dict[str, tuple[bool, bool]]:
    """(active, guest) of each named user of the realm: what :func:`rules.eligible_approvers` judges."""
    ids = [str(i) for i in named if isinstance(i, str)]
    if not ids:
        return {}
    rows = await session.execute(
        select(User.id, User.status, User.guest).where(
            User.id.in_(ids),  # type: ignore[attr-defined]
            User.realm_id == realm_id,
        )
    )
    return {user_id: (status == "active", bool(guest)) for user_id, status, guest in rows}


async def request_approval(
    session: AsyncSession,
    run: WorkflowRun,
    step: dict[str, Any],
    step_index: int,
    *,
    actor: Actor,
    now: datetime,
    mail_configured: bool,
    approvers: list[str] | None = None,
) -> WorkflowApproval:
    """Record the pending approval, audit the request and notify every eligible approver.

    ``approvers``: the eligible approvers as the step's decision found them (else read here)."""
    if approvers is None:
        approvers = await eligible_approvers(session, run.realm_id, list(step.get("approvers") or []), run.subject_id)
    if not approvers:
        raise NoEligibleApprover()
    lifetime = timedelta(seconds=parse_duration(step["expires_in"]))
    approval = WorkflowApproval(
        id=new_id("wap"),
        realm_id=run.realm_id,
        run_id=run.id,
        workflow_id=run.workflow_id,
        step_id=step["id"],
        step_index=step_index,
        subject_id=run.subject_id,
        approvers=approvers,
        status=PENDING,
        expires_at=now + lifetime,
        remind_at=now + lifetime / 2,
        delegations=[],
        created_at=now,
    )
    session.add(approval)
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.approval.requested",
        category="workflow",
        subject_type="workflow_approval",
        subject_id=approval.id,
        details={
            "run_id": run.id,
            "step_id": approval.step_id,
            "approvers": approvers,
            "expires_at": approval.expires_at.isoformat(),
        },
    )
    await emit_approval_event(session, approval, run)
    await notify_approvers(session, approval, approvers, now=now, mail_configured=mail_configured)
    return approval


async def for_step(session: AsyncSession, run_id: str, step_id: str) -> WorkflowApproval | None:
    row = await session.execute(
        select(WorkflowApproval)
        .where(WorkflowApproval.run_id == run_id, WorkflowApproval.step_id == step_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return row.scalar_one_or_none()


async def for_run(session: AsyncSession, run_id: str) -> list[WorkflowApproval]:
    rows = await session.execute(
        select(WorkflowApproval).where(WorkflowApproval.run_id == run_id).order_by(WorkflowApproval.id)
    )
    return list(rows.scalars())


async def expire(session: AsyncSession, approval: WorkflowApproval, *, now: datetime, correlation_id: str) -> bool:
    """Pending and past its expiry: expired, audited with the system as actor. False if already decided."""
    result = await session.execute(
        update(WorkflowApproval)
        .where(WorkflowApproval.id == approval.id, WorkflowApproval.status == PENDING)
        .values(status=EXPIRED, decided_at=now)
        .returning(WorkflowApproval.id)
    )
    if result.scalar_one_or_none() is None:
        return False
    approval.status, approval.decided_at = EXPIRED, now
    await record_audit(
        session,
        Actor(
            type="system", id=None, realm_id=approval.realm_id, request_id=correlation_id, correlation_id=correlation_id
        ),
        "workflow.approval.expired",
        category="workflow",
        subject_type="workflow_approval",
        subject_id=approval.id,
        details={"run_id": approval.run_id, "step_id": approval.step_id},
    )
    run = await session.get(WorkflowRun, approval.run_id) if approval.run_id else None
    await emit_approval_event(session, approval, run)
    return True


async def remind(session: AsyncSession, approval: WorkflowApproval, *, now: datetime, mail_configured: bool) -> None:
    """Half the time to expiry has passed: a second ``approval_requested`` notice, once."""
    approval.reminded_at = now
    await session.flush()
    await notify_approvers(session, approval, list(approval.approvers), now=now, mail_configured=mail_configured)


async def cancel_pending(session: AsyncSession, run_id: str, *, now: datetime) -> None:
    """A failing or cancelled run cancels its pending approvals (not audited, per seed 000)."""
    await session.execute(
        update(WorkflowApproval)
        .where(WorkflowApproval.run_id == run_id, WorkflowApproval.status == PENDING)
        .values(status=CANCELLED, decided_at=now)
    )


async def _lock_for_decision(
    session: AsyncSession, realm_id: str, approval_id: str, user_id: str
) -> tuple[WorkflowApproval, WorkflowRun | None]:
    row = await session.get(WorkflowApproval, approval_id)
    if row is None or row.realm_id != realm_id or row.subject_id == user_id:
        raise NotFound("No such approval.")
    # The run first, then the approval: the order the runner takes them in.
    run = None
    if row.run_id is not None:
        run = (
            await session.execute(
                select(WorkflowRun)
                .where(WorkflowRun.id == row.run_id)
                .with_for_update()
                .execution_options(populate_existing=True)
            )
        ).scalar_one()
    approval = (
        await session.execute(
            select(WorkflowApproval)
            .where(WorkflowApproval.id == approval_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    ).scalar_one()
    if user_id not in approval.approvers:
        # Not named (or handed on): as good as absent, unless they may still see it (then the state says why).
        await get_for_user(session, realm_id, approval_id, user_id)
    return approval, run


def _refuse_if_closed(approval: WorkflowApproval, run: WorkflowRun | None, now: datetime) -> None:
    if approval.status != PENDING:
        raise Conflict(f"This approval was already {approval.status}.", code="conflict")
    if approval.expires_at <= now:
        raise Conflict("This approval has expired.", code="conflict")
    if run is not None and (run.cancel_requested_at is not None or run.state != "awaiting_approval"):
        raise Conflict("The run no longer waits for this approval.", code="conflict")


async def decide(
    session: AsyncSession, actor: Actor, approval_id: str, *, approve: bool, comment: str | None, now: datetime
) -> WorkflowApproval:
    """Approve or reject (the first decision wins; 409 afterwards) and make the run due.

    The whole decision is one savepoint: when anything after the recorded decision refuses (the
    requested role assignment's checks made again), the decision, its audit event and every
    other write are undone, whether the caller then rolls back (the API) or goes on to show the
    refusal in the same transaction (the pages).
    """
    assert actor.id is not None
    if comment is not None and len(comment) > 1000:
        raise ValidationFailed(
            "The decision is not valid.", issues=[Issue("/comment", "too_long", "must be at most 1000 characters")]
        )
    async with session.begin_nested():
        return await _decide(session, actor, approval_id, approve=approve, comment=comment, now=now)


async def _decide(
    session: AsyncSession, actor: Actor, approval_id: str, *, approve: bool, comment: str | None, now: datetime
) -> WorkflowApproval:
    assert actor.id is not None
    approval, run = await _lock_for_decision(session, actor.realm_id, approval_id, actor.id)
    if actor.id not in approval.approvers:
        raise Conflict(f"This approval is {approval.status} and no longer yours to decide.", code="conflict")
    _refuse_if_closed(approval, run, now)
    if approval.kind == ROLE_ASSIGNMENT:
        await _require_independent_decider(session, actor, approval)
    status = APPROVED if approve else REJECTED
    result = await session.execute(
        update(WorkflowApproval)
        .where(WorkflowApproval.id == approval.id, WorkflowApproval.status == PENDING)
        .values(status=status, decided_by=actor.id, decided_at=now, comment=(comment or None))
        .returning(WorkflowApproval.id)
    )
    if result.scalar_one_or_none() is None:
        raise Conflict("This approval was already decided.", code="conflict")
    approval.status, approval.decided_by, approval.decided_at, approval.comment = status, actor.id, now, comment or None
    correlation = run.id if run is not None else approval.id
    await record_audit(
        session,
        Actor(
            type="user", id=actor.id, realm_id=actor.realm_id, request_id=actor.request_id, correlation_id=correlation
        ),
        f"workflow.approval.{status}" if run is not None else f"role.assignment.{status}",
        category=DECISION_CATEGORY,
        subject_type="workflow_approval",
        subject_id=approval.id,
        details={"run_id": approval.run_id, "step_id": approval.step_id, "comment": comment or None},
    )
    await emit_approval_event(session, approval, run)
    if run is None:
        if status == APPROVED:
            await _assign_requested_role(session, actor, approval)
        return approval
    # Due now; a run paused by its disabled workflow keeps its place and continues when enabled.
    await scheduling.make_decided_due(session, run.id, now=now)
    return approval


async def delegate(
    session: AsyncSession, actor: Actor, approval_id: str, *, user_id: str, now: datetime, mail_configured: bool
) -> WorkflowApproval:
    """Hand the decision to someone who could decide it themselves; audited.

    The delegate is an eligible approver (an active user of the realm, not a guest, never the
    subject), never whoever asked for it: the requester and granter of a role assignment, or the
    starter and accountable publisher of a run. For a role assignment the delegate must also be
    able to assign the role in its scope, as its approver must. Made in a savepoint, like a
    decision: a refusal leaves nothing behind.
    """
    assert actor.id is not None
    async with session.begin_nested():
        return await _delegate(session, actor, approval_id, user_id=user_id, now=now, mail_configured=mail_configured)


async def _delegation_problem(
    session: AsyncSession, approval: WorkflowApproval, run: WorkflowRun | None, actor_id: str, user_id: str
) -> str | None:
    """Why ``user_id`` may not take the decision over from ``actor_id`` (None when they may)."""
    request = dict(approval.request or {})
    askers = {str(request.get("requested_by") or "")} if approval.request is not None else set()
    if run is not None:
        askers |= {run.publisher_id, run.starter_id or ""}
    if user_id == approval.subject_id:
        return "the subject never decides about it"
    if user_id == actor_id:
        return "choose someone other than yourself"
    if user_id in approval.approvers:
        return "this user already decides on it"
    if user_id in askers:
        if approval.request is not None:
            return "whoever asked for the assignment (its granter) never approves it"
        return "the run's starter and its accountable publisher never decide about it"
    if not await eligible_approvers(session, approval.realm_id, [user_id], approval.subject_id):
        return "must be an active user of this realm who is not a guest"
    if approval.request is not None:
        role = await session.get(Role, str(request.get("role_id") or ""))
        if role is None or role.realm_id != approval.realm_id:
            return "the requested role no longer exists"
        delegate_authority = await load_authority(session, approval.realm_id, "user", user_id)
        if not delegate_authority.can_assign(role.permissions, grant_scope(role, request.get("organization_id"))):
            return f"must be able to assign the role {role.name} themselves"
    return None


async def _delegate(
    session: AsyncSession, actor: Actor, approval_id: str, *, user_id: str, now: datetime, mail_configured: bool
) -> WorkflowApproval:
    assert actor.id is not None
    approval, run = await _lock_for_decision(session, actor.realm_id, approval_id, actor.id)
    if actor.id not in approval.approvers:
        raise Conflict(f"This approval is {approval.status} and no longer yours to hand on.", code="conflict")
    _refuse_if_closed(approval, run, now)
    problem = await _delegation_problem(session, approval, run, actor.id, user_id)
    if problem:
        raise ValidationFailed("The delegation is not valid.", issues=[Issue("/user_id", "invalid", problem)])
    approval.approvers = [user_id if a == actor.id else a for a in approval.approvers]
    approval.delegations = [*approval.delegations, {"from": actor.id, "to": user_id, "at": now.isoformat()}]
    await session.flush()
    await record_audit(
        session,
        Actor(
            type="user",
            id=actor.id,
            realm_id=actor.realm_id,
            request_id=actor.request_id,
            correlation_id=run.id if run is not None else approval.id,
        ),
        "workflow.approval.delegated",
        category=DECISION_CATEGORY,
        subject_type="workflow_approval",
        subject_id=approval.id,
        details={"run_id": approval.run_id, "step_id": approval.step_id, "from": actor.id, "to": user_id},
    )
    await notify_approvers(session, approval, [user_id], now=now, mail_configured=mail_configured)
    return approval
