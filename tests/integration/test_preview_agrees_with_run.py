"""A property: the preview and the run agree. Over random subjects (member of the organization or
not, in its group or not, holding the role or not, suspended or not) and random workflows of
internal steps, preview a run and then make it with nothing changed in between: every step has
the same outcome — succeeded, failed with the same category and message, or never reached."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory import organizations
from engine.directory.authz import load_authority
from engine.endpoints.calls import EndpointSettings
from engine.platform.clock import FixedClock
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.ids import new_id
from engine.runs import run_reads
from engine.runs import service as runs
from engine.runs.preview import PreviewSettings, preview_run
from engine.runs.runner import Runner, RunnerSettings
from engine.workflows import service as workflows
from testing.factories import RealmHandle, make_realm

T = TypeVar("T")


class World:
    """One loop, database and realm for every example: an organization, its group, a role."""

    def __init__(self, database_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.engine = make_engine(database_url, pool_size=3)
        self.sessions: async_sessionmaker[AsyncSession] = make_sessionmaker(self.engine)
        self.realm: RealmHandle = self.run(make_realm(self.sessions))
        self.org = self.run(self.realm.organization("Eng"))
        self.role = self.run(self.realm.role("viewer", ["realm.workflows.read"]))
        self.group_id = self.run(self._group())
        self.examples = 0

    async def _group(self) -> str:
        async with self.sessions() as session, session.begin():
            authority = await load_authority(session, self.realm.id, "user", self.realm.admin.id)
            group, _ = await organizations.create_group(session, self.realm.actor, authority, self.org.id, name="Team")
        return group.id

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.engine.dispose())
        self.loop.close()


STEPS = ["grant", "revoke", "join", "leave_group", "leave", "suspend", "notify", "end"]


def step_of(world: World, kind: str, index: int) -> dict[str, Any]:
    made: dict[str, dict[str, Any]] = {
        "grant": {"type": "assign_role", "role_id": world.role.id, "scope": "realm"},
        "revoke": {"type": "remove_role", "role_id": world.role.id},
        "join": {"type": "add_to_group", "group_id": world.group_id},
        "leave_group": {"type": "remove_from_group", "group_id": world.group_id},
        "leave": {"type": "remove_membership", "organization_id": world.org.id},
        "suspend": {"type": "suspend_user"},
        "notify": {"type": "notify", "notice": "welcome"},
        "end": {"type": "end"},
    }
    return {"id": f"s{index}"} | made[kind]


async def example(world: World, state: dict[str, bool], kinds: list[str]) -> None:
    realm = world.realm
    world.examples += 1
    subject = await realm.user(f"subject-{world.examples}@example.com")
    async with realm.sessions() as session, session.begin():
        if state["member"]:
            await session.execute(
                text("INSERT INTO memberships (id, realm_id, organization_id, user_id) VALUES (:i, :r, :o, :u)"),
                {"i": new_id("mem"), "r": realm.id, "o": world.org.id, "u": subject.id},
            )
            if state["in_group"]:
                await session.execute(
                    text("INSERT INTO group_members (group_id, user_id, realm_id) VALUES (:g, :u, :r)"),
                    {"g": world.group_id, "u": subject.id, "r": realm.id},
                )
        if state["suspended"]:
            await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": subject.id})
    if state["holds"]:
        await realm.assign(subject, world.role)
    if "end" in kinds:
        kinds = [*kinds[: kinds.index("end")], "end"]  # nothing after an end step is valid
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [step_of(world, kind, i) for i, kind in enumerate(kinds)],
    }
    async with realm.sessions() as session, session.begin():
        workflow, _ = await workflows.create_workflow(
            session,
            realm.actor,
            name=f"Agree {world.examples}",
            definition=definition,
            has_definition=True,
            requires_approval=False,
        )
    async with realm.sessions() as session, session.begin():
        await workflows.publish_revision(session, realm.actor, workflow.id, 1)
    async with realm.sessions() as session, session.begin():
        preview = await preview_run(
            session,
            realm.actor,
            workflow.id,
            subject_id=subject.id,
            organization_id=None,
            revision_number=None,
            settings=PreviewSettings(EndpointSettings()),
        )
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, realm.actor, workflow.id, subject_id=subject.id, organization_id=None
        )
    runner = Runner(
        realm.sessions,
        f"worker-agree-{world.examples}-aaaa",
        settings=RunnerSettings(fast_path=state["fast"]),
        clock=FixedClock(datetime.now(UTC)),
    )
    for _ in range(10):
        if not await runner.run_pass():
            break
    async with realm.sessions() as session:
        attempts = await run_reads.run_attempts(session, run.id)
    ran: dict[str, tuple[str, str | None, str | None]] = {}
    for attempt in attempts:
        if attempt.state == "succeeded":
            ran[attempt.step_id] = ("would_succeed", None, None)
        else:
            ran[attempt.step_id] = ("would_fail", attempt.error_category, attempt.error_message)
    for step in preview["steps"]:
        refusal = step["refusal"] or {}
        foreseen = (step["outcome"], refusal.get("category"), refusal.get("message"))
        assert ran.get(step["step_id"], ("not_reached", None, None)) == foreseen, (state, kinds, preview["steps"])


def test_the_preview_foresees_every_steps_outcome(database_url: str) -> None:
    world = World(database_url)
    try:

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(
            state=st.fixed_dictionaries(
                {
                    "member": st.booleans(),
                    "in_group": st.booleans(),
                    "holds": st.booleans(),
                    "suspended": st.booleans(),
                    "fast": st.booleans(),
                }
            ),
            kinds=st.lists(st.sampled_from(STEPS), min_size=1, max_size=4),
        )
        def agree(state: dict[str, bool], kinds: list[str]) -> None:
            world.run(example(world, state, kinds))

        agree()
    finally:
        world.close()
