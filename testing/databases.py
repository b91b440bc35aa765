"""Real PostgreSQL for tests: one migrated template per code version, one clone per test.

The server is the embedded one (data under ``.cockpit/test-pgdata``) unless
``COCKPIT_DATABASE_URL`` points at a server; only its maintenance database is used there,
and every test database is created and dropped by the suite.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

import psycopg
from psycopg import sql

from engine.platform.config import PROJECT_ROOT
from engine.platform.database import libpq_conninfo, start_embedded_server, with_database
from engine.platform.migrate import upgrade

TEMPLATE_LOCK = 7_316_842_002


def server_maintenance_url() -> str:
    explicit = os.environ.get("COCKPIT_DATABASE_URL")
    if explicit:
        return with_database(explicit, "postgres")
    home = Path(os.environ.get("COCKPIT_TEST_HOME") or PROJECT_ROOT / ".cockpit" / "test")
    return start_embedded_server(home)


def schema_fingerprint() -> str:
    digest = hashlib.sha256()
    # Only what shapes the schema: the revisions and the models they must match.
    for path in [
        *sorted((PROJECT_ROOT / "migrations").rglob("*.py")),
        *sorted((PROJECT_ROOT / "engine").glob("*models.py")),
    ]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def ensure_template(maintenance_url: str) -> str:
    """Create and migrate the template database for this code version, once."""
    name = f"cockpit_tmpl_{schema_fingerprint()}"
    with psycopg.connect(libpq_conninfo(maintenance_url), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (TEMPLATE_LOCK,))
        try:
            row = conn.execute("SELECT datistemplate FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if row and row[0]:
                return name
            if row:  # a half-made template from an interrupted run
                conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            upgrade(with_database(maintenance_url, name))
            conn.execute(
                sql.SQL("ALTER DATABASE {} WITH is_template = true ALLOW_CONNECTIONS = false").format(
                    sql.Identifier(name)
                )
            )
            # Templates of earlier schema versions only take space; keep a few for suites still running.
            for (old,) in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'cockpit\\_tmpl\\_%%' AND datname <> %s "
                "ORDER BY oid DESC OFFSET 3",
                (name,),
            ).fetchall():
                conn.execute(sql.SQL("ALTER DATABASE {} WITH is_template = false").format(sql.Identifier(old)))
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(old)))
            return name
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (TEMPLATE_LOCK,))


def clone_database(maintenance_url: str, template: str) -> str:
    """A fresh database copied from the template; returns its URL."""
    name = f"cockpit_test_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_conninfo(maintenance_url), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    return with_database(maintenance_url, name)


def drop_database(maintenance_url: str, url: str) -> None:
    name = url.split("?", 1)[0].rsplit("/", 1)[-1]
    with psycopg.connect(libpq_conninfo(maintenance_url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
