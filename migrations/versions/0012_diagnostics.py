"""Resolutions of runs whose compensation failed, and the index diagnostics read runs by.

- ``run_resolutions``: an administrator marks a ``compensation_failed`` run resolved (what was
  left to undo has been undone by hand) with a note. The run keeps its state; the resolution is
  a row of its own, so the run tables and the engine's hot path are not touched.

Revision ID: 0012
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_resolutions",
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("realm_id", sa.String(length=40), nullable=False),
        sa.Column("resolved_by", sa.String(length=40), nullable=False),
        sa.Column("note", sa.String(length=2000), nullable=False),
        sa.Column("resolved_at", postgresql.TIMESTAMP(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["workflow_runs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["realm_id"], ["realms.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id"),
    )
    op.create_index("ix_run_resolutions_realm_id", "run_resolutions", ["realm_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_run_resolutions_realm_id", table_name="run_resolutions")
    op.drop_table("run_resolutions")
