"""Alembic environment: runs our revisions on psycopg (sync) under an advisory lock.

The lock makes ``cockpit migrate`` safe to run from several processes at once.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text

import engine.tables  # noqa: F401  (registers every table on the metadata)
from engine.platform.database import psycopg_url
from engine.platform.migrate import include_object
from engine.tables import metadata

MIGRATION_LOCK_KEY = 7_316_842_001

config = context.config
target_metadata = metadata


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set by the caller"
    connectable = create_engine(psycopg_url(url), poolclass=pool.NullPool)
    with connectable.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
        connection.commit()
        try:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                include_object=include_object,
                compare_type=True,
                compare_server_default=True,
            )
            with context.begin_transaction():
                context.run_migrations()
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
            connection.commit()
    connectable.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `cockpit migrate`")
run_migrations_online()
