"""Indexes for the cockpit's read paths at millions of runs.

- ``(realm_id, state, id)``: the run list filtered by state, newest first, without reading the
  runs of other states;
- ``(realm_id, subject_id, id)`` replaces ``(realm_id, subject_id)``: a subject's runs newest
  first without a sort;
- ``(realm_id, finished_at, state)``: the realm home's runs in flight (its NULL end) and outcomes
  of the last 24 hours (a short range), both from the index alone;

The realm's oldest due run reads ``ix_workflow_runs_realm_due`` (made by 0006 for the claim).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_workflow_runs_realm_state_id", "workflow_runs", ["realm_id", "state", "id"], unique=False)
    op.drop_index("ix_workflow_runs_subject_id", table_name="workflow_runs")
    op.create_index(
        "ix_workflow_runs_realm_subject_id", "workflow_runs", ["realm_id", "subject_id", "id"], unique=False
    )
    op.create_index(
        "ix_workflow_runs_realm_finished", "workflow_runs", ["realm_id", "finished_at", "state"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_runs_realm_finished", table_name="workflow_runs")
    op.drop_index("ix_workflow_runs_realm_subject_id", table_name="workflow_runs")
    op.create_index("ix_workflow_runs_subject_id", "workflow_runs", ["realm_id", "subject_id"], unique=False)
    op.drop_index("ix_workflow_runs_realm_state_id", table_name="workflow_runs")
