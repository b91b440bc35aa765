"""What every request handler can reach: the database and the settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from litestar import Litestar, Request
from litestar.datastructures import State
from litestar.di import NamedDependency
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from engine.config import Settings


@dataclass
class AppContext:
    settings: Settings
    database_url: str
    db: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    head_revision: str | None


def context_of(app_or_state: Litestar | State) -> AppContext:
    state = app_or_state.state if isinstance(app_or_state, Litestar) else app_or_state
    ctx: AppContext = state["ctx"]
    return ctx


async def provide_db_session(state: State) -> AsyncIterator[AsyncSession]:
    """A session whose transaction commits when the handler returns without error."""
    ctx = context_of(state)
    async with ctx.sessions() as session, session.begin():
        yield session


DbSession = NamedDependency[AsyncSession]
"""Handler parameter ``db_session: DbSession``: the request's session (one transaction)."""

AnyRequest = Request[Any, Any, Any]
"""Handler parameter ``request: AnyRequest``."""
