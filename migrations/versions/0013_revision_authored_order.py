"""Workflow revisions keep the definition in the author's key order.

``definition`` is ``jsonb`` (keys sorted, what queries read); ``authored`` is ``json`` (the text
as sent, keys in the author's order), shown by the editor, the revision page and the API.
Existing revisions have none: they show the sorted form, as before.

Revision ID: 0013
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_revisions", sa.Column("authored", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("workflow_revisions", "authored")
