"""The demo realm of a first start: its content, idempotent and race-safe seeding, the printed link."""

from __future__ import annotations

import asyncio
import re

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from cockpit.bootstrap import first_start
from engine.directory.authz import check_assignment, load_authority
from engine.directory.realms import create_realm, realm_by_slug
from engine.directory.sign_in_links import consume_sign_in_link
from engine.platform.config import Settings
from engine.platform.db import make_engine, make_sessionmaker
from engine.seeding.demo_realm import DEMO_ADMIN_EMAIL, seed_demo

Sessions = async_sessionmaker[AsyncSession]


async def seed(sessions: Sessions) -> bool:
    async with sessions() as session, session.begin():
        return (await seed_demo(session)).created


async def counts(sessions: Sessions) -> dict[str, int]:
    out: dict[str, int] = {}
    async with sessions() as session:
        for table in ("realms", "users", "organizations", "memberships", "roles", "role_assignments", "groups"):
            out[table] = int(await session.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
        for table in ("group_members", "group_roles", "audit_events", "outbox_events"):
            out[table] = int(await session.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
    return out


async def test_the_demo_realm_has_people_organizations_roles_and_groups(sessions: Sessions) -> None:
    assert await seed(sessions) is True
    async with sessions() as session:
        realm = await realm_by_slug(session, "demo")
        assert realm is not None and realm.name == "Demo"
        users = dict((await session.execute(text("SELECT email, password_hash FROM users"))).all())
        assert DEMO_ADMIN_EMAIL in users and "approver@demo.example" in users and "auditor@demo.example" in users
        assert len(users) == 9  # admin, approver, auditor and six people
        assert all(hash_ is None for hash_ in users.values()), "nobody has a password: links only"
        held = dict(
            (
                await session.execute(
                    text(
                        "SELECT u.email, array_agg(r.name ORDER BY r.name) FROM role_assignments ra "
                        "JOIN users u ON u.id = ra.user_id JOIN roles r ON r.id = ra.role_id GROUP BY u.email"
                    )
                )
            ).all()
        )
        assert held[DEMO_ADMIN_EMAIL] == ["realm-admin"]
        assert held["approver@demo.example"] == ["access-approver"]
        assert held["auditor@demo.example"] == ["realm-auditor"]
        roles = {
            name: (perms, boundary, approval)
            for name, perms, boundary, approval in await session.execute(
                text("SELECT name, permissions, boundary, requires_approval FROM roles")
            )
        }
        assert roles["engineering-member"][1] == "organization"
        assert roles["production-access"][1:] == ("realm", True)
        assert set(roles["access-approver"][0]) == set(roles["production-access"][0])
        orgs = dict(
            (
                await session.execute(
                    text(
                        "SELECT o.name, count(m.id) FROM organizations o LEFT JOIN memberships m "
                        "ON m.organization_id = o.id GROUP BY o.name"
                    )
                )
            ).all()
        )
        assert set(orgs) == {"Acme Engineering", "Acme Sales"} and sum(orgs.values()) == 6
        groups = dict(
            (
                await session.execute(
                    text("SELECT g.name, p.name FROM groups g LEFT JOIN groups p ON p.id = g.parent_id")
                )
            ).all()
        )
        assert groups == {"Engineering": None, "Platform": "Engineering"}
        outbox = dict((await session.execute(text("SELECT type, count(*) FROM outbox_events GROUP BY type"))).all())
        assert outbox == {"user.created": 9, "organization.membership.added": 6}
        audited = set((await session.execute(text("SELECT DISTINCT type FROM audit_events"))).scalars())
        assert {"realm.created", "user.created", "organization.created", "organization.membership.added"} <= audited
        assert {"role.created", "role.assigned", "group.created", "group.member_added"} <= audited
        # The example grant that needed an approver reads as one: granted by the administrator,
        # approved by the approver, audited by the administrator with the grant's usual details.
        grant = (
            await session.execute(
                text(
                    "SELECT ra.id, ra.granted_by, ra.approver_id, ra.organization_id, ra.expires_at, "
                    "g.email AS granter, a.email AS approver, r.name AS role_name "
                    "FROM role_assignments ra JOIN users u ON u.id = ra.user_id JOIN roles r ON r.id = ra.role_id "
                    "JOIN users g ON g.id = ra.granted_by JOIN users a ON a.id = ra.approver_id "
                    "WHERE u.email = 'linus@demo.example'"
                )
            )
        ).one()
        assert (grant.granter, grant.approver, grant.role_name) == (
            DEMO_ADMIN_EMAIL,
            "approver@demo.example",
            "production-access",
        )
        assert grant.organization_id is None and grant.expires_at is None
        event = (
            await session.execute(
                text(
                    "SELECT actor_type, actor_id, details FROM audit_events "
                    "WHERE type = 'role.assigned' AND details->>'assignment_id' = :id"
                ),
                {"id": grant.id},
            )
        ).one()
        assert (event.actor_type, event.actor_id) == ("user", grant.granted_by)
        assert event.details["approver_id"] == grant.approver_id
        assert event.details["role"] == "production-access" and "expires_at" in event.details

        # The approver can approve production access: the rules of an assignment pass.
        by_email = dict((await session.execute(text("SELECT email, id FROM users"))).all())
        admin = await load_authority(session, realm.id, "user", by_email[DEMO_ADMIN_EMAIL])
        approver = await load_authority(session, realm.id, "user", by_email["approver@demo.example"])
        check_assignment(
            admin,
            role_name="production-access",
            role_permissions=roles["production-access"][0],
            requires_approval=True,
            organization_id=None,
            subject_id=by_email["grace@demo.example"],
            approver=approver,
        )
        # Members of Platform inherit the roles of Engineering in their organization.
        org_id = await session.scalar(text("SELECT id FROM organizations WHERE name = 'Acme Engineering'"))
        ken = await load_authority(session, realm.id, "user", by_email["ken@demo.example"])
        assert ken.holds("realm.workflows.run", org_id) and not ken.holds("realm.workflows.run")


async def test_seeding_twice_changes_nothing(sessions: Sessions) -> None:
    assert await seed(sessions) is True
    before = await counts(sessions)
    assert await seed(sessions) is False
    assert await counts(sessions) == before


async def test_concurrent_first_starts_seed_once(database_url: str) -> None:
    engines = [make_engine(database_url, pool_size=1) for _ in range(3)]
    try:
        results = await asyncio.gather(*(seed(make_sessionmaker(engine)) for engine in engines))
        assert sorted(results) == [False, False, True]
        assert (await counts(make_sessionmaker(engines[0])))["realms"] == 1
    finally:
        for engine in engines:
            await engine.dispose()


def test_first_start_prints_a_working_link_then_only_how_to_get_one(settings: Settings, database_url: str) -> None:
    lines = first_start(settings, database_url)
    text_out = "\n".join(lines)
    assert f"http://localhost:{settings.port}/realms/demo/" in text_out
    match = re.search(r"http://localhost:\d+/realms/demo/sign-in/link\?token=(\S+)", text_out)
    assert match, text_out
    token = match.group(1)

    async def spend() -> str:
        engine = make_engine(database_url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                realm = await realm_by_slug(session, "demo")
                assert realm is not None
                return (await consume_sign_in_link(session, realm, token)).email
        finally:
            await engine.dispose()

    assert asyncio.run(spend()) == DEMO_ADMIN_EMAIL
    later = "\n".join(first_start(settings, database_url))
    assert "sign-in/link" not in later
    assert f"http://localhost:{settings.port}/realms/demo/" in later
    assert "uv run cockpit admin sign-in-link --realm demo --email admin@demo.example" in later


def test_first_start_leaves_an_installation_with_its_own_realms_alone(settings: Settings, database_url: str) -> None:
    async def own_realm() -> None:
        engine = make_engine(database_url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session, session.begin():
                await create_realm(session, "acme", admin_email="root@acme.example")
        finally:
            await engine.dispose()

    asyncio.run(own_realm())
    lines = "\n".join(first_start(settings, database_url))
    assert "/realms/acme/" in lines and "/realms/demo/" not in lines and "sign-in/link?" not in lines


def test_first_start_shows_a_published_onboarding_workflow_with_a_finished_and_a_waiting_run(
    settings: Settings, database_url: str
) -> None:
    first_start(settings, database_url)

    async def look() -> tuple[list[str], dict[str, object], list[tuple[str, str]]]:
        engine = make_engine(database_url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session:
                realm = await realm_by_slug(session, "demo")
                assert realm is not None
                rows = await session.execute(
                    text(
                        "SELECT w.name, w.state, r.definition FROM workflows w JOIN workflow_revisions r"
                        " ON r.workflow_id = w.id AND r.status = 'published' WHERE w.realm_id = :realm"
                    ),
                    {"realm": realm.id},
                )
                (name, state, definition), *others = rows.all()
                assert not others and state == "active"
                runs = await session.execute(
                    text(
                        "SELECT u.email, r.state FROM workflow_runs r JOIN users u ON u.id = r.subject_id"
                        " WHERE r.realm_id = :realm ORDER BY u.email"
                    ),
                    {"realm": realm.id},
                )
                return [name], definition, [(e, s) for e, s in runs.all()]
        finally:
            await engine.dispose()

    names, definition, runs = asyncio.run(look())
    assert names == ["Engineering onboarding"]
    assert [s["id"] for s in definition["steps"]] == [  # type: ignore[index]
        "approve-access",
        "grant-engineering-access",
        "join-engineering-team",
        "send-welcome",
        "done",
    ]
    # One run approved by the demo approver and carried to its end; the other waits for a decision.
    assert runs == [("ken@demo.example", "awaiting_approval"), ("margaret@demo.example", "succeeded")]
