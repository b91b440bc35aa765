"""Approvals: the decisions ``approval`` steps wait for (seed 000 "Concepts", "Separation of duties").

The runner asks for an approval (:func:`request_approval`) and later reads the outcome
(:func:`for_step`); people decide through :func:`decide` and :func:`delegate`. Deciding never
moves the run itself: it records the decision with a conditional update from ``pending`` (the
first decision wins, a second one is a 409), makes the run due, and the runner continues it
under its lease. The run's row is locked first, in the same order the runner locks, so a
decision and the runner never miss each other.

The subject is never an approver, and someone who is not (or no longer) named sees nothing:
404, exactly as for an approval that does not exist.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory import rules
from engine.directory.audit import Actor, record_audit
from engine.directory.authz import load_authority
from engine.directory.models import Group, Organization, Realm, Role, User
from engine.directory.roles import grant_scope
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import get_settings
from engine.platform.errors import Conflict, Issue, NotFound, ValidationFailed
from engine.platform.ids import is_id, new_id
from engine.platform.pagination import Page, keyset_page
from engine.runs import runstore
from engine.runs.approval_models import ApprovalLink, WorkflowApproval
from engine.runs.models import WorkflowRun
from engine.runs.notices import LINK_PLACEHOLDER, record_notice
from engine.runs.outcome_events import emit_approval_event
from engine.workflows.definitions.durations import parse_duration
from engine.workflows.models import Workflow

PENDING, APPROVED, REJECTED, EXPIRED, CANCELLED = "pending", "approved", "rejected", "expired", "cancelled"
WORKFLOW_STEP, ROLE_ASSIGNMENT = "workflow_step", "role_assignment"
ROLE_REQUEST_LIFETIME = timedelta(days=7)
STATUSES = (PENDING, APPROVED, REJECTED, EXPIRED, CANCELLED)
DECISION_CATEGORY = "authorization"  # approval decisions (seed 000 "Authority and accountability")
LINK_BYTES = 32


class NoEligibleApprover(Exception):
    """Nobody named by the step may decide (suspended, guests, the subject, gone)."""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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


async def notify_approvers(
    session: AsyncSession,
    approval: WorkflowApproval,
    approvers: list[str],
    *,
    now: datetime,
    mail_configured: bool,
) -> None:
    """An ``approval_requested`` notice to each approver; a mailed one carries a one-time link to
    the decision page. The link exists only in the mail: the notice row keeps a placeholder and
    the link encrypted until it is sent, ``approval_links`` only its hash. Without a mail server
    nobody would receive a link, so none is made."""
    workflow_name = "Role assignment approval"
    if approval.workflow_id:
        workflow_name = await session.scalar(select(Workflow.name).where(Workflow.id == approval.workflow_id)) or ""
    users = (await session.execute(select(User).where(User.id.in_(approvers)))).scalars().all()  # type: ignore[attr-defined]
    slug = await session.scalar(select(Realm.slug).where(Realm.id == approval.realm_id))
    public_url = get_settings().public_url
    for user in users:
        link = None
        if mail_configured:
            token = await create_link(session, approval, user.id)
            link = f"{public_url or ''}/realms/{slug}/approval-links/{token}"
        await record_notice(
            session,
            realm_id=approval.realm_id,
            user_id=user.id,
            to_address=user.email or None,
            notice="approval_requested",
            workflow_id=approval.workflow_id,
            workflow_name=workflow_name,
            run_id=approval.run_id,
            approval_id=approval.id,
            now=now,
            mail_configured=mail_configured,
            extra_text=(
                "Decide after signing in on the cockpit's approvals page."
                if link is None
                else f"Decide after signing in, with this one-time link: {LINK_PLACEHOLDER}"
                if public_url
                else "Decide after signing in: open the cockpit's approvals page, or use this one-time link"
                f" (a path on the cockpit's address): {LINK_PLACEHOLDER}"
            ),
            link=link,
        )


async def create_link(session: AsyncSession, approval: WorkflowApproval, user_id: str) -> str:
    """A one-time link for ``user_id`` (only its hash is kept; it expires with the approval)."""
    token = "apl_" + secrets.token_urlsafe(LINK_BYTES)
    session.add(
        ApprovalLink(
            id=new_id("apl"),
            token_hash=_hash(token),
            approval_id=approval.id,
            user_id=user_id,
            expires_at=approval.expires_at,
        )
    )
    return token


async def redeem_link(session: AsyncSession, realm_id: str, user_id: str, token: str, *, now: datetime) -> str:
    """Use a one-time link: the approval id it opens; 404 when unknown, used, expired or someone else's."""
    result = await session.execute(
        update(ApprovalLink)
        .where(
            ApprovalLink.token_hash == _hash(token),
            ApprovalLink.user_id == user_id,
            ApprovalLink.used_at.is_(None),  # type: ignore[union-attr]
            ApprovalLink.expires_at > now,  # type: ignore[operator]
        )
        .values(used_at=now)
        .returning(ApprovalLink.approval_id)
    )
    approval_id = result.scalar_one_or_none()
    if approval_id is None:
        raise NotFound("This link is not valid any more (used, expired, or not yours).")
    approval = await session.get(WorkflowApproval, approval_id)
    if approval is None or approval.realm_id != realm_id:
        raise NotFound("This link is not valid any more (used, expired, or not yours).")
    return str(approval_id)


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


