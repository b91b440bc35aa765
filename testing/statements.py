"""Count the statements an engine sends to PostgreSQL (tests and benchmarks, never the product).

Two sources, because SQLAlchemy's asyncpg adapter sends two kinds of traffic:

- every SQL statement SQLAlchemy executes (queries, DML, savepoints) passes its
  ``before_cursor_execute`` event;
- transaction control that the adapter sends straight through asyncpg (``BEGIN``, ``COMMIT``,
  ``ROLLBACK``: ``Connection.execute``), the pool's pre-ping (``;``: ``Connection.fetchrow``) and
  the hot statements the product sends to asyncpg itself (the guard's credential check, a
  definition's references: ``fetch``, ``fetchrow``, ``execute``) never reach that event, so the
  engine's new connections are made of a subclass of asyncpg's connection that notes them as
  they are sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

_CONTROL = re.compile(r"^\s*(BEGIN|START TRANSACTION|COMMIT|ROLLBACK|END|;)", re.IGNORECASE)
_PING = re.compile(r"^\s*;\s*$")


def is_control(sql: str) -> bool:
    """Transaction control or a pre-ping (``SAVEPOINT`` counts as work: it is a statement we chose)."""
    return bool(_CONTROL.match(sql)) or bool(_PING.match(sql))


@dataclass
class StatementLog:
    """What one stretch of traffic sent, in order of arrival per source."""

    queries: list[str] = field(default_factory=list)
    control: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.queries) + len(self.control)

    @property
    def pings(self) -> int:
        return sum(1 for s in self.control if _PING.match(s))

    def count(self, keyword: str) -> int:
        return sum(1 for s in self.control if s.strip().upper().startswith(keyword))

    def clear(self) -> None:
        self.queries.clear()
        self.control.clear()

    def summary(self) -> str:
        return (
            f"{self.total} statements: {len(self.queries)} queries, {len(self.control)} control "
            f"({self.count('BEGIN')} BEGIN, {self.count('COMMIT')} COMMIT, {self.count('ROLLBACK')} ROLLBACK, "
            f"{self.pings} pings)"
        )


_ACTIVE: list[StatementLog] = []


class NotingConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg ships no types
    """asyncpg's connection, noting the statements sent through its own methods into the active logs
    (SQLAlchemy's statements go through prepared statements, and its event, instead)."""

    async def execute(self, query: str, *args: Any, **kwargs: Any) -> str:
        _note(query)
        status: str = await super().execute(query, *args, **kwargs)
        return status

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        _note(query)
        return await super().fetch(query, *args, **kwargs)

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        _note(query)
        return await super().fetchrow(query, *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        _note(query)
        return await super().fetchval(query, *args, **kwargs)


def _note(query: str) -> None:
    for log in _ACTIVE:
        (log.control if is_control(query) else log.queries).append(query)


@contextmanager
def recording(engine: AsyncEngine) -> Iterator[StatementLog]:
    """Record every statement ``engine`` sends while the block runs.

    Control statements are seen on connections the engine opens while the block runs: start
    recording before the engine's first connection, warm it up inside the block, then
    :meth:`StatementLog.clear` before the traffic to measure.
    """
    log = StatementLog()

    def on_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["connection_class"] = NotingConnection

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        log.queries.append(statement)

    sync_engine = engine.sync_engine
    event.listen(sync_engine, "do_connect", on_connect)
    event.listen(sync_engine, "before_cursor_execute", on_execute)
    _ACTIVE.append(log)
    try:
        yield log
    finally:
        _ACTIVE.remove(log)
        event.remove(sync_engine, "do_connect", on_connect)
        event.remove(sync_engine, "before_cursor_execute", on_execute)
