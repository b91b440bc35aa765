"""The app under test, with a client speaking real HTTP semantics over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cockpit.app import create_app
from engine.platform.config import Settings
from testing.factories import RealmHandle, make_realm
from testing.mail import smtp_server  # noqa: F401


@pytest.fixture
def app(settings: Settings, database_url: str) -> Litestar:
    return create_app(settings, database_url=database_url)


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


@pytest.fixture
async def realm(sessions: async_sessionmaker[AsyncSession]) -> RealmHandle:
    """A realm with its built-in roles, an administrator and an admin token."""
    return await make_realm(sessions)


@pytest.fixture
async def other_realm(sessions: async_sessionmaker[AsyncSession]) -> RealmHandle:
    return await make_realm(sessions)
