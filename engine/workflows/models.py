"""Tables of workflows and their revisions (seed 000 "Concepts", "Definition")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, Index, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from engine.platform.tables import tz_column, utcnow

WORKFLOW_STATES = ("draft", "active", "disabled")
REVISION_STATUSES = ("draft", "approved", "published", "superseded", "rejected")


class Workflow(SQLModel, table=True):
    __tablename__ = "workflows"
    __table_args__ = (
        Index("uq_workflows_realm_id_name", "realm_id", text("lower(name)"), unique=True),
        CheckConstraint("state IN ('draft', 'active', 'disabled')", name="state"),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    name: str = Field(max_length=100)
    description: str = Field(default="", max_length=500)
    owner_id: str | None = Field(default=None, foreign_key="users.id", max_length=40, ondelete="SET NULL")
    state: str = Field(default="draft", max_length=20)
    requires_approval: bool = Field(default=False)
    plugin_id: str | None = Field(default=None, max_length=100)
    published_revision: int | None = Field(default=None)
    created_by: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class WorkflowRevision(SQLModel, table=True):
    """Immutable once written, except for its status and the decisions about it."""

    __tablename__ = "workflow_revisions"
    __table_args__ = (
        UniqueConstraint("workflow_id", "number"),
        CheckConstraint("status IN ('draft', 'approved', 'published', 'superseded', 'rejected')", name="status"),
    )

    id: str = Field(primary_key=True, max_length=40)
    workflow_id: str = Field(foreign_key="workflows.id", max_length=40, ondelete="CASCADE")
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    number: int
    status: str = Field(default="draft", max_length=20)
    definition: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False))
    canonical: str = Field(sa_column=Column(Text, nullable=False))
    hash: str = Field(max_length=64)
    author_id: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    decided_by: str | None = Field(default=None, max_length=40)
    decided_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    decision_comment: str | None = Field(default=None, max_length=1000)
    published_by: str | None = Field(default=None, max_length=40)
    published_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
