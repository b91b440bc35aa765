"""Read models of the cockpit's overview pages: a realm at a glance, a user with what they hold.

Only reads, always filtered by realm. Whether the caller may see each part is decided by the
caller (a count it may not read is shown as unknown, never as 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased
from sqlmodel import col

from engine.directory.models import (
    AuditEvent,
    Group,
    GroupMember,
    Membership,
    Organization,
    Role,
    RoleAssignment,
    User,
    WebhookSubscription,
)

# name -> (the permission that lets one read it, label)
REALM_COUNTS: dict[str, tuple[str, str]] = {
    "users": ("realm.users.read", "Users"),
    "organizations": ("realm.organizations.read", "Organizations"),
    "roles": ("realm.roles.read", "Roles"),
    "groups": ("realm.organizations.read", "Groups"),
    "webhooks": ("realm.webhooks.read", "Webhooks"),
}


async def realm_counts(session: AsyncSession, realm_id: str, names: set[str]) -> dict[str, int]:
    """How many of each directory resource the realm has (only the ``names`` asked for), in one query."""
    queries = {
        "users": select(func.count()).select_from(User).where(col(User.realm_id) == realm_id),
        "organizations": select(func.count()).select_from(Organization).where(col(Organization.realm_id) == realm_id),
        "roles": select(func.count()).select_from(Role).where(col(Role.realm_id) == realm_id),
        "groups": select(func.count()).select_from(Group).where(col(Group.realm_id) == realm_id),
        "webhooks": select(func.count())
        .select_from(WebhookSubscription)
        .where(col(WebhookSubscription.realm_id) == realm_id, col(WebhookSubscription.state) != "deleted"),
    }
    wanted = [name for name in queries if name in names]
    if not wanted:
        return {}
    row = (await session.execute(select(*(queries[name].scalar_subquery() for name in wanted)))).one()
    return {name: int(value or 0) for name, value in zip(wanted, row, strict=True)}


async def latest_audit_events(session: AsyncSession, realm_id: str, limit: int = 10) -> list[AuditEvent]:
    result = await session.execute(
        select(AuditEvent).where(col(AuditEvent.realm_id) == realm_id).order_by(col(AuditEvent.id).desc()).limit(limit)
    )
    return list(result.scalars().all())


async def latest_audit_events_with_names(
    session: AsyncSession, realm_id: str, limit: int = 10
) -> tuple[list[AuditEvent], dict[str, str]]:
    """The newest audit events and the emails of the users among their actors and subjects, in one query."""
    actor = aliased(User)
    subject = aliased(User)
    rows = await session.execute(
        select(AuditEvent, col(actor.email), col(subject.email))
        .outerjoin(
            actor, (col(actor.id) == col(AuditEvent.actor_id)) & (col(actor.realm_id) == col(AuditEvent.realm_id))
        )
        .outerjoin(
            subject,
            (col(subject.id) == col(AuditEvent.subject_id)) & (col(subject.realm_id) == col(AuditEvent.realm_id)),
        )
        .where(col(AuditEvent.realm_id) == realm_id)
        .order_by(col(AuditEvent.id).desc())
        .limit(limit)
    )
    events: list[AuditEvent] = []
    names: dict[str, str] = {}
    for event, actor_email, subject_email in rows:
        events.append(event)
        if actor_email is not None and event.actor_id:
            names[event.actor_id] = actor_email
        if subject_email is not None and event.subject_id:
            names[event.subject_id] = subject_email
    return events, names


async def principal_names(session: AsyncSession, realm_id: str, ids: set[str]) -> dict[str, str]:
    """Emails of the users among ``ids`` (to show actors and subjects by name)."""
    user_ids = [i for i in ids if i and i.startswith("usr_")]
    if not user_ids:
        return {}
    rows = await session.execute(
        select(col(User.id), col(User.email)).where(col(User.realm_id) == realm_id, col(User.id).in_(user_ids))
    )
    return {row[0]: row[1] for row in rows}


@dataclass(frozen=True)
class ObjectName:
    """What a page shows for an id: a name, and the path of its page under the realm (or None)."""

    name: str
    path: str | None


# Each kind of object a page names, by id: (id, name, path of its page under the realm).
_NAMED = """
    SELECT id, email AS name, '/users/' || id AS path FROM users WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT id, name, '/service-principals/' || id
      FROM service_principals WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT id, name, '/organizations/' || id
      FROM organizations WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT id, name, '/organizations/' || organization_id || '/groups/' || id
      FROM groups WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT id, name, '/roles/' || id FROM roles WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT id, name, '/workflows/' || id FROM workflows WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT id, destination, NULL
      FROM webhook_subscriptions WHERE realm_id = :realm AND id IN (SELECT id FROM ids)
    UNION ALL SELECT r.id,
           coalesce(w.name, 'A deleted workflow') || ' for ' || coalesce(u.display_name, 'a former user'),
           '/runs/' || r.id
      FROM workflow_runs r LEFT JOIN workflows w ON w.id = r.workflow_id
      LEFT JOIN users u ON u.id = r.subject_id AND u.realm_id = r.realm_id
     WHERE r.realm_id = :realm AND r.id IN (SELECT id FROM ids)
    UNION ALL SELECT a.id, 'approval of ' || coalesce(w.name, ro.name, 'a deleted workflow')
             || ' for ' || coalesce(u.display_name, 'a former user'),
           CASE WHEN a.run_id IS NOT NULL THEN '/runs/' || a.run_id END
      FROM workflow_approvals a LEFT JOIN workflows w ON w.id = a.workflow_id
      LEFT JOIN roles ro ON ro.id = a.request ->> 'role_id' AND ro.realm_id = a.realm_id
      LEFT JOIN users u ON u.id = a.subject_id AND u.realm_id = a.realm_id
     WHERE a.realm_id = :realm AND a.id IN (SELECT id FROM ids)
