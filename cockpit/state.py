"""What every request handler can reach: the database and the settings.

One request, one database session: the guard (who is calling, what may they do) and the handler
share the request's session, opened on first use, so a request takes one pooled connection and
runs in one transaction — ``BEGIN``, the queries, ``COMMIT``. The guard's statements go to the
session's asyncpg connection directly, before ``BEGIN``. See "One session per request" in
docs/architecture.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar, Request
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.types import ASGIApp, Receive, Scope, Send
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from engine.directory.credentials import AuthorityCache
from engine.endpoints.calls import EndpointSettings
from engine.platform.config import Settings
from engine.platform.database import asyncpg_url
from engine.platform.db import HOT_DRIVER, Driver, driver_connection, driver_of
from engine.runs.preview import PreviewSettings

REQUEST_DB = "request_db"

log = logging.getLogger("cockpit.db")


@dataclass
class AppContext:
    settings: Settings
    database_url: str
    db: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    head_revision: str | None
    # Sessions without transaction control, for routes that only read (``opt={"reads_only": True}``).
    read_sessions: async_sessionmaker[AsyncSession] | None = None
    # Their engine (the same pool, in autocommit): a read-only request's connection.
    read_engine: AsyncEngine | None = None
    # Callers' authority, kept while their authorization epochs stand (engine/directory/credentials.py).
    authorities: AuthorityCache = field(default_factory=AuthorityCache)


def context_of(app_or_state: Litestar | State) -> AppContext:
    state = app_or_state.state if isinstance(app_or_state, Litestar) else app_or_state
    ctx: AppContext = state["ctx"]
    return ctx


def make_web_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    """The web app's engine: like the engine's, but without a pre-ping on every checkout.

    A pre-ping costs every request three statements (``BEGIN``, ``;``, ``ROLLBACK``). Without it a
    connection that died with the server (a restart) fails the one request that uses it; that
    error marks every connection of the pool opened before it as stale, so the next request
    connects afresh.
    """
    return create_async_engine(
        asyncpg_url(url),
        pool_size=pool_size,
        max_overflow=10,
        pool_pre_ping=False,
        # A request never waits long for a row lock: a request stuck behind another transaction
        # (or, by mistake, behind its own guard's) ends with an error instead of holding two pooled
        # connections for good. No JIT: the web app's statements are index probes whose estimated
        # cost at millions of rows (a LATERAL per realm or workflow) crosses jit_above_cost, and
        # compiling them took a second where running them takes milliseconds (/metrics' gauges).
        connect_args={"server_settings": {"application_name": "cockpit", "lock_timeout": "30s", "jit": "off"}},
    )


@dataclass
class RequestDb:
    """The request's one connection and session, opened when first asked for.

    A route that writes gets a session of ``sessions`` and its transaction (``BEGIN`` before the
    handler's first statement, ``COMMIT`` when it returns).

    A route that only reads (``reads_only``) gets a connection in autocommit instead: its reads run
    at READ COMMITTED, where every statement takes its own snapshot inside a transaction too, so
    ``BEGIN`` and ``COMMIT`` would buy nothing but two round trips. Its session (made only when the
    handler asks for one) is bound to that connection for its whole life, and carries the
    connection's asyncpg driver for the statements sent without the ORM
    (:func:`engine.platform.db.fetch_hot`): a request that sends only those never builds the
    ORM's transaction machinery.

    ``driver()`` is the asyncpg connection under it all, for the guard's statements. Sent before
    the session's first statement, they run on their own, outside the transaction — so the
    authentication's "last used" mark is kept whatever becomes of the request's transaction.
    """

    sessions: async_sessionmaker[AsyncSession]
    read_engine: AsyncEngine | None = None
    reads_only: bool = False
    _session: AsyncSession | None = None
    _connection: AsyncConnection | None = None
    _driver: Driver | None = None

    @property
    def _reading(self) -> bool:
        return self.reads_only and self.read_engine is not None

    async def session(self) -> AsyncSession:
        if self._session is None:
            if self._reading:
                await self.driver()
                session = AsyncSession(bind=self._connection, expire_on_commit=False)
                session.info[HOT_DRIVER] = self._driver
            else:
                session = self.sessions()
                await session.begin()
            self._session = session
        return self._session

    async def driver(self) -> Driver:
        """The asyncpg connection under the request's session (the same connection, never a second)."""
        if self._driver is None:
            if self._reading:
                assert self.read_engine is not None
                self._connection = await self.read_engine.connect()
                self._driver = driver_of(await self._connection.get_raw_connection())
            else:
                self._driver = await driver_connection(await self.session())
        return self._driver

    async def finish(self, *, commit: bool) -> None:
        """Commit (or roll back) and give the connection back; does nothing once finished."""
        session, self._session = self._session, None
        driver, self._driver = self._driver, None
        connection, self._connection = self._connection, None
        if driver is not None and driver.is_closed():
            # The server ended the connection (it restarted, or a session was terminated). What was
            # sent on the driver went past SQLAlchemy, which would give the dead connection to the
            # next request: throw it away instead.
            held = connection if connection is not None else await session.connection() if session else None
            if held is not None:
                await held.invalidate()
        try:
            if session is not None:
                try:
                    if commit and connection is None:
                        await session.commit()
                    elif connection is None:
                        await session.rollback()
                finally:
                    await session.close()
        finally:
            if connection is not None:
                await connection.close()


def request_db(connection: ASGIConnection[Any, Any, Any, Any]) -> RequestDb:
    """The request's :class:`RequestDb` (made on first use)."""
    state = connection.scope.setdefault("state", {})
    found = state.get(REQUEST_DB)
    if found is None:
        ctx = context_of(connection.app)
        found = RequestDb(ctx.sessions, ctx.read_engine)
        state[REQUEST_DB] = found
    return found


def request_db_middleware(app: ASGIApp) -> ASGIApp:
    """Finish the request's session whoever opened it.

    The handler's dependency commits before the response is sent; what is left here is a session
    the guard opened for a request that never reached a handler using it (a refused credential,
    a missing permission, a handler without ``db_session``): it holds nothing to keep.
    """

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        finally:
            db = scope.get("state", {}).get(REQUEST_DB)
            if db is not None:
                try:
                    await db.finish(commit=True)
                except Exception:
                    # The response has gone already; what could not be kept is bookkeeping.
                    log.warning("request session not finished cleanly", exc_info=True)

    return middleware


async def provide_db_session(request: Request[Any, Any, Any]) -> AsyncIterator[AsyncSession]:
    """The request's session; its transaction commits when the handler returns without error."""
    db = request_db(request)
    session = await db.session()
    try:
        yield session
    except BaseException:
        await db.finish(commit=False)
        raise
    await db.finish(commit=True)


DbSession = NamedDependency[AsyncSession]
"""Handler parameter ``db_session: DbSession``: the request's session (one transaction)."""

AnyRequest = Request[Any, Any, Any]
"""Handler parameter ``request: AnyRequest``."""


def preview_settings(settings: Settings) -> PreviewSettings:
    """What a run's preview judges calls and notices with: the worker's own settings."""
    endpoints = EndpointSettings(operator_key=settings.secret_key, allow_private_egress=settings.allow_private_egress)
    return PreviewSettings(endpoints=endpoints, mail_configured=settings.mail is not None)
