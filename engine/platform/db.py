"""Async SQLAlchemy engine and sessions on asyncpg."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from engine.platform.database import asyncpg_url


def make_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(
        asyncpg_url(url),
        pool_size=pool_size,
        max_overflow=10,
        # No pre-ping: it cost a round trip (and a transaction) per checkout. A connection that
        # died with its server fails once and is discarded with the whole pool.
        pool_pre_ping=False,
        connect_args={"server_settings": {"application_name": "cockpit"}},
    )


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """One unit of work: commit on success, roll back on any error."""
    async with sessions() as session, session.begin():
        yield session
