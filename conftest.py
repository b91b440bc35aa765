"""Fixtures shared by every tier: real PostgreSQL databases and the app."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.platform.config import Settings, load_settings
from engine.platform.db import make_engine, make_sessionmaker
from testing.databases import clone_database, drop_database, ensure_template, server_maintenance_url

# Property tests explore the same examples on every run, so CI never fails by chance; set
# COCKPIT_HYPOTHESIS_RANDOM=1 to explore new ones locally.
hypothesis_settings.register_profile("repeatable", derandomize=True, database=None)
hypothesis_settings.register_profile("explore")
hypothesis_settings.load_profile("explore" if os.environ.get("COCKPIT_HYPOTHESIS_RANDOM") else "repeatable")

_TIER_BY_FOLDER = {"unit": "unit", "integration": "integration", "acceptance": "acceptance", "topology": "topology"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "e2e" in parts:
            item.add_marker(pytest.mark.e2e)
        for folder, marker in _TIER_BY_FOLDER.items():
            if folder in parts:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def pg_server() -> str:
    """URL of the test server's maintenance database (embedded unless COCKPIT_DATABASE_URL)."""
    return server_maintenance_url()


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> str:
    return ensure_template(pg_server)


@pytest.fixture
def database_url(pg_server: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated database for this test alone."""
    url = clone_database(pg_server, pg_template)
    try:
        yield url
    finally:
        drop_database(pg_server, url)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str) -> Settings:
    for key in ("COCKPIT_HOST", "COCKPIT_PORT", "COCKPIT_LOG_FORMAT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COCKPIT_DATABASE_URL", database_url)
    monkeypatch.setenv("COCKPIT_SECRET_KEY", "test-secret-key-0123456789abcdef0123456789")
    return load_settings()


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(database_url, pool_size=5)
    try:
        yield make_sessionmaker(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def db(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A session on the test's database; commit explicitly to make rows visible to the app."""
    async with sessions() as session:
        yield session
