"""Who made each link a reviewer's authority could come through, and when.

A reviewer is not independent of an author who created them, or who within the review
independence window assigned them a role, put them in a group, gave a group of theirs a role,
moved such a group under another, or changed the permissions of a role they hold. Role
assignments and group memberships already say who made them and when; users and service
principals now keep their creator, group roles their granter and time, groups who last moved
them, and roles who last changed their permissions.

Existing users and service principals take their creator from the audit trail's
``user.created`` and ``service_principal.created`` events.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("created_by", sa.String(length=40), nullable=True))
    op.add_column("service_principals", sa.Column("created_by", sa.String(length=40), nullable=True))
    op.add_column("roles", sa.Column("permissions_set_by", sa.String(length=40), nullable=True))
    op.add_column("roles", sa.Column("permissions_set_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("groups", sa.Column("parent_set_by", sa.String(length=40), nullable=True))
    op.add_column("groups", sa.Column("parent_set_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("group_roles", sa.Column("granted_by", sa.String(length=40), nullable=True))
    op.add_column(
        "group_roles",
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    for table, event in (("users", "user.created"), ("service_principals", "service_principal.created")):
        op.execute(
            f"""
            UPDATE {table} p SET created_by = a.actor_id
              FROM audit_events a
             WHERE a.realm_id = p.realm_id AND a.type = '{event}' AND a.subject_id = p.id
               AND a.actor_type IN ('user', 'service_principal')
            """
        )


def downgrade() -> None:
    op.drop_column("group_roles", "created_at")
    op.drop_column("group_roles", "granted_by")
    op.drop_column("groups", "parent_set_at")
    op.drop_column("groups", "parent_set_by")
    op.drop_column("roles", "permissions_set_at")
    op.drop_column("roles", "permissions_set_by")
    op.drop_column("service_principals", "created_by")
    op.drop_column("users", "created_by")
