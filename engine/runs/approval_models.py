"""Tables of the human side of runs: approvals (and their one-time decision links) and notices.

An approval is the decision an ``approval`` step waits for (seed 000 "Concepts": Approval); a
notice is one message a ``notify`` step (or an approval request) sends to one user.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, Index, String, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlmodel import Field, SQLModel

from engine.platform.tables import tz_column, utcnow

NOTICE_STATES = ("queued", "sent", "failed", "not_configured")
PENDING, APPROVED, REJECTED, EXPIRED, CANCELLED = "pending", "approved", "rejected", "expired", "cancelled"
WORKFLOW_STEP, ROLE_ASSIGNMENT = "workflow_step", "role_assignment"
APPROVAL_STATUSES = (PENDING, APPROVED, REJECTED, EXPIRED, CANCELLED)
DECISION_CATEGORY = "authorization"  # approval decisions (seed 000 "Authority and accountability")


class WorkflowApproval(SQLModel, table=True):
    """One approval step of one run: who may decide, until when, and the decision.

    ``approvers`` are the eligible deciders, fixed when the request is made (named, active, not a
    guest, never the subject); a delegation swaps the delegator for the delegate. The first
    decision wins: deciding is a conditional update from ``pending``.
    """

    __tablename__ = "workflow_approvals"
    __table_args__ = (
        UniqueConstraint("run_id", "step_id"),
        CheckConstraint(
            "status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')",
            name="status",
        ),
        CheckConstraint("kind IN ('workflow_step', 'role_assignment')", name="kind"),
        # A step's approval belongs to a run; a role assignment's carries the assignment asked for.
        CheckConstraint(
            "(kind = 'workflow_step' AND run_id IS NOT NULL AND workflow_id IS NOT NULL AND step_id IS NOT NULL)"
            " OR (kind = 'role_assignment' AND request IS NOT NULL)",
            name="kind_shape",
        ),
        # "Waiting for me" and the pending counts (home, diagnostics) read only pending rows.
        Index("ix_workflow_approvals_realm_status", "realm_id", "status", "workflow_id"),
        Index("ix_workflow_approvals_approvers", "approvers", postgresql_using="gin"),
        Index("ix_workflow_approvals_realm_decided_by", "realm_id", "decided_by", "decided_at"),
        # A run's approvals (the list's filter, the timeline).
        Index("ix_workflow_approvals_run_id", "run_id", postgresql_where=text("run_id IS NOT NULL")),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    kind: str = Field(
        default="workflow_step", sa_column=Column(String(30), nullable=False, server_default="workflow_step")
    )
    run_id: str | None = Field(default=None, foreign_key="workflow_runs.id", max_length=40, ondelete="CASCADE")
    workflow_id: str | None = Field(default=None, foreign_key="workflows.id", max_length=40, ondelete="CASCADE")
    step_id: str | None = Field(default=None, max_length=40)
    step_index: int | None = Field(default=None)
    # kind role_assignment: {role_id, user_id | service_principal_id, organization_id, expires_at, requested_by}
    request: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    subject_id: str = Field(max_length=40)
    approvers: list[str] = Field(sa_column=Column(ARRAY(String(40)), nullable=False))
    status: str = Field(default="pending", max_length=20)
    expires_at: datetime = Field(sa_column=tz_column())
    remind_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    reminded_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    decided_by: str | None = Field(default=None, max_length=40)
    decided_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    comment: str | None = Field(default=None, max_length=1000)
    delegations: list[dict[str, Any]] = Field(
        sa_column=Column(JSONB, nullable=False, server_default=text("'[]'::jsonb"))
    )
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class ApprovalLink(SQLModel, table=True):
    """A one-time link to an approval's decision page, sent in a notice: only its hash is kept."""

    __tablename__ = "approval_links"

    id: str = Field(primary_key=True, max_length=40)
    token_hash: str = Field(max_length=64, unique=True)
    approval_id: str = Field(foreign_key="workflow_approvals.id", max_length=40, ondelete="CASCADE", index=True)
    user_id: str = Field(foreign_key="users.id", max_length=40, ondelete="CASCADE")
    expires_at: datetime = Field(sa_column=tz_column())
    used_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class WorkflowNotice(SQLModel, table=True):
    """One message to one user, rendered when recorded, sent after its transaction commits."""

    __tablename__ = "workflow_notices"
    __table_args__ = (
        CheckConstraint("state IN ('queued', 'sent', 'failed', 'not_configured')", name="state"),
        # The sender reads only queued notices that are due.
        Index("ix_workflow_notices_due", "next_attempt_at", postgresql_where=text("state = 'queued'")),
        Index("ix_workflow_notices_realm_id_id", "realm_id", "id"),
        Index("ix_workflow_notices_run_id", "run_id"),
        Index("ix_workflow_notices_realm_user_id", "realm_id", "user_id", "id"),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    run_id: str | None = Field(default=None, foreign_key="workflow_runs.id", max_length=40, ondelete="CASCADE")
    approval_id: str | None = Field(default=None, max_length=40)
    workflow_id: str | None = Field(default=None, max_length=40)
    user_id: str = Field(max_length=40)
    notice: str = Field(max_length=40)
    to_address: str | None = Field(default=None, max_length=254)
    subject: str = Field(max_length=300)
    body: str = Field(sa_column=Column(Text, nullable=False))
    state: str = Field(default="queued", max_length=20)
    attempts: int = Field(default=0)
    next_attempt_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    sent_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    last_error: str | None = Field(default=None, max_length=2000)
    # A one-time link the mail carries, encrypted with the operator key; the body keeps only
    # LINK_PLACEHOLDER. Cleared once the notice is sent or given up.
    link_enc: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
