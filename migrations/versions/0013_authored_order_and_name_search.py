"""Workflow revisions keep the definition in the author's key order; people are found by any part of a name.

``definition`` is ``jsonb`` (keys sorted, what queries read); ``authored`` is ``json`` (the text
as sent, keys in the author's order), shown by the editor, the revision page and the API.
Existing revisions have none: they show the sorted form, as before.

Users get trigram indexes on display name and email (``pg_trgm``) for the step builder's pickers
and the audit log's filters, which match any part of a name or an email, and ``(realm_id, id)``
so a common match is found by walking the realm's users in order until a page is full.

Revision ID: 0013
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workflow_revisions", sa.Column("authored", sa.JSON(), nullable=True))
    # pg_trgm is a trusted extension (PostgreSQL 13+): the database owner may create it.
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    op.create_index(
        "ix_users_display_name_trgm",
        "users",
        ["display_name"],
        postgresql_using="gin",
        postgresql_ops={"display_name": "gin_trgm_ops"},
    )
    op.create_index(
        "ix_users_email_trgm", "users", ["email"], postgresql_using="gin", postgresql_ops={"email": "gin_trgm_ops"}
    )
    op.create_index("ix_users_realm_id_id", "users", ["realm_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_users_realm_id_id", table_name="users")
    op.drop_index("ix_users_email_trgm", table_name="users")
    op.drop_index("ix_users_display_name_trgm", table_name="users")
    op.drop_column("workflow_revisions", "authored")
