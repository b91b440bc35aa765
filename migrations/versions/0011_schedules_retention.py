"""Schedules, re-runs and retention.

- ``workflow_schedule_firings``: one row per slot of a schedule trigger that fired; its unique
  ``(workflow_id, trigger_index, slot_at)`` makes a slot fire once however many schedulers run;
- ``workflow_runs.rerun_of``: the run a re-run repeats (``ON DELETE SET NULL``: retention may
  purge the original first), with a partial index for the timeline's "re-run as" links;
- ``ix_workflow_runs_finished_at``, partial on finished runs: retention takes the oldest first;
- ``maintenance_passes``: the last pass of a housekeeping task (retention's count and time).

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_runs", sa.Column("rerun_of", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
    op.create_foreign_key(
        op.f("fk_workflow_runs_rerun_of_workflow_runs"),
        "workflow_runs",
        "workflow_runs",
        ["rerun_of"],
        ["id"],
        ondelete="SET NULL",
    )
    op.create_index(
        "ix_workflow_runs_rerun_of",
        "workflow_runs",
        ["rerun_of"],
        unique=False,
        postgresql_where=sa.text("rerun_of IS NOT NULL"),
    )
    op.create_index(
        "ix_workflow_runs_finished_at",
        "workflow_runs",
        ["finished_at"],
        unique=False,
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )
    op.create_table(
        "workflow_schedule_firings",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("realm_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("workflow_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("trigger_index", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("slot_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("selected", sa.Integer(), nullable=False),
        sa.Column("started", sa.Integer(), nullable=False),
        sa.Column("truncated", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["realm_id"], ["realms.id"], name=op.f("fk_workflow_schedule_firings_realm_id_realms"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["workflow_id"],
            ["workflows.id"],
            name=op.f("fk_workflow_schedule_firings_workflow_id_workflows"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workflow_schedule_firings")),
        sa.UniqueConstraint(
            "workflow_id",
            "trigger_index",
            "slot_at",
            name=op.f("uq_workflow_schedule_firings_workflow_id_trigger_index_slot_at"),
        ),
    )
    op.create_table(
        "maintenance_passes",
        sa.Column("task", sqlmodel.sql.sqltypes.AutoString(length=60), nullable=False),
        sa.Column("ran_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column(
            "details", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.PrimaryKeyConstraint("task", name=op.f("pk_maintenance_passes")),
    )


def downgrade() -> None:
    op.drop_table("maintenance_passes")
    op.drop_table("workflow_schedule_firings")
    op.drop_index("ix_workflow_runs_finished_at", table_name="workflow_runs")
    op.drop_index("ix_workflow_runs_rerun_of", table_name="workflow_runs")
    op.drop_constraint(op.f("fk_workflow_runs_rerun_of_workflow_runs"), "workflow_runs", type_="foreignkey")
    op.drop_column("workflow_runs", "rerun_of")
