"""Runs record what caused them (correlation id).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_runs", sa.Column("correlation_id", sa.String(length=100), nullable=True))


def downgrade() -> None:
    op.drop_column("workflow_runs", "correlation_id")