"""
_ACTIVITY_SQL = text(
    """
    WITH ev AS (
      SELECT id, occurred_at, type, actor_type, actor_id, subject_type, subject_id FROM audit_events
      WHERE realm_id = :realm ORDER BY id DESC LIMIT :limit
    ), ids AS (
      SELECT actor_id AS id FROM ev WHERE actor_id IS NOT NULL
      UNION SELECT subject_id FROM ev WHERE subject_id IS NOT NULL
    ), named AS ("""
    + _NAMED
    + """)
    SELECT ev.*, a.name AS actor_name, a.path AS actor_path, s.name AS subject_name, s.path AS subject_path
    FROM ev LEFT JOIN named a ON a.id = ev.actor_id LEFT JOIN named s ON s.id = ev.subject_id
    ORDER BY ev.id DESC
    """
)


@dataclass(frozen=True)
class ActivityLine:
    """An audit event as the realm's home lists it."""

    id: str
    occurred_at: datetime
    type: str
    actor_type: str
    actor_id: str | None
    subject_type: str | None
    subject_id: str | None


async def latest_activity(
    session: AsyncSession, realm_id: str, limit: int = 10
) -> tuple[list[ActivityLine], dict[str, ObjectName]]:
    """The newest audit events with the names of everything they name, in one query."""
    rows = await session.execute(_ACTIVITY_SQL, {"realm": realm_id, "limit": limit})
    events: list[ActivityLine] = []
    names: dict[str, ObjectName] = {}
    for row in rows:
        events.append(
            ActivityLine(
                row.id, row.occurred_at, row.type, row.actor_type, row.actor_id, row.subject_type, row.subject_id
            )
        )
        if row.actor_id and row.actor_name is not None:
            names[row.actor_id] = ObjectName(row.actor_name, row.actor_path)
        if row.subject_id and row.subject_name is not None:
            names[row.subject_id] = ObjectName(row.subject_name, row.subject_path)
    return events, names


@dataclass(frozen=True)
class MembershipLine:
    organization_id: str
    organization_name: str
    organization_state: str
    since: datetime


@dataclass(frozen=True)
class AssignmentLine:
    id: str
    role_id: str
    role_name: str
    requires_approval: bool
    organization_id: str | None
    organization_name: str | None
    expires_at: datetime | None
    granted_by: str | None
    approver_id: str | None
    source_run_id: str | None
    created_at: datetime


@dataclass(frozen=True)
class GroupLine:
    group_id: str
    group_name: str
    organization_id: str
    organization_name: str


async def user_memberships(session: AsyncSession, realm_id: str, user_id: str) -> list[MembershipLine]:
    rows = await session.execute(
        select(Membership, Organization)
        .join(Organization, col(Organization.id) == col(Membership.organization_id))
        .where(col(Membership.realm_id) == realm_id, col(Membership.user_id) == user_id)
        .order_by(col(Organization.name))
    )
    return [MembershipLine(org.id, org.name, org.state, m.created_at) for m, org in rows]


async def user_assignments(session: AsyncSession, realm_id: str, user_id: str) -> list[AssignmentLine]:
    return await principal_assignments(session, realm_id, user_id)


