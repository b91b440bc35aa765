"""Tables of the product (SQLModel). Alembic revisions under ``migrations/`` must match them.

A test autogenerates against a migrated database and expects no difference.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, DateTime, MetaData, func
from sqlmodel import Field, SQLModel

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SQLModel.metadata.naming_convention = NAMING_CONVENTION
metadata: MetaData = SQLModel.metadata


def tz_column(*, nullable: bool = False, server_default: bool = False) -> Column[datetime]:
    return Column(
        DateTime(timezone=True),
        nullable=nullable,
        server_default=func.now() if server_default else None,
    )


class WorkerHeartbeat(SQLModel, table=True):
    """The last sign of life of each worker process (readiness reads the newest)."""

    __tablename__ = "worker_heartbeats"

    worker_id: str = Field(primary_key=True, max_length=200)
    host: str = Field(max_length=255)
    pid: int
    started_at: datetime = Field(sa_column=tz_column(server_default=True))
    last_seen_at: datetime = Field(sa_column=tz_column(server_default=True))
    stopped_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