async def count_pending_approvals(session: AsyncSession, realm_id: str | None, workflow_id: str | None = None) -> int:
    """Approvals waiting for a decision in the realm (or one workflow; every realm when ``realm_id`` is None)."""
    query = select(func.count()).where(WorkflowApproval.status == PENDING)
    if realm_id is not None:
        query = query.where(WorkflowApproval.realm_id == realm_id)
    if workflow_id is not None:
        query = query.where(WorkflowApproval.workflow_id == workflow_id)
    return int(await session.scalar(query) or 0)


async def count_waiting_for(session: AsyncSession, realm_id: str, user_id: str) -> int:
    query = select(func.count()).where(
        WorkflowApproval.realm_id == realm_id,
        WorkflowApproval.status == PENDING,
        WorkflowApproval.approvers.contains([user_id]),  # type: ignore[attr-defined]
    )
    return int(await session.scalar(query) or 0)


# --- People deciding --------------------------------------------------------------------------------


def _mine(user_id: str) -> Any:
    """Rows the user may see: named now, or decided by them, or handed on by them."""
    return or_(
        WorkflowApproval.approvers.contains([user_id]),  # type: ignore[attr-defined]
        WorkflowApproval.decided_by == user_id,
        WorkflowApproval.delegations.contains([{"from": user_id}]),  # type: ignore[attr-defined]
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
    if status is not None and status not in STATUSES:
        issues.append(Issue("query:status", "invalid", f"must be one of {', '.join(STATUSES)}"))
    if run_id is not None and not is_id(run_id, "wrn"):
        issues.append(Issue("query:run_id", "invalid_id", "must be an id starting with wrn_"))
    if issues:
        raise ValidationFailed("The filter is not valid.", issues=issues)
    query: Select[Any] = select(WorkflowApproval).where(
        WorkflowApproval.realm_id == realm_id, WorkflowApproval.subject_id != user_id
    )
    if decided_by_me:
        query = query.where(WorkflowApproval.decided_by == user_id)
    elif status == PENDING:
        query = query.where(WorkflowApproval.approvers.contains([user_id]))  # type: ignore[attr-defined]
    else:
        query = query.where(_mine(user_id))
    if status is not None:
        query = query.where(WorkflowApproval.status == status)
    if run_id is not None:
        query = query.where(WorkflowApproval.run_id == run_id)
    return await keyset_page(session, query, WorkflowApproval.id, cursor=cursor, limit=limit, descending=True)


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
    await runstore.make_decided_due(session, run.id, now=now)
    return approval


async def _require_independent_decider(session: AsyncSession, actor: Actor, approval: WorkflowApproval) -> None:
    """A role assignment is decided by an independent second person to its requester, in an MFA session."""
    from engine.directory.independence import require_independent
    from engine.directory.roles import grant_scope

    request = dict(approval.request or {})
    role = await session.get(Role, str(request.get("role_id")))
    scope = grant_scope(role, request.get("organization_id")) if role is not None else None
    await require_independent(
        session,
        actor,
        str(request["requested_by"]),
        lambda held: role is not None and held.can_assign(role.permissions, scope),
        refused_event="role.assignment.decision_refused",
        subject_type="workflow_approval",
        subject_id=approval.id,
        details={"role_id": request.get("role_id"), "organization_id": request.get("organization_id")},
    )


async def _assign_requested_role(session: AsyncSession, actor: Actor, approval: WorkflowApproval) -> None:
    """The approved assignment, made now by its requester with every check again; the approver is
    the decider. A requester who lost the authority makes the decision fail (nothing changes)."""
    from engine.directory import roles
    from engine.directory.authz import load_authority

    request = dict(approval.request or {})
    requester = str(request["requested_by"])
    authority = await load_authority(session, approval.realm_id, "user", requester)
    expires_at = datetime.fromisoformat(request["expires_at"]) if request.get("expires_at") else None
    await roles.create_assignment(
        session,
        Actor(
            type="user",
            id=requester,
            realm_id=approval.realm_id,
            request_id=actor.request_id,
            correlation_id=approval.id,
        ),
        authority,
        role_id=str(request["role_id"]),
        user_id=request.get("user_id"),
        service_principal_id=request.get("service_principal_id"),
        organization_id=request.get("organization_id"),
        expires_at=expires_at,
        approver_id=actor.id,
        approved=True,
    )


async def request_role_assignment(session: AsyncSession, actor: Actor, needed: Any) -> WorkflowApproval:
    """A role that requires approval, assigned by hand: the named approver decides first.

    ``needed`` is what ``roles.create_assignment`` answered after every check passed."""
    role, subject_type, subject_id = needed.role, needed.subject_type, needed.subject_id
    organization_id, expires_at, approver_id = needed.organization_id, needed.expires_at, needed.approver_id
    now = SYSTEM_CLOCK.now()
    approval = WorkflowApproval(
        id=new_id("wap"),
        realm_id=actor.realm_id,
        kind=ROLE_ASSIGNMENT,
        request={
            "role_id": role.id,
            "role": role.name,
            "user_id": subject_id if subject_type == "user" else None,
            "service_principal_id": subject_id if subject_type == "service_principal" else None,
            "organization_id": organization_id,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "requested_by": actor.id,
        },
        subject_id=subject_id,
        approvers=[approver_id],
        status=PENDING,
        expires_at=now + ROLE_REQUEST_LIFETIME,
        delegations=[],
        created_at=now,
    )
    session.add(approval)
    await session.flush()
    await record_audit(
        session,
        actor,
        "role.assignment.requested",
        category=DECISION_CATEGORY,
        subject_type=subject_type,
        subject_id=subject_id,
        details={
            "approval_id": approval.id,
            "role_id": role.id,
            "organization_id": organization_id,
            "approver_id": approver_id,
        },
    )

    await notify_approvers(session, approval, [approver_id], now=now, mail_configured=get_settings().mail is not None)
    return approval


async def expire_role_requests(session: AsyncSession, now: datetime) -> int:
    """Role assignment requests nobody decided in time: expired (audited, the system acting)."""
    rows = await session.execute(
        update(WorkflowApproval)
        .where(
            WorkflowApproval.kind == ROLE_ASSIGNMENT,
            WorkflowApproval.status == PENDING,
            WorkflowApproval.expires_at <= now,  # type: ignore[operator]
        )
        .values(status=EXPIRED, decided_at=now)
        .returning(WorkflowApproval.id, WorkflowApproval.realm_id)
    )
    expired = rows.all()
    for approval_id, realm_id in expired:
        await record_audit(
            session,
            Actor(type="system", id=None, realm_id=realm_id, correlation_id=approval_id),
            "role.assignment.expired",
            category=DECISION_CATEGORY,
            subject_type="workflow_approval",
            subject_id=approval_id,
        )
    return len(expired)


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
            words = f"grants role {roles.get(step.get('role_id'), 'a role that no longer exists')}{scope}{until}"
        elif kind == "remove_role":
            words = f"removes role {roles.get(step.get('role_id'), 'a role that no longer exists')}{org_of(step)}"
        elif kind == "add_to_group":
            words = f"adds them to group {groups.get(step.get('group_id'), 'a group that no longer exists')}"
        elif kind == "remove_from_group":
            words = f"removes them from group {groups.get(step.get('group_id'), 'a group that no longer exists')}"
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
