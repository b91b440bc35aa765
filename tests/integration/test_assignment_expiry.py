from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory.authz import load_authority
from engine.directory.role_assignments import expire_due_assignments
from engine.platform.clock import SYSTEM_CLOCK
from engine.worker import queue
from testing.factories import RealmHandle


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def test_due_assignments_are_removed_with_outbox_and_audit_events(realm: RealmHandle) -> None:
    org = await realm.organization()
    role = await realm.role("temp", ["org.members.write"], boundary="organization")
    user = await realm.user()
    due = await realm.assign(user, role, organization_id=org.id, expires_in=timedelta(minutes=5))
    later = await realm.assign(await realm.user(), role, organization_id=org.id, expires_in=timedelta(days=2))
    forever = await realm.assign(await realm.user(), role, organization_id=org.id)

    async with realm.sessions() as session, session.begin():
        assert await expire_due_assignments(session, SYSTEM_CLOCK.now()) == 0
    async with realm.sessions() as session, session.begin():
        assert await expire_due_assignments(session, SYSTEM_CLOCK.now() + timedelta(hours=1)) == 1

    remaining = await fetch(realm, "SELECT id FROM role_assignments WHERE role_id = :r ORDER BY id", r=role.id)
    assert remaining == sorted([(later.id,), (forever.id,)])
    outbox = await fetch(
        realm, "SELECT subject_id, organization_id, payload FROM outbox_events WHERE type = 'role.assignment.expired'"
    )
    assert len(outbox) == 1
    subject_id, organization_id, payload = outbox[0]
    assert (subject_id, organization_id) == (user.id, org.id)
    assert payload["assignment_id"] == due.id and payload["role_id"] == role.id and payload["user_id"] == user.id
    audit = await fetch(
        realm,
        "SELECT actor_type, actor_id, category, subject_id, realm_id FROM audit_events "
        "WHERE type = 'role.assignment.expired'",
    )
    assert audit == [("system", None, "authorization", user.id, realm.id)]

    async with realm.sessions() as session, session.begin():
        assert await expire_due_assignments(session, SYSTEM_CLOCK.now() + timedelta(hours=1)) == 0


async def test_an_expired_assignment_grants_nothing_even_before_it_is_removed(realm: RealmHandle) -> None:
    role = await realm.role("short", ["realm.audit.read"])
    user = await realm.user()
    await realm.assign(user, role, expires_in=timedelta(minutes=1))
    async with realm.sessions() as session:
        assert (await load_authority(session, realm.id, "user", user.id)).holds("realm.audit.read")
        later = await load_authority(session, realm.id, "user", user.id, now=SYSTEM_CLOCK.now() + timedelta(minutes=2))
        assert not later.holds("realm.audit.read")


async def test_two_workers_never_expire_the_same_assignment_twice(realm: RealmHandle) -> None:
    role = await realm.role("temp", ["realm.audit.read"])
    for _ in range(3):
        await realm.assign(await realm.user(), role, expires_in=timedelta(minutes=1))
    moment = SYSTEM_CLOCK.now() + timedelta(minutes=5)
    first = realm.sessions()
    second = realm.sessions()
    try:
        await first.begin()
        assert await expire_due_assignments(first, moment, limit=2) == 2
        await second.begin()
        await second.execute(text("SET LOCAL lock_timeout = '2s'"))  # waiting on a locked row fails the test
        # The first worker still holds its two rows: the second skips them and takes the third.
        assert await expire_due_assignments(second, moment) == 1
        await second.commit()
        await first.commit()
    finally:
        await first.close()
        await second.close()
    async with realm.sessions() as session, session.begin():
        assert await expire_due_assignments(session, moment) == 0
    events = await fetch(
        realm, "SELECT payload->>'assignment_id' FROM outbox_events WHERE type = 'role.assignment.expired'"
    )
    assert len(events) == 3 and len(set(events)) == 3


async def test_the_expiry_task_is_periodic_and_expires_through_the_worker_runtime(
    realm: RealmHandle, sessions: async_sessionmaker[AsyncSession]
) -> None:
    periodic = queue.app.periodic_registry.periodic_tasks[("directory.expire_assignments", "expire_assignments")]
    assert periodic.cron == "*/10 * * * * *"
    assert periodic.task.queue == "maintenance"

    role = await realm.role("temp", ["realm.audit.read"])
    await realm.assign(await realm.user(), role, expires_in=timedelta(seconds=1))
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE role_assignments SET expires_at = now() - interval '1 second' WHERE role_id = :r"),
            {"r": role.id},
        )
    runtime = queue.WorkerRuntime(worker_id="worker-test", sessions=sessions, settings=None)
    context = SimpleNamespace(additional_context={"runtime": runtime})
    await queue.expire_assignments(context, 0)  # type: ignore[arg-type]
    assert await fetch(realm, "SELECT id FROM role_assignments WHERE role_id = :r", r=role.id) == []
