"""A finished run has no due time and no lease; due runs are indexed by realm for the claim.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

FINISHED = "('succeeded', 'failed', 'compensated', 'compensation_failed', 'cancelled')"


def upgrade() -> None:
    # Runs that finished and were made due again by an older enable: finished for good.
    op.execute(
        "UPDATE workflow_runs SET due_at = NULL, lease_owner = NULL, lease_expires_at = NULL, "
        "context = context - 'paused_due_at' "
        f"WHERE state IN {FINISHED} "
        "AND (due_at IS NOT NULL OR lease_owner IS NOT NULL OR lease_expires_at IS NOT NULL "
        "OR context ? 'paused_due_at')"
    )
    op.create_check_constraint(
        op.f("ck_workflow_runs_finished_not_due"),
        "workflow_runs",
        f"state NOT IN {FINISHED} OR (due_at IS NULL AND lease_owner IS NULL AND lease_expires_at IS NULL)",
    )
    op.drop_index("ix_workflow_runs_due", table_name="workflow_runs", postgresql_where=sa.text("due_at IS NOT NULL"))
    op.create_index(
        "ix_workflow_runs_realm_due",
        "workflow_runs",
        ["realm_id", "due_at"],
        postgresql_where=sa.text("due_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_workflow_runs_realm_due", table_name="workflow_runs", postgresql_where=sa.text("due_at IS NOT NULL")
    )
    op.create_index("ix_workflow_runs_due", "workflow_runs", ["due_at"], postgresql_where=sa.text("due_at IS NOT NULL"))
    op.drop_constraint(op.f("ck_workflow_runs_finished_not_due"), "workflow_runs", type_="check")
