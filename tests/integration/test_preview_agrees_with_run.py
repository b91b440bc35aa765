"""The preview and the run agree: preview a run, then make it with nothing changed in between, and
every step has the same outcome — succeeded, failed with the same category and message, or never
reached. A property over random subjects (member of the organization or not, in its group or not,
holding the role or not, suspended or not) and random workflows of internal steps; and a table
with one case for every refusal category a preview can report, each made on both executors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory.audit import Actor
from engine.directory.authz import load_authority
from engine.directory.groups import create_group, update_group
from engine.directory.models import Role
from engine.endpoints.calls import EndpointSettings
from engine.platform.clock import FixedClock
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.ids import new_id
from engine.runs import run_reads
from engine.runs import service as runs
from engine.runs.preview import PreviewSettings, preview_run
from engine.runs.runner import Runner, RunnerSettings
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.factories import TEST_SECRET_KEY, RealmHandle, bearer, make_realm

T = TypeVar("T")
Client = AsyncTestClient[Litestar]


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
            group, _ = await create_group(session, self.realm.actor, authority, self.org.id, name="Team")
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
        workflow, _ = await create_workflow(
            session,
            realm.actor,
            name=f"Agree {world.examples}",
            definition=definition,
            has_definition=True,
            requires_approval=False,
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)
    await preview_then_run(realm, workflow.id, subject.id, fast=state["fast"], worker=f"{world.examples}")


Outcome = tuple[str, str | None, str | None]  # would_succeed / would_fail / not_reached, category, message


async def preview_then_run(
    realm: RealmHandle,
    workflow_id: str,
    subject_id: str,
    *,
    fast: bool,
    organization_id: str | None = None,
    endpoints: EndpointSettings | None = None,
    worker: str = "1",
    approve: Callable[[str], Awaitable[None]] | None = None,
) -> list[tuple[str, Outcome]]:
    """Preview a run, start it with nothing changed in between and make it as far as it goes now
    (``approve``, given the run's id, decides its approval as the preview assumes, and the run goes
    on): each step's outcome, the same in both (asserted), as (step id, outcome)."""
    endpoints = endpoints or EndpointSettings()
    async with realm.sessions() as session, session.begin():
        preview = await preview_run(
            session,
            realm.actor,
            workflow_id,
            subject_id=subject_id,
            organization_id=organization_id,
            revision_number=None,
            settings=PreviewSettings(endpoints),
        )
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, realm.actor, workflow_id, subject_id=subject_id, organization_id=organization_id
        )
    for round_ in range(2 if approve else 1):
        if approve and round_:
            await approve(run.id)
        runner = Runner(
            realm.sessions,
            f"worker-agree-{worker}-aaaa",
            settings=RunnerSettings(fast_path=fast, endpoints=endpoints),
            clock=FixedClock(datetime.now(UTC)),
        )
        for _ in range(10):
            if not await runner.run_pass():
                break
    async with realm.sessions() as session:
        attempts = await run_reads.run_attempts(session, run.id)
    ran: dict[str, Outcome] = {}
    for attempt in attempts:
        if attempt.state == "succeeded":
            ran[attempt.step_id] = ("would_succeed", None, None)
        else:
            ran[attempt.step_id] = ("would_fail", attempt.error_category, attempt.error_message)
    foreseen: list[tuple[str, Outcome]] = []
    for step in preview.steps:
        refusal = step.refusal
        category, message = (refusal.category, refusal.message) if refusal is not None else (None, None)
        foreseen.append((step.step_id, (step.outcome, category, message)))
    assert [(step_id, ran.get(step_id, ("not_reached", None, None))) for step_id, _ in foreseen] == foreseen
    return foreseen


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


# --- Every refusal category a preview can report, case by case ------------------------------------------


@dataclass
class Case:
    """A workflow published and a directory made so that its one step meets ``category``."""

    workflow_id: str
    subject_id: str
    endpoints: EndpointSettings | None = None


async def publish_as(realm: RealmHandle, publisher: Actor, step: dict[str, Any]) -> str:
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "only"} | step]}
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session,
            publisher,
            name=f"Case {uuid4().hex[:6]}",
            definition=definition,
            has_definition=True,
            requires_approval=False,
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, publisher, workflow.id, 1)
    return workflow.id


