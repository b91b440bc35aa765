"""Role assignments: granting (directly, or after an approval), revoking, listing, and their expiry.

An assignment passes the grant ceiling of its role in its scope (engine/directory/roles.py
``require_ceiling``); expired assignments are removed in batches by the worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass as _dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models, rules
from engine.directory.admins import holds_admin_role, keeping_an_admin
from engine.directory.audit import Actor, emit_event, record_audit
from engine.directory.authz import Authority, check_assignment, load_authority, needs_permission, require_authority_over
from engine.directory.independence import require_independent
from engine.directory.input_checks import raise_issues
from engine.directory.models import Organization, Role, RoleAssignment, ServicePrincipal, User
from engine.directory.roles import get_role, grant_scope, require_ceiling
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Forbidden, Issue, NotFound
from engine.platform.ids import new_id
from engine.platform.pagination import Page, keyset_page

EXPIRY_BATCH = 500


def assignment_view(assignment: RoleAssignment) -> read_models.RoleAssignment:
    return read_models.RoleAssignment(
        id=assignment.id,
        role_id=assignment.role_id,
        user_id=assignment.user_id,
        service_principal_id=assignment.service_principal_id,
        organization_id=assignment.organization_id,
        expires_at=assignment.expires_at,
        granted_by=assignment.granted_by,
        approver_id=assignment.approver_id,
        source_run_id=assignment.source_run_id,
        created_at=assignment.created_at,
    )


async def get_assignment(session: AsyncSession, realm_id: str, assignment_id: str) -> RoleAssignment:
    assignment = await session.get(RoleAssignment, assignment_id)
    if assignment is None or assignment.realm_id != realm_id:
        raise NotFound("No such role assignment.")
    return assignment


async def list_assignments(
    session: AsyncSession,
    realm_id: str,
    *,
    user_id: str | None = None,
    service_principal_id: str | None = None,
    role_id: str | None = None,
    organization_id: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[RoleAssignment]:
    query = select(RoleAssignment).where(col(RoleAssignment.realm_id) == realm_id)
    if user_id:
        query = query.where(col(RoleAssignment.user_id) == user_id)
    if service_principal_id:
        query = query.where(col(RoleAssignment.service_principal_id) == service_principal_id)
    if role_id:
        query = query.where(col(RoleAssignment.role_id) == role_id)
    if organization_id:
        query = query.where(col(RoleAssignment.organization_id) == organization_id)
    return await keyset_page(session, query, col(RoleAssignment.id), cursor=cursor, limit=limit)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@_dataclass(frozen=True)
class ApprovalNeeded:
    """A hand-made assignment of a role that requires approval: checked, not made yet."""

    role: Role
    subject_type: str
    subject_id: str
    organization_id: str | None
    expires_at: datetime | None
    approver_id: str


@needs_permission(
    "realm.roles.write",
    unless=lambda args: args["source_run_id"] is not None,
    exempt="a run's step: the published definition and the grant ceiling stand in for it",
)
async def create_assignment(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    *,
    role_id: str,
    user_id: str | None = None,
    service_principal_id: str | None = None,
    organization_id: str | None = None,
    expires_at: datetime | None = None,
    approver_id: str | None = None,
    source_run_id: str | None = None,
    approved: bool = False,
) -> RoleAssignment | ApprovalNeeded:
    """Assign a role to a user or a service principal, realm-wide or in one organization.

    A role that requires approval, assigned by hand (not by a run, whose approval step decided
    already), is not assigned at once: every check passes first, then the named approver gets an
    approval request (returned instead of the assignment), and the assignment is made when they
    approve it (``approved=True``, in the decision's transaction, with the same checks again).

    The granter's ``authority`` must cover the role in that scope; a role that requires approval
    needs an independent approver (an active user, neither granter nor subject, who could
    assign the role). A naive ``expires_at`` is read as UTC.
    """
    issues: list[Issue] = []
    if user_id and service_principal_id:
        issues.append(
            Issue("/service_principal_id", "exclusive", "give either user_id or service_principal_id, not both")
        )
    elif not user_id and not service_principal_id:
        issues.append(Issue("/user_id", "required", "give user_id or service_principal_id"))
    if expires_at is not None:
        try:
            expires_at = _aware(expires_at).astimezone(UTC)
        except OverflowError:
            issues.append(Issue("/expires_at", "out_of_range", "must fall within the years 1 to 9999 in UTC"))
            expires_at = None
        else:
            issues += rules.expiry_issues(expires_at, SYSTEM_CLOCK.now())
    role = await session.get(Role, role_id)
    if role is not None and role.realm_id != actor.realm_id:
        role = None
    if role is not None:
        issues += rules.assignment_scope_issues(role.name, role.boundary, organization_id)
    raise_issues(issues)
    if role is None:
        raise NotFound("No such role.")
    subject_id: str
    subject_type: str
    if user_id:
        user = await session.get(User, user_id)
        if user is None or user.realm_id != actor.realm_id:
            raise NotFound("No such user.")
        subject_id, subject_type = user.id, "user"
    else:
        assert service_principal_id is not None
        sp = await session.get(ServicePrincipal, service_principal_id)
        if sp is None or sp.realm_id != actor.realm_id:
            raise NotFound("No such service principal.")
        subject_id, subject_type = sp.id, "service_principal"
    if organization_id:
        org = await session.get(Organization, organization_id)
        if org is None or org.realm_id != actor.realm_id:
            raise NotFound("No such organization.")
    approver_authority: Authority | None = None
    if approver_id:
        approver = await session.get(User, approver_id)
        if approver is None or approver.realm_id != actor.realm_id or approver.status != "active":
            raise Forbidden("The approver must be an active user of the realm.")
        approver_authority = await load_authority(session, actor.realm_id, "user", approver.id)
    scope = grant_scope(role, organization_id)
    check_assignment(
        authority,
        role_name=role.name,
        role_permissions=role.permissions,
        requires_approval=role.requires_approval,
        organization_id=scope,
        subject_id=subject_id,
        approver=approver_authority,
    )
    await require_authority_over(
        session, actor.realm_id, authority, subject_type, subject_id, what="change what they hold"
    )
    if approver_id and source_run_id is None:
        # A hand-made grant's approver is a second person independent of the granter.
        await require_independent(
            session,
            actor,
            actor.principal_id,
            lambda held: held.can_assign(role.permissions, scope),
            refused_event="role.assignment.approver_refused",
            subject_type=subject_type,
            subject_id=subject_id,
            details={"role_id": role.id, "organization_id": organization_id or None},
            named=approver_id,
        )
    subject_column = col(RoleAssignment.user_id) if user_id else col(RoleAssignment.service_principal_id)
    duplicate = await holds_grant(session, actor.realm_id, role.id, subject_column, subject_id, organization_id)
    rules.refuse_duplicate_grant(duplicate, subject_type, role.name)
    if role.requires_approval and source_run_id is None and not approved:
        assert approver_id is not None  # check_assignment requires one for such a role
        # Every check passed; the caller records the request (engine.runs.approvals) for the approver.
        return ApprovalNeeded(
            role=role,
            subject_type=subject_type,
            subject_id=subject_id,
            organization_id=organization_id or None,
            expires_at=expires_at,
            approver_id=approver_id,
        )
    return await apply_assignment(
        session,
        actor,
        assignment_id=new_id("ras"),
        role_id=role.id,
        role_name=role.name,
        subject_type=subject_type,
        subject_id=subject_id,
        organization_id=organization_id or None,
        expires_at=expires_at,
        approver_id=approver_id or None,
        source_run_id=source_run_id,
    )


async def holds_grant(
    session: AsyncSession,
    realm_id: str,
    role_id: str,
    subject_column: Any,
    subject_id: str,
    organization_id: str | None,
) -> bool:
    """Does the subject hold the role in that scope now (an expired grant does not count)?"""
    count = await session.scalar(
        select(func.count())
        .select_from(RoleAssignment)
        .where(
            col(RoleAssignment.realm_id) == realm_id,
            col(RoleAssignment.role_id) == role_id,
            subject_column == subject_id,
            col(RoleAssignment.organization_id).is_(None)
            if organization_id is None
            else col(RoleAssignment.organization_id) == organization_id,
            or_(col(RoleAssignment.expires_at).is_(None), col(RoleAssignment.expires_at) > SYSTEM_CLOCK.now()),
        )
    )
    return bool(count)


async def apply_assignment(
    session: AsyncSession,
    actor: Actor,
    *,
    assignment_id: str,
    role_id: str,
    role_name: str,
    subject_type: str,
    subject_id: str,
    organization_id: str | None,
    expires_at: datetime | None,
    approver_id: str | None,
    source_run_id: str | None,
) -> RoleAssignment:
    """Write a grant every rule already allowed, and its ``role.assigned`` audit event."""
    assignment = RoleAssignment(
        id=assignment_id,
        realm_id=actor.realm_id,
        role_id=role_id,
        user_id=subject_id if subject_type == "user" else None,
        service_principal_id=subject_id if subject_type == "service_principal" else None,
        organization_id=organization_id,
        expires_at=expires_at,
        granted_by=actor.id,
        approver_id=approver_id,
        source_run_id=source_run_id,
    )
    session.add(assignment)
    await session.flush()
    await record_audit(
        session,
        actor,
        "role.assigned",
        category="authorization",
        subject_type=subject_type,
        subject_id=subject_id,
        details=rules.assigned_details(
            assignment_id=assignment.id,
            role_id=role_id,
            role_name=role_name,
            organization_id=organization_id,
            expires_at=expires_at,
            approver_id=approver_id,
        ),
    )
    return assignment


@needs_permission(
    "realm.roles.write",
    unless=lambda args: args["source_run_id"] is not None,
    exempt="a run's step: the published definition and the grant ceiling stand in for it",
)
async def revoke_assignment(
    session: AsyncSession,
    actor: Actor,
    authority: Authority,
    assignment_id: str,
    *,
    source_run_id: str | None = None,
) -> RoleAssignment:
    """Remove an assignment; the caller needs the ceiling for that role in that scope too
    (``source_run_id``: the run whose ``remove_role`` step revokes it)."""
    assignment = await get_assignment(session, actor.realm_id, assignment_id)
    role = await get_role(session, actor.realm_id, assignment.role_id)
    require_ceiling(authority, role, assignment.organization_id, "revoke")
    subject_type = "user" if assignment.user_id else "service_principal"
    subject_id = assignment.user_id or assignment.service_principal_id
    assert subject_id is not None
    await require_authority_over(
        session, actor.realm_id, authority, subject_type, subject_id, what="change what they hold"
    )
    await apply_revocation(session, actor, assignment, role.name)
    return assignment


async def apply_revocation(session: AsyncSession, actor: Actor, assignment: RoleAssignment, role_name: str) -> None:
    """Delete a grant every rule already allowed to revoke, and write its ``role.revoked`` audit
    event. Whoever decided it (an administrator or a run), the realm keeps an active administrator
    (409 ``last_admin``)."""
    admin_grant = assignment.user_id is not None and await holds_admin_role(session, [assignment.role_id])
    async with keeping_an_admin(session, assignment.realm_id, check=admin_grant):
        await session.delete(assignment)
        await session.flush()
    await record_audit(
        session,
        actor,
        "role.revoked",
        category="authorization",
        subject_type="user" if assignment.user_id else "service_principal",
        subject_id=assignment.user_id or assignment.service_principal_id,
        details=rules.revoked_details(
            assignment_id=assignment.id,
            role_id=assignment.role_id,
            role_name=role_name,
            organization_id=assignment.organization_id,
        ),
    )


async def expire_due_assignments(session: AsyncSession, now: datetime, *, limit: int = EXPIRY_BATCH) -> int:
    """Delete up to ``limit`` assignments whose ``expires_at`` has passed; returns how many.

    Each one writes, in this transaction, the outbox event ``role.assignment.expired`` and an
    audit event by the system. Rows are claimed with ``FOR UPDATE SKIP LOCKED``, so two workers
    running this at once never expire the same assignment twice.
    """
    result = await session.execute(
        select(RoleAssignment, col(Role.name))
        .join(Role, col(Role.id) == col(RoleAssignment.role_id))
        .where(col(RoleAssignment.expires_at).is_not(None), col(RoleAssignment.expires_at) <= now)
        .order_by(col(RoleAssignment.expires_at))
        .limit(limit)
        .with_for_update(skip_locked=True, of=RoleAssignment)
    )
    rows = result.all()
    if not rows:
        return 0
    await session.execute(delete(RoleAssignment).where(col(RoleAssignment.id).in_([a.id for a, _ in rows])))
    for assignment, role_name in rows:
        actor = Actor.system(assignment.realm_id)
        subject_id = assignment.user_id or assignment.service_principal_id
        payload = {
            "assignment_id": assignment.id,
            "role_id": assignment.role_id,
            "user_id": assignment.user_id,
            "service_principal_id": assignment.service_principal_id,
            "organization_id": assignment.organization_id,
            "expires_at": assignment.expires_at.isoformat() if assignment.expires_at else None,
        }
        await emit_event(
            session,
            actor,
            "role.assignment.expired",
            subject_id=subject_id,
            organization_id=assignment.organization_id,
            payload=payload,
        )
        await record_audit(
            session,
            actor,
            "role.assignment.expired",
            category="authorization",
            subject_type="user" if assignment.user_id else "service_principal",
            subject_id=subject_id,
            details=payload | {"role": role_name},
        )
    return len(rows)


async def principal_labels(session: AsyncSession, realm_id: str, ids: Iterable[str | None]) -> dict[str, str]:
    """Email of each user and name of each service principal among ``ids`` (missing ones left out)."""
    wanted = {i for i in ids if i}
    users = [i for i in wanted if i.startswith("usr_")]
    sps = [i for i in wanted if i.startswith("spn_")]
    out: dict[str, str] = {}
    if users:
        rows = await session.execute(
            select(col(User.id), col(User.email)).where(col(User.realm_id) == realm_id, col(User.id).in_(users))
        )
        out |= {uid: email for uid, email in rows}
    if sps:
        rows = await session.execute(
            select(col(ServicePrincipal.id), col(ServicePrincipal.name)).where(
                col(ServicePrincipal.realm_id) == realm_id,
                col(ServicePrincipal.id).in_(sps),
            )
        )
        out |= {sid: name for sid, name in rows}
    return out
