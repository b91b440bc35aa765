"""Role-assignment requests: a role that requires approval, assigned by hand, waits for its approver.

``create_assignment`` answers what is needed; the request is an approval of kind
``role_assignment`` (no run), decided like any approval (engine/runs/approvals.py, ``decide``): by
an independent second person, and when approved the assignment is made then by its requester,
with every check again. A request nobody decides in time expires.

It lives beside the run approvals it shares a table, the decision and the notices with
(engine/runs/approval_models.py, approvals.py, approval_links.py): engine.directory, a layer
below engine.runs, may import none of them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import load_authority
from engine.directory.models import Role
from engine.directory.roles import grant_scope
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import get_settings
from engine.platform.ids import new_id
from engine.runs.approval_links import notify_approvers
from engine.runs.approval_models import DECISION_CATEGORY, EXPIRED, PENDING, ROLE_ASSIGNMENT, WorkflowApproval

ROLE_REQUEST_LIFETIME = timedelta(days=7)


async def _require_independent_decider(session: AsyncSession, actor: Actor, approval: WorkflowApproval) -> None:
    """A role assignment is decided by an independent second person to its requester, in an MFA session."""
    from engine.directory.independence import require_independent

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
    from engine.directory.role_assignments import create_assignment

    request = dict(approval.request or {})
    requester = str(request["requested_by"])
    authority = await load_authority(session, approval.realm_id, "user", requester)
    expires_at = datetime.fromisoformat(request["expires_at"]) if request.get("expires_at") else None
    await create_assignment(
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

    ``needed`` is what ``create_assignment`` answered after every check passed."""
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
            col(WorkflowApproval.kind) == ROLE_ASSIGNMENT,
            col(WorkflowApproval.status) == PENDING,
            col(WorkflowApproval.expires_at) <= now,
        )
        .values(status=EXPIRED, decided_at=now)
        .returning(col(WorkflowApproval.id), col(WorkflowApproval.realm_id))
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
