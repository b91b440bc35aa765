"""The audit trail and the transactional outbox.

Both are written with the session of the change, so they commit or roll back with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.models import AuditEvent, OutboxEvent
from engine.platform.ids import new_id

# Event types that can trigger workflows (SPEC §2).
TRIGGER_EVENT_TYPES = (
    "user.created",
    "user.suspended",
    "user.reactivated",
    "organization.membership.added",
    "organization.membership.removed",
    "role.assignment.expired",
)

# Events for automation: how a run ended, and an approval step asked and decided. They are
# delivered to webhook subscriptions like the directory's events, and never start a run.
RUN_OUTCOME_EVENT_TYPES = (
    "workflow.run.succeeded",
    "workflow.run.failed",
    "workflow.run.compensated",
    "workflow.run.compensation_failed",
    "workflow.run.cancelled",
)
APPROVAL_EVENT_TYPES = (
    "workflow.approval.requested",
    "workflow.approval.approved",
    "workflow.approval.rejected",
    "workflow.approval.expired",
)
# Everything a webhook subscription can select in ``event_types``.
DELIVERABLE_EVENT_TYPES = TRIGGER_EVENT_TYPES + RUN_OUTCOME_EVENT_TYPES + APPROVAL_EVENT_TYPES


@dataclass(frozen=True)
class Actor:
    """Who acts, and under which request: written on every audit event."""

    type: str  # user | service_principal | system | workflow_run
    id: str | None
    realm_id: str
    request_id: str | None = None
    correlation_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # A person in a browser session with a verified second factor (not a token, not a run).
    mfa_session: bool = False

    @classmethod
    def system(cls, realm_id: str, request_id: str | None = None) -> Actor:
        return cls(type="system", id=None, realm_id=realm_id, request_id=request_id)

    def with_request(self, request_id: str | None) -> Actor:
        return replace(self, request_id=request_id)

    @property
    def principal_id(self) -> str | None:
        """The user or service principal acting (a run acts as its publisher); None for the system."""
        return self.id if self.type in ("user", "service_principal") else None


async def record_audit(
    session: AsyncSession,
    actor: Actor,
    type: str,
    *,
    category: str = "directory",
    subject_type: str | None = None,
    subject_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    event = AuditEvent(
        id=new_id("aud"),
        realm_id=actor.realm_id,
        actor_type=actor.type,
        actor_id=actor.id,
        category=category,
        type=type,
        subject_type=subject_type,
        subject_id=subject_id,
        request_id=actor.request_id,
        correlation_id=actor.correlation_id or actor.request_id,
        details=details or {},
    )
    session.add(event)
    await session.flush()
    return event


async def emit_event(
    session: AsyncSession,
    actor: Actor,
    type: str,
    *,
    subject_id: str | None,
    organization_id: str | None = None,
    payload: dict[str, Any] | None = None,
) -> OutboxEvent:
    event = OutboxEvent(
        id=new_id("obx"),
        realm_id=actor.realm_id,
        type=type,
        subject_id=subject_id,
        organization_id=organization_id,
        payload=payload or {},
        correlation_id=actor.correlation_id or actor.request_id,
    )
    session.add(event)
    await session.flush()
    # Wake the dispatcher when this transaction commits.
    await session.execute(text("SELECT pg_notify('cockpit_outbox', '')"))
    return event