async def sql(realm: RealmHandle, statement: str, **values: Any) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text(statement), values)


async def narrow_publisher(realm: RealmHandle) -> tuple[Actor, Role]:
    """A publisher who holds less than the administrator: workflows, users and organizations."""
    person = await realm.user(f"publisher-{uuid4().hex[:6]}@example.com")
    power = await realm.role("power", ["realm.workflows.*", "realm.users.*", "org.*"])
    await realm.assign(person, power)
    return Actor(type="user", id=person.id, realm_id=realm.id), power


async def group_in(realm: RealmHandle, org_id: str, *role_ids: str) -> str:
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org_id, name="Team")
        if role_ids:
            await update_group(session, realm.actor, authority, org_id, group.id, role_ids=list(role_ids))
    return group.id


async def subscription(client: Client, realm: RealmHandle, destination: str) -> str:
    made = await client.post(
        f"{realm.api}/webhooks", json={"destination": destination, "allow_private_network": True}, headers=realm.headers
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def lost_authority(realm: RealmHandle, client: Client) -> Case:
    publisher, power = await narrow_publisher(realm)
    subject = await realm.user("subject@example.com")
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish_as(realm, publisher, {"type": "assign_role", "role_id": viewer.id, "scope": "realm"})
    await sql(realm, "UPDATE roles SET permissions = ARRAY['realm.workflows.publish'] WHERE id = :r", r=power.id)
    return Case(wid, subject.id)


async def publisher_suspended(realm: RealmHandle, client: Client) -> Case:
    publisher, _ = await narrow_publisher(realm)
    subject = await realm.user("subject@example.com")
    wid = await publish_as(realm, publisher, {"type": "notify", "notice": "welcome"})
    await sql(realm, "UPDATE users SET status = 'suspended' WHERE id = :u", u=publisher.id)
    return Case(wid, subject.id)


async def group_gone(realm: RealmHandle, client: Client) -> Case:
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    group_id = await group_in(realm, org.id)
    wid = await publish_as(realm, realm.actor, {"type": "add_to_group", "group_id": group_id})
    await sql(realm, "DELETE FROM groups WHERE id = :g", g=group_id)
    return Case(wid, subject.id)


async def no_organization(realm: RealmHandle, client: Client) -> Case:
    subject = await realm.user("subject@example.com")
    scoped = await realm.role("org viewer", ["org.groups.read"], boundary="organization")
    wid = await publish_as(realm, realm.actor, {"type": "remove_role", "role_id": scoped.id})
    return Case(wid, subject.id)


async def no_approval(realm: RealmHandle, client: Client) -> Case:
    subject = await realm.user("subject@example.com")
    auditor = await realm.role("Auditor", ["realm.audit.read"])
    wid = await publish_as(realm, realm.actor, {"type": "assign_role", "role_id": auditor.id, "scope": "realm"})
    await sql(realm, "UPDATE roles SET requires_approval = true WHERE id = :r", r=auditor.id)
    return Case(wid, subject.id)


async def group_beyond_publisher(realm: RealmHandle, client: Client) -> Case:
    """The subject is in a group that gives what the publisher does not hold: leaving the
    organization would take it away."""
    publisher, _ = await narrow_publisher(realm)
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    auditor = await realm.role("Auditor", ["realm.audit.read"])
    group_id = await group_in(realm, org.id, auditor.id)
    await sql(
        realm,
        "INSERT INTO group_members (group_id, user_id, realm_id) VALUES (:g, :u, :r)",
        g=group_id,
        u=subject.id,
        r=realm.id,
    )
    wid = await publish_as(realm, publisher, {"type": "remove_membership", "organization_id": org.id})
    return Case(wid, subject.id)


async def stronger_subject(realm: RealmHandle, client: Client) -> Case:
    publisher, _ = await narrow_publisher(realm)
    subject = await realm.user("subject@example.com")
    await realm.assign(subject, await realm.role("Auditor", ["realm.audit.read"]))
    wid = await publish_as(realm, publisher, {"type": "suspend_user"})
    return Case(wid, subject.id)


async def already_held(realm: RealmHandle, client: Client) -> Case:
    subject = await realm.user("subject@example.com")
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    await realm.assign(subject, viewer)
    wid = await publish_as(realm, realm.actor, {"type": "assign_role", "role_id": viewer.id, "scope": "realm"})
    return Case(wid, subject.id)


async def not_in_organization(realm: RealmHandle, client: Client) -> Case:
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    wid = await publish_as(realm, realm.actor, {"type": "remove_membership", "organization_id": org.id})
    return Case(wid, subject.id)


async def already_in_group(realm: RealmHandle, client: Client) -> Case:
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    group_id = await group_in(realm, org.id)
    await sql(
        realm,
        "INSERT INTO group_members (group_id, user_id, realm_id) VALUES (:g, :u, :r)",
        g=group_id,
        u=subject.id,
        r=realm.id,
    )
    wid = await publish_as(realm, realm.actor, {"type": "add_to_group", "group_id": group_id})
    return Case(wid, subject.id)


async def own_publisher(realm: RealmHandle, client: Client) -> Case:
    publisher, _ = await narrow_publisher(realm)
    wid = await publish_as(realm, publisher, {"type": "suspend_user"})
    assert publisher.id is not None
    return Case(wid, publisher.id)


async def approvers_gone(realm: RealmHandle, client: Client) -> Case:
    subject = await realm.user("subject@example.com")
    approver = await realm.user("approver@example.com")
    wid = await publish_as(realm, realm.actor, {"type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    await sql(realm, "UPDATE users SET status = 'suspended' WHERE id = :u", u=approver.id)
    return Case(wid, subject.id)


WITH_KEY = EndpointSettings(operator_key=TEST_SECRET_KEY)


def call_case(state: str, destination: str = "https://hooks.example.com/x", key: bool = True) -> Any:
    """A call to a subscription in ``state`` (``deleted`` since the workflow was published), its
    destination stored as given, the operator key given or not."""

    async def made(realm: RealmHandle, client: Client) -> Case:
        subject = await realm.user("subject@example.com")
        subscription_id = await subscription(client, realm, "https://hooks.example.com/x")
        wid = await publish_as(realm, realm.actor, {"type": "call_webhook", "subscription_id": subscription_id})
        await sql(
            realm, "UPDATE webhook_subscriptions SET destination = :d WHERE id = :i", d=destination, i=subscription_id
        )
        if state == "deleted":  # as a deletion leaves it (the API keeps one a published step names)
            await sql(realm, "UPDATE webhook_subscriptions SET state = 'deleted' WHERE id = :i", i=subscription_id)
        elif state != "active":
            changed = await client.patch(
                f"{realm.api}/webhooks/{subscription_id}", json={"state": state}, headers=realm.headers
            )
            assert changed.status_code == 200, changed.text
        return Case(wid, subject.id, endpoints=WITH_KEY if key else EndpointSettings())

    made.__name__ = f"call_{state}" + ("" if key else "_without_a_key")
    return made


CALL_OR_APPROVAL = {
    "no_eligible_approver",
    "subscription_missing",
    "subscription_disabled",
    "subscription_paused",
    "secret_unavailable",
    "egress_denied",
    "invalid_destination",
    "network_error",
}
# (category, how the case is made): each case's workflow has one step, which meets the category.
CASES: list[tuple[str, Any]] = [
    ("publisher_lacks_authority", lost_authority),
    ("publisher_lacks_authority", publisher_suspended),
    ("organization_required", no_organization),
    ("approval_missing", no_approval),
    ("grant_ceiling_exceeded", group_beyond_publisher),
    ("target_outranks_actor", stronger_subject),
    ("conflict", already_held),
    ("not_a_member", not_in_organization),
    ("already_a_member", already_in_group),
    ("self_action", own_publisher),
    ("no_eligible_approver", approvers_gone),
    ("subscription_missing", call_case("deleted")),
    ("subscription_disabled", call_case("disabled")),
    ("subscription_paused", call_case("paused")),
    ("secret_unavailable", call_case("active", key=False)),
    ("egress_denied", call_case("active", "http://10.1.2.3/hook")),
    ("invalid_destination", call_case("active", "http:///hook")),
    ("network_error", call_case("active", "https://hooks.invalid/x")),
]


async def test_a_grant_after_an_approval_by_someone_who_could_not_make_it_is_refused_as_foreseen(
    client: Client, realm: RealmHandle
) -> None:
    """The preview judges the grant as approved by the first eligible approver; the run, approved by
    that very approver, meets the same refusal: an approver must be able to make the grant."""
    subject = await realm.user("subject@example.com")
    approver = await realm.user("approver@example.com")
    auditor = await realm.role("Auditor", ["realm.audit.read"], requires_approval=True)
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "ask", "type": "approval", "approvers": [approver.id], "expires_in": "1h"},
            {"id": "grant", "type": "assign_role", "role_id": auditor.id, "scope": "realm"},
        ],
    }
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, realm.actor, name="Ask", definition=definition, has_definition=True, requires_approval=False
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)

    async def approve(run_id: str) -> None:
        async with realm.sessions() as session:
            approval_id = await session.scalar(
                text("SELECT id FROM workflow_approvals WHERE run_id = :r"), {"r": run_id}
            )
        token = await realm.token(approver, audience="account")
        answer = await client.post(f"{realm.api}/approvals/{approval_id}/approve", headers=bearer(token))
        assert answer.status_code == 200, answer.text

    steps = await preview_then_run(realm, workflow.id, subject.id, fast=False, approve=approve)
    assert steps == [
        ("ask", ("would_succeed", None, None)),
        ("grant", ("would_fail", "forbidden", "The approver could not assign this role themselves.")),
    ]


