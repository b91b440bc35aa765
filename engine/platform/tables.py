"""What every table module shares: the metadata with its naming convention, and column helpers.

Each domain keeps its tables in its own ``models.py``; ``engine/tables.py`` imports them all so
Alembic and the schema test see every table on this one metadata.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, DateTime, MetaData, func, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import SQLModel

from engine.platform.clock import SYSTEM_CLOCK

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SQLModel.metadata.naming_convention = NAMING_CONVENTION
metadata: MetaData = SQLModel.metadata


def utcnow() -> datetime:
    return SYSTEM_CLOCK.now()


def tz_column(*, nullable: bool = False, server_default: bool = False) -> Column[datetime]:
    return Column(
        DateTime(timezone=True),
        nullable=nullable,
        server_default=func.now() if server_default else None,
    )


def epoch_column() -> Column[int]:
    return Column(BigInteger, nullable=False, server_default=text("0"))


def jsonb_column(*, nullable: bool = False, default: str | None = None) -> Column[Any]:
    return Column(JSONB, nullable=nullable, server_default=text(default) if default else None)
