"""Directory state for tests of runs: a group the subject can join, and a directory in trouble.

A PostgreSQL trigger that refuses writes to a table stands for the directory being unavailable
(an infrastructure error, so a transient failure for the engine).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import User
from testing.factories import RealmHandle
from testing.workflows import manual, publish


async def outage(realm: RealmHandle, table: str, operation: str) -> None:
    """From now on PostgreSQL refuses ``operation`` on ``table`` (the directory is unavailable)."""
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "CREATE OR REPLACE FUNCTION rules_outage() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'the directory is unavailable'; END $$"
            )
        )
        await session.execute(
            text(
                f"CREATE TRIGGER rules_outage BEFORE {operation} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION rules_outage()"
            )
        )


async def outage_over(realm: RealmHandle, table: str) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text(f"DROP TRIGGER rules_outage ON {table}"))


async def member_group(realm: RealmHandle, subject_id: str, name: str = "Team") -> tuple[str, str]:
    """An organization the subject belongs to and a group of it; returns (organization id, group id)."""
    org = await realm.organization(f"Org {name}")
    async with realm.sessions() as session:
        subject = await session.get(User, subject_id)
    assert subject is not None
    await realm.member(org, subject)
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org.id, name=name)
    return org.id, group.id


async def joins_then_fails(realm: RealmHandle, *between: dict[str, Any], name: str = "Rules") -> tuple[User, str, str]:
    """A subject, a group of an organization they belong to, and a published workflow that puts
    them in the group, makes the steps ``between``, then fails for good (``leave``: the subject is
    no member of that other organization), so that the join (``team``) is undone. Returns
    (subject, group id, workflow id)."""
    subject = await realm.user("subject@example.com")
    _, group_id = await member_group(realm, subject.id)
    elsewhere = await realm.organization("Elsewhere")
    wid = await publish(
        realm,
        manual(
            {"id": "team", "type": "add_to_group", "group_id": group_id},
            *between,
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id},
        ),
        name=name,
    )
    return subject, group_id, wid


async def in_group(realm: RealmHandle, group_id: str, user_id: str) -> bool:
    async with realm.sessions() as session:
        found = await session.scalar(
            text("SELECT count(*) FROM group_members WHERE group_id = :g AND user_id = :u"),
            {"g": group_id, "u": user_id},
        )
    return bool(found)


async def refuse_role_changes(realm: RealmHandle) -> None:
    """A database trigger that refuses changes to assignments of the roles listed in refused_roles.

    The refusal is an ordinary database error inside the effect, so the engine treats it as a
    transient failure and retries later.
    """
    async with realm.sessions() as session, session.begin():
        await session.execute(text("CREATE TABLE refused_roles (role_id text NOT NULL, op text NOT NULL)"))
        await session.execute(
            text(
                """
                CREATE FUNCTION refuse_role_change() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'DELETE' THEN
                        IF EXISTS (SELECT 1 FROM refused_roles WHERE op = TG_OP AND role_id = OLD.role_id) THEN
                            RAISE EXCEPTION 'assignment change refused';
                        END IF;
                        RETURN OLD;
                    END IF;
                    IF EXISTS (SELECT 1 FROM refused_roles WHERE op = TG_OP AND role_id = NEW.role_id) THEN
                        RAISE EXCEPTION 'assignment change refused';
                    END IF;
                    RETURN NEW;
                END $$
                """
            )
        )
        await session.execute(
            text(
                "CREATE TRIGGER refuse_role_change BEFORE INSERT OR DELETE ON role_assignments "
                "FOR EACH ROW EXECUTE FUNCTION refuse_role_change()"
            )
        )