async def principal_assignments(session: AsyncSession, realm_id: str, principal_id: str) -> list[AssignmentLine]:
    """The roles assigned directly to a user (``usr_``) or a service principal (``spn_``)."""
    holder = (
        col(RoleAssignment.service_principal_id) if principal_id.startswith("spn_") else col(RoleAssignment.user_id)
    )
    rows = await session.execute(
        select(RoleAssignment, Role, Organization)
        .join(Role, col(Role.id) == col(RoleAssignment.role_id))
        .outerjoin(Organization, col(Organization.id) == col(RoleAssignment.organization_id))
        .where(col(RoleAssignment.realm_id) == realm_id, holder == principal_id)
        .order_by(col(RoleAssignment.id))
    )
    return [
        AssignmentLine(
            id=ra.id,
            role_id=role.id,
            role_name=role.name,
            requires_approval=role.requires_approval,
            organization_id=ra.organization_id,
            organization_name=org.name if org is not None else None,
            expires_at=ra.expires_at,
            granted_by=ra.granted_by,
            approver_id=ra.approver_id,
            source_run_id=ra.source_run_id,
            created_at=ra.created_at,
        )
        for ra, role, org in rows
    ]


async def user_groups(session: AsyncSession, realm_id: str, user_id: str) -> list[GroupLine]:
    rows = await session.execute(
        select(Group, Organization)
        .join(GroupMember, col(GroupMember.group_id) == col(Group.id))
        .join(Organization, col(Organization.id) == col(Group.organization_id))
        .where(col(GroupMember.realm_id) == realm_id, col(GroupMember.user_id) == user_id)
        .order_by(col(Organization.name), col(Group.name))
    )
    return [GroupLine(group.id, group.name, org.id, org.name) for group, org in rows]


@dataclass
class WorkflowKpis:
    """The workflow strip of the realm's home. None means unknown (shown as "—", never as 0)."""

    active_workflows: int | None = None
    runs_in_flight: int | None = None
    failed_24h: int | None = None
    compensated_24h: int | None = None
    compensation_failed_24h: int | None = None
    # Ended because an approver said no: decisions, counted apart from the failures above.
    rejected_24h: int | None = None
    pending_approvals: int | None = None
    # Revisions of workflows that need approval, waiting for a review the reader may give (not their own).
    reviews_waiting: int | None = None
    oldest_due_run_at: datetime | None = None
    oldest_due_run_id: str | None = None


# The workflow strip in one statement. Served by ix_workflow_runs_realm_finished
# (realm_id, finished_at, state): the runs in flight are its NULL end, the last 24 hours a short
# range; the oldest due run comes from ix_workflow_runs_realm_due (realm_id, due_at).
_KPIS_SQL = text(
    """
    SELECT
      (SELECT count(*) FROM workflows WHERE realm_id = :r AND state = 'active'),
      (SELECT count(*) FROM workflow_runs WHERE realm_id = :r AND finished_at IS NULL),
      day.failed, day.compensated, day.compensation_failed,
      oldest.id, oldest.due_at,
      (SELECT count(*) FROM workflow_approvals WHERE realm_id = :r AND status = 'pending'),
      (SELECT count(*) FROM workflow_revisions v JOIN workflows w ON w.id = v.workflow_id
        WHERE v.realm_id = :r AND v.status = 'draft' AND w.requires_approval
          AND v.number > coalesce(w.published_revision, 0) AND v.author_id IS DISTINCT FROM :me),
      day.rejected
    FROM (
      SELECT count(*) FILTER (WHERE state = 'failed' AND NOT decided) AS failed,
             count(*) FILTER (WHERE state = 'compensated' AND NOT decided) AS compensated,
             count(*) FILTER (WHERE state = 'compensation_failed') AS compensation_failed,
             count(*) FILTER (WHERE decided) AS rejected
        FROM (SELECT state, coalesce(error_category = ANY(CAST(:decisions AS text[])), false) AS decided
                FROM workflow_runs
               WHERE realm_id = :r AND finished_at > now() - interval '24 hours') finished
    ) day
    LEFT JOIN LATERAL (
      SELECT id, due_at FROM workflow_runs
       WHERE realm_id = :r AND due_at IS NOT NULL AND state IN ('pending', 'running', 'compensating')
       ORDER BY due_at LIMIT 1
    ) oldest ON true
    """
)


async def workflow_kpis(
    session: AsyncSession, realm_id: str, reader_id: str | None = None, *, decisions: Iterable[str] = ()
) -> WorkflowKpis:
    """``decisions``: the error categories that record a person's decision (engine/runs/outcome.py
    ``DECISION_CATEGORIES``): such runs count as rejected, not failed or compensated."""
    row = (await session.execute(_KPIS_SQL, {"r": realm_id, "me": reader_id, "decisions": sorted(decisions)})).one()
    return WorkflowKpis(
        active_workflows=int(row[0]),
        runs_in_flight=int(row[1]),
        failed_24h=int(row[2]),
        compensated_24h=int(row[3]),
        compensation_failed_24h=int(row[4]),
        rejected_24h=int(row[9]),
        pending_approvals=int(row[7]),
        reviews_waiting=int(row[8]),
        oldest_due_run_at=row[6],
        oldest_due_run_id=row[5],
    )
