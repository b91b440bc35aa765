"""A run's attempts are indexed with their start: the newest attempts of many runs from the index.

A workflow's diagnostics read the newest 1,000 attempts of its newest 500 runs. With 20 steps a
run that is 10,000 attempts, and reading them all from the table to keep the newest 1,000 took
tens of milliseconds at a million runs. ``(run_id, started_at)`` answers the 1,000th newest start
from the index alone, and only the attempts from then on are read. It replaces the index on
``run_id`` alone (every look-up by run uses the new one), so an attempt's insert maintains as
many indexes as before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_step_attempts_run_id_started_at", "step_attempts", ["run_id", "started_at"], if_not_exists=True)
    op.drop_index("ix_step_attempts_run_id", table_name="step_attempts")


def downgrade() -> None:
    op.create_index("ix_step_attempts_run_id", "step_attempts", ["run_id"])
    op.drop_index("ix_step_attempts_run_id_started_at", table_name="step_attempts")
