"""Async SQLAlchemy engine and sessions on asyncpg, and hot statements sent without the ORM."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import PoolProxiedConnection

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


# --- Hot statements -------------------------------------------------------------------------------
#
# A statement sent through the ORM (or even ``session.execute(text(…))``) costs a few hundred
# microseconds of Python around a query that PostgreSQL answers in tens: compiling, the execution
# context, building result rows. The statements every request sends (the credential, a
# definition's references) go to asyncpg directly, written with ``:name`` parameters that are
# turned into ``$n`` once.

_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")


@dataclass(frozen=True)
class Positional:
    """A statement with ``$n`` placeholders and the names they stand for, in order."""

    sql: str
    names: tuple[str, ...]
    named: str  # the same statement with ``:name`` parameters, for ``session.execute(text(…))``

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        return [values[name] for name in self.names]


def positional(sql: str) -> Positional:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return Positional(_PARAMETER.sub(number, sql), tuple(names), sql)


# A row of asyncpg (``asyncpg.Record``), read by name, by position or by slice. asyncpg ships no
# type information, so its rows and connections are described here by what the code asks of them.
Record = Any


class Driver(Protocol):
    """An asyncpg connection, as the code uses it (under a session's connection, or its own)."""

    async def fetch(self, query: str, *args: Any) -> list[Record]: ...

    async def fetchrow(self, query: str, *args: Any) -> Record | None: ...

    async def execute(self, query: str, *args: Any) -> str: ...

    def is_closed(self) -> bool: ...

    def is_in_transaction(self) -> bool: ...

    def transaction(self) -> AbstractAsyncContextManager[Any]: ...


# ``session.info`` key: the asyncpg connection of a session bound, for its whole life, to one
# connection in autocommit (the web app's read-only requests) — ``fetch_hot`` uses it directly.
HOT_DRIVER = "hot_driver"


async def driver_connection(session: AsyncSession) -> Driver:
    """The asyncpg connection under the session's connection (checked out if need be).

    Statements sent on it bypass SQLAlchemy: they do not start the session's transaction (asyncpg
    sends ``BEGIN`` only before SQLAlchemy's first statement), so before that they run on their
    own, in autocommit.
    """
    connection = await session.connection()
    return driver_of(await connection.get_raw_connection())


def driver_of(raw: PoolProxiedConnection) -> Driver:
    """The asyncpg connection of a pool connection that is checked out (so not closed)."""
    driver: Driver | None = raw.driver_connection
    if driver is None:
        raise RuntimeError("the pool connection has no driver connection: it is closed")
    return driver


async def fetch_hot(session: AsyncSession, statement: Positional, values: Mapping[str, Any]) -> Sequence[Any]:
    """Rows of a read, as tuples: on asyncpg directly when the session is in autocommit (a request that
    only reads: there is no transaction to join), through the session otherwise (inside its
    transaction, seeing its own writes)."""
    hot: Driver | None = session.info.get(HOT_DRIVER)
    if hot is not None:
        return await hot.fetch(statement.sql, *statement.args(values))
    connection = await session.connection()
    proxied = await connection.get_raw_connection()
    driver: Driver | None = proxied.driver_connection
    if driver is not None and getattr(proxied.dbapi_connection, "autocommit", False):
        return await driver.fetch(statement.sql, *statement.args(values))
    return (await session.execute(text(statement.named), dict(values))).all()
