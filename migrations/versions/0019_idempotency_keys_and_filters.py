"""Idempotency keys, and the indexes of the API's new filters.

- ``idempotency_keys``: the first answer to a keyed request, kept per principal and key for 24 hours;
- runs by organization and by starter, approvals by run, audit events by correlation id: partial
  indexes (the columns are set once, at the insert, and often empty).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


INDEXES = [
    (
        "ix_workflow_runs_realm_organization_id",
        "workflow_runs",
        ["realm_id", "organization_id", "id"],
        "organization_id IS NOT NULL",
    ),
    ("ix_workflow_runs_realm_starter_id", "workflow_runs", ["realm_id", "starter_id", "id"], "starter_id IS NOT NULL"),
    ("ix_workflow_approvals_run_id", "workflow_approvals", ["run_id"], "run_id IS NOT NULL"),
    (
        "ix_audit_events_realm_correlation_id",
        "audit_events",
        ["realm_id", "correlation_id", "id"],
        "correlation_id IS NOT NULL",
    ),
]


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("principal_id", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=255), nullable=False),
        sa.Column("fingerprint", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("headers", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("principal_id", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_index("ix_idempotency_keys_expires_at", "idempotency_keys", ["expires_at"], unique=False)
    for name, table, columns, where in INDEXES:
        op.create_index(name, table, columns, unique=False, postgresql_where=sa.text(where))


def downgrade() -> None:
    for name, table, _, _ in INDEXES:
        op.drop_index(name, table_name=table)
    op.drop_index("ix_idempotency_keys_expires_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
