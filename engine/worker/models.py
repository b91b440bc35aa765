"""The worker process's own table."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Field, SQLModel

from engine.platform.tables import tz_column, utcnow


class WorkerHeartbeat(SQLModel, table=True):
    """The last sign of life of each worker process (readiness reads the newest)."""

    __tablename__ = "worker_heartbeats"

    worker_id: str = Field(primary_key=True, max_length=200)
    host: str = Field(max_length=255)
    pid: int
    started_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    last_seen_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    stopped_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
