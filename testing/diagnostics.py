"""Runs that succeed, fail and fail to compensate, for the diagnostics of a workflow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import User
from engine.platform.clock import FixedClock
from engine.runs import run_reads
from engine.runs.runner import Runner
from testing.factories import RealmHandle
from testing.runs import drain, make_runner, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


class Team:
    """A group of an organization, and a workflow that adds its subject to the group."""

    def __init__(self, realm: RealmHandle, org_id: str, group_id: str, workflow_id: str) -> None:
        self.realm, self.org_id, self.group_id, self.workflow_id = realm, org_id, group_id, workflow_id
        self.count = 0

    @classmethod
    async def make(
        cls, realm: RealmHandle, name: str = "Team onboarding", extra: list[dict[str, Any]] | None = None
    ) -> Team:
        org = await realm.organization(f"Org of {name}")
        async with realm.sessions() as session, session.begin():
            authority = await load_authority(session, realm.id, "user", realm.admin.id)
            group, _ = await create_group(session, realm.actor, authority, org.id, name="Team")
        steps = [
            {"id": "team", "type": "add_to_group", "group_id": group.id},
            *(extra or []),
            {"id": "done", "type": "end"},
        ]
        return cls(realm, org.id, group.id, await publish(realm, manual(*steps), name))

    async def subject(self, member: bool) -> User:
        self.count += 1
        user = await self.realm.user(
            f"person-{self.count}-{'in' if member else 'out'}-{self.group_id[-6:]}@example.com"
        )
        if member:
            async with self.realm.sessions() as session:
                from engine.directory.models import Organization

                org = await session.get(Organization, self.org_id)
            assert org is not None
            await self.realm.member(org, user)
        return user

    async def run(self, member: bool, runner: Runner) -> str:
        run_id = await start(self.realm, self.workflow_id, (await self.subject(member)).id)
        await drain(runner)
        return run_id


async def diagnostics_of(client: Client, realm: RealmHandle, workflow_id: str) -> dict[str, Any]:
    response = await client.get(f"{realm.api}/workflows/{workflow_id}/diagnostics", headers=realm.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def compensation_failed_run(realm: RealmHandle) -> tuple[str, str, User]:
    """A run whose undo the directory refuses until it gives up: (workflow id, run id, subject)."""
    elsewhere = await realm.organization("Elsewhere")
    team = await Team.make(
        realm,
        "Offboarding check",
        extra=[{"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id}],
    )
    subject = await team.subject(member=True)
    run_id = await start(realm, team.workflow_id, subject.id)
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "CREATE OR REPLACE FUNCTION diag_outage() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'the directory is unavailable'; END $$"
            )
        )
        await session.execute(
            text(
                "CREATE TRIGGER diag_outage BEFORE DELETE ON group_members FOR EACH ROW EXECUTE FUNCTION diag_outage()"
            )
        )
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1), jitter=0.5)
    r = make_runner(realm, clock)
    await drain(r)
    for _ in range(10):  # five tries in all, 30 s doubling
        async with realm.sessions() as session:
            run = await run_reads.get_run(session, realm.id, run_id)
        if run.state != "compensating":
            break
        assert run.due_at is not None
        clock.advance(seconds=(run.due_at - clock.now()).total_seconds())
        await drain(r)
    async with realm.sessions() as session, session.begin():
        await session.execute(text("DROP TRIGGER diag_outage ON group_members"))
        run = await run_reads.get_run(session, realm.id, run_id)
    assert run.state == "compensation_failed", run.state
    return team.workflow_id, run_id, subject
