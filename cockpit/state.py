"""What every request handler can reach: the database and the settings.

One request, one database session: the guard (who is calling, what may they do) and the handler
share the request's session, opened on first use, so a request takes one pooled connection and
runs in one transaction — ``BEGIN``, the queries, ``COMMIT``. See "One session per request" in
docs/architecture.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar, Request
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.types import ASGIApp, Receive, Scope, Send
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from engine.platform.config import Settings
from engine.platform.database import asyncpg_url

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
        # connections for good.
        connect_args={"server_settings": {"application_name": "cockpit", "lock_timeout": "30s"}},
    )


Replay = Callable[[AsyncSession], Awaitable[None]]


@dataclass
class RequestDb:
    """The request's one session, opened (with its transaction) when first asked for.

    ``keep_on_rollback`` registers bookkeeping that must survive a failed request — the
    authentication's "last used" marks — and is replayed in a short transaction of its own only
    when the request's transaction is rolled back.

    A route that only reads (``reads_only``) gets a session in autocommit instead: its reads run
    at READ COMMITTED, where every statement takes its own snapshot inside a transaction too, so
    ``BEGIN`` and ``COMMIT`` would buy nothing but two round trips. The only write on such a
    route, authentication's single-statement "last used" mark, commits by itself.
    """

    sessions: async_sessionmaker[AsyncSession]
    read_sessions: async_sessionmaker[AsyncSession] | None = None
    reads_only: bool = False
    _session: AsyncSession | None = None
    _replays: list[Replay] = field(default_factory=list)

    async def session(self) -> AsyncSession:
        if self._session is None:
            maker = self.read_sessions if self.reads_only and self.read_sessions is not None else self.sessions
            session = maker()
            await session.begin()
            self._session = session
        return self._session

    def keep_on_rollback(self, replay: Replay) -> None:
        if not self.reads_only:
            self._replays.append(replay)

    async def finish(self, *, commit: bool) -> None:
        """Commit (or roll back) and give the connection back; does nothing once finished."""
        session, self._session = self._session, None
        if session is None:
            return
        try:
            if commit:
                await session.commit()
            else:
                await session.rollback()
        except BaseException:
            commit = False
            raise
        finally:
            await session.close()
            replays, self._replays = self._replays, []
            if not commit and replays:
                async with self.sessions() as again, again.begin():
                    for replay in replays:
                        await replay(again)


def request_db(connection: ASGIConnection[Any, Any, Any, Any]) -> RequestDb:
    """The request's :class:`RequestDb` (made on first use)."""
    state = connection.scope.setdefault("state", {})  # type: ignore[typeddict-item]
    found = state.get(REQUEST_DB)
    if found is None:
        ctx = context_of(connection.app)
        found = RequestDb(ctx.sessions, ctx.read_sessions)
        state[REQUEST_DB] = found
    return found  # type: ignore[no-any-return]


def request_db_middleware(app: ASGIApp) -> ASGIApp:
    """Finish the request's session whoever opened it.

    The handler's dependency commits before the response is sent; what is left here is a session
    the guard opened for a request that never reached a handler using it (a refused credential,
    a missing permission, a handler without ``db_session``): it holds only authentication's
    bookkeeping, which is committed, or rolled back when the request failed.
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