# The categories a step decision can answer that no preview meets, and why.
NOT_PREVIEWED = {
    "not_found": "a role, organization or subject that is gone refuses the preview as the start, before any step",
    "group_missing": "likewise (test_a_step_naming_a_group_that_is_gone_refuses_the_preview_as_the_start)",
    "subject_missing": "the preview, as the start, is about an existing user of the realm",
    "no_recipients": "a user of the realm is made with an email address and keeps one",
    "validation_failed": "publication refuses a grant's scope that does not fit its role; a grant's end is after now",
}


def test_the_table_has_every_category_a_preview_can_meet() -> None:
    """Every category engine/runs/decisions.py names, and the directory's rules a step meets, is in
    the table or said above to be out of a preview's reach."""
    import re
    from pathlib import Path

    from engine.runs import decisions

    named = set(re.findall(r'Refusal\(\s*"(\w+)"', Path(decisions.__file__).read_text()))
    of_the_directory = {"grant_ceiling_exceeded", "target_outranks_actor", "conflict", "already_a_member"}
    of_egress = {"egress_denied", "invalid_destination", "network_error"}
    tabled = {category for category, _ in CASES} | {"forbidden"}  # the approver's, in its own test above
    assert named | of_the_directory | of_egress <= tabled | set(NOT_PREVIEWED), sorted(named - tabled)
    assert not tabled & set(NOT_PREVIEWED)


