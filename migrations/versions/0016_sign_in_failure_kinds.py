"""Failed sign-ins say which step failed: the password or the second factor.

A correct password forgives the wrong passwords typed before it, never the wrong second-factor
codes: those count against the account until their window passes, so "the right password, then
four wrong codes" cannot be repeated without end. Rows written before this revision were
password failures.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sign_in_failures",
        sa.Column("kind", sa.String(length=20), server_default="password", nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_sign_in_failures_kind"), "sign_in_failures", "kind IN ('password', 'second_factor')"
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_sign_in_failures_kind"), "sign_in_failures", type_="check")
    op.drop_column("sign_in_failures", "kind")
