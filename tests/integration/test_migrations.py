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


def test_0017_folds_the_role_names_there_are_and_takes_links_out_of_stored_notices(pg_server: str) -> None:
    """Upgrading a database with data: colliding role names keep working, stored links go."""
    import secrets

    import psycopg
    from alembic import command
    from psycopg import sql

    from engine.platform.database import libpq_conninfo, with_database
    from engine.platform.migrate import alembic_config
    from testing.databases import drop_database

    name = f"cockpit_mig_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_conninfo(pg_server), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(pg_server, name)
    try:
        command.upgrade(alembic_config(url), "0015")
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            conn.execute("INSERT INTO realms (id, slug, name) VALUES ('rlm_a', 'a', 'A')")
            for role_id, role_name, builtin in (
                ("rol_2", "REALM-ADMİN", False),
                ("rol_1", "realm-admin", True),
                ("rol_3", "Payments", False),
            ):
                conn.execute(
                    "INSERT INTO roles (id, realm_id, name, description, permissions, boundary, requires_approval,"
                    " builtin) VALUES (%s, 'rlm_a', %s, '', ARRAY['realm.users.read'], 'realm', false, %s)",
                    (role_id, role_name, builtin),
                )
            body = "Waiting.\n\nDecide with this one-time link: https://c.example/realms/a/approval-links/apl_Zx-9_q"
            conn.execute(
                "INSERT INTO workflow_notices (id, realm_id, user_id, notice, subject, body, state, attempts)"
                " VALUES ('ntc_1', 'rlm_a', 'usr_1', 'approval_requested', 'S', %s, 'sent', 1)",
                (body,),
            )
        upgrade(url)
        with psycopg.connect(libpq_conninfo(url)) as conn:
            keys = conn.execute("SELECT id, name, name_key FROM roles ORDER BY id").fetchall()
            [(stored,)] = conn.execute("SELECT body FROM workflow_notices").fetchall()
    finally:
        drop_database(pg_server, url)
    assert keys == [
        ("rol_1", "realm-admin", "realm-admin"),
        ("rol_2", "REALM-ADMİN", "realm-admin~rol_2"),
        ("rol_3", "Payments", "payments"),
    ]
    assert stored == "Waiting.\n\nDecide with this one-time link: [one-time link: sent by mail only, never stored]"
