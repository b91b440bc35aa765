"""``cockpit migrate``: our Alembic revisions, Procrastinate's schema included, in one step."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from engine.platform.config import RESOURCE_ROOT
from engine.platform.database import psycopg_url


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """Procrastinate's schema is applied by a revision of ours but not modelled: leave it out of comparisons."""
    if type_ == "table" and name and name.startswith("procrastinate_"):
        return False
    table = getattr(obj, "table", None)
    return not (table is not None and str(getattr(table, "name", "")).startswith("procrastinate_"))


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(RESOURCE_ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str) -> None:
    """Bring the database to head; does nothing when it is already there."""
    command.upgrade(alembic_config(url), "head")


def head_revision() -> str | None:
    script = ScriptDirectory.from_config(alembic_config("postgresql://unused/unused"))
    return script.get_current_head()


def current_revision(url: str) -> str | None:
    eng = create_engine(psycopg_url(url), poolclass=pool.NullPool)
    try:
        with eng.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        eng.dispose()