# Internal steps on both executors; approvals and calls have no batched form (their runs go the
# single-run way whatever the setting): once.
AGREEMENTS = [
    (category, made, fast)
    for category, made in CASES
    for fast in ([False] if category in CALL_OR_APPROVAL else [True, False])
]


@pytest.mark.parametrize(
    ("category", "made", "fast"),
    AGREEMENTS,
    ids=[f"{c}-{m.__name__}-{'batched' if f else 'single'}" for c, m, f in AGREEMENTS],
)
async def test_the_preview_and_the_run_meet_the_same_refusal(
    client: Client, realm: RealmHandle, category: str, made: Any, fast: bool
) -> None:
    case = await made(realm, client)
    [(step_id, (outcome, found, _))] = await preview_then_run(
        realm,
        case.workflow_id,
        case.subject_id,
        fast=fast,
        endpoints=case.endpoints,
    )
    assert (step_id, outcome, found) == ("only", "would_fail", category)


async def test_a_step_naming_a_group_that_is_gone_refuses_the_preview_as_the_start(
    client: Client, realm: RealmHandle
) -> None:
    """A vanished reference is the start's refusal, before any step: the preview answers it alike."""
    case = await group_gone(realm, client)
    body = {"subject_id": case.subject_id}
    previewed = await client.post(f"{realm.api}/workflows/{case.workflow_id}/preview", json=body, headers=realm.headers)
    started = await client.post(f"{realm.api}/workflows/{case.workflow_id}/runs", json=body, headers=realm.headers)
    assert previewed.status_code == started.status_code == 409, (previewed.text, started.text)
    assert previewed.json() == started.json()
