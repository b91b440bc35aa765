"""Approvals (with one-time decision links) and notices.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _s(length: int) -> sqlmodel.sql.sqltypes.AutoString:
    return sqlmodel.sql.sqltypes.AutoString(length=length)


def upgrade() -> None:
    op.create_table(
        "workflow_approvals",
        sa.Column("id", _s(40), nullable=False),
        sa.Column("realm_id", _s(40), nullable=False),
        sa.Column("kind", sa.String(length=30), server_default="workflow_step", nullable=False),
        sa.Column("run_id", _s(40), nullable=True),
        sa.Column("workflow_id", _s(40), nullable=True),
        sa.Column("step_id", _s(40), nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("request", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("subject_id", _s(40), nullable=False),
        sa.Column("approvers", postgresql.ARRAY(sa.String(length=40)), nullable=False),
        sa.Column("status", _s(20), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("remind_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reminded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", _s(40), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("comment", _s(1000), nullable=True),
        sa.Column(
            "delegations",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')",
            name=op.f("ck_workflow_approvals_status"),
        ),
        sa.CheckConstraint("kind IN ('workflow_step', 'role_assignment')", name=op.f("ck_workflow_approvals_kind")),
        sa.CheckConstraint(
            "(kind = 'workflow_step' AND run_id IS NOT NULL AND workflow_id IS NOT NULL AND step_id IS NOT NULL)"
            " OR (kind = 'role_assignment' AND request IS NOT NULL)",
            name=op.f("ck_workflow_approvals_kind_shape"),
        ),
        sa.ForeignKeyConstraint(
            ["realm_id"], ["realms.id"], name=op.f("fk_workflow_approvals_realm_id_realms"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["workflow_runs.id"],
            name=op.f("fk_workflow_approvals_run_id_workflow_runs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["workflow_id"],
            ["workflows.id"],
            name=op.f("fk_workflow_approvals_workflow_id_workflows"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_approvals")),
        sa.UniqueConstraint("run_id", "step_id", name=op.f("uq_workflow_approvals_run_id_step_id")),
    )
    op.create_index("ix_workflow_approvals_realm_status", "workflow_approvals", ["realm_id", "status", "workflow_id"])
    op.create_index("ix_workflow_approvals_approvers", "workflow_approvals", ["approvers"], postgresql_using="gin")
    op.create_index(
        "ix_workflow_approvals_realm_decided_by", "workflow_approvals", ["realm_id", "decided_by", "decided_at"]
    )
    op.create_table(
        "approval_links",
        sa.Column("id", _s(40), nullable=False),
        sa.Column("token_hash", _s(64), nullable=False),
        sa.Column("approval_id", _s(40), nullable=False),
        sa.Column("user_id", _s(40), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["approval_id"],
            ["workflow_approvals.id"],
            name=op.f("fk_approval_links_approval_id_workflow_approvals"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_approval_links_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approval_links")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_approval_links_token_hash")),
    )
    op.create_index(op.f("ix_approval_links_approval_id"), "approval_links", ["approval_id"])
    op.create_table(
        "workflow_notices",
        sa.Column("id", _s(40), nullable=False),
        sa.Column("realm_id", _s(40), nullable=False),
        sa.Column("run_id", _s(40), nullable=True),
        sa.Column("approval_id", _s(40), nullable=True),
        sa.Column("workflow_id", _s(40), nullable=True),
        sa.Column("user_id", _s(40), nullable=False),
        sa.Column("notice", _s(40), nullable=False),
        sa.Column("to_address", _s(254), nullable=True),
        sa.Column("subject", _s(300), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("state", _s(20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", _s(2000), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'sent', 'failed', 'not_configured')", name=op.f("ck_workflow_notices_state")
        ),
        sa.ForeignKeyConstraint(
            ["realm_id"], ["realms.id"], name=op.f("fk_workflow_notices_realm_id_realms"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["workflow_runs.id"], name=op.f("fk_workflow_notices_run_id_workflow_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_notices")),
    )
    op.create_index(
        "ix_workflow_notices_due",
        "workflow_notices",
        ["next_attempt_at"],
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_index("ix_workflow_notices_realm_id_id", "workflow_notices", ["realm_id", "id"])
    op.create_index("ix_workflow_notices_run_id", "workflow_notices", ["run_id"])
    op.create_index("ix_workflow_notices_realm_user_id", "workflow_notices", ["realm_id", "user_id", "id"])


def downgrade() -> None:
    op.drop_table("workflow_notices")
    op.drop_table("approval_links")
    op.drop_table("workflow_approvals")
