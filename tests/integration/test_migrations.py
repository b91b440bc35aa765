from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, pool

from engine.platform.database import psycopg_url
from engine.platform.migrate import current_revision, head_revision, include_object, upgrade
from engine.tables import metadata


def test_models_and_migrations_agree(database_url: str) -> None:
    engine = create_engine(psycopg_url(database_url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={"include_object": include_object, "compare_type": True, "compare_server_default": True},
            )
            diff = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations differ: {diff}"


def test_migrate_is_idempotent_and_includes_the_queue_schema(database_url: str) -> None:
    assert current_revision(database_url) == head_revision()
    upgrade(database_url)  # a second time changes nothing and does not fail
    assert current_revision(database_url) == head_revision()
    engine = create_engine(psycopg_url(database_url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert {"procrastinate_jobs", "procrastinate_periodic_defers", "worker_heartbeats"} <= tables
