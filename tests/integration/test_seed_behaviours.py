"""Behaviours of seed 000 that cut across the engine: a run's pinned revision and accountable
publisher, an event run's input version, the delegation ceiling at publication (group ancestors,
the organization every trigger pins), the fixed ``requires_approval``, and the outbox dispatch's
one transaction. Real runner, real database, real HTTP handlers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import organizations, webhooks
from engine.directory.audit import Actor
from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import Role, User
from engine.platform.clock import FixedClock
from engine.platform.errors import EngineError
from engine.runs import service as runs
from engine.runs import triggers as event_triggers
from engine.runs.runner import Runner, RunnerSettings
from engine.worker.runtime import wake_pass
from engine.workflows.catalog import create_workflow
from engine.workflows.definitions.canonical import input_version
from engine.workflows.publication import publish_revision, rollback
from engine.workflows.revisions import stage_revision
from testing.authorization import realm_routes
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.runs import drain, load

LEASE = timedelta(seconds=30)


def actor_of(realm: RealmHandle, user: User) -> Actor:
    return Actor(type="user", id=user.id, realm_id=realm.id)


async def administrator(realm: RealmHandle, email: str) -> User:
    user = await realm.user(email)
    await realm.assign(user, await realm.builtin_role("realm-admin"))
    return user


async def create(realm: RealmHandle, definition: dict[str, Any], name: str = "Seed") -> str:
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, realm.actor, name=name, definition=definition, has_definition=True, requires_approval=False
        )
    return workflow.id


async def publish_as(realm: RealmHandle, user: User, workflow_id: str, number: int) -> None:
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, actor_of(realm, user), workflow_id, number)


async def start(realm: RealmHandle, workflow_id: str, subject: User) -> str:
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, realm.actor, workflow_id, subject_id=subject.id, organization_id=None
        )
        return run.id


# --- a run keeps its revision and its accountable publisher ----------------------------------------


async def test_a_run_keeps_its_revision_and_publisher_across_publish_and_rollback(realm: RealmHandle) -> None:
    """Revision 1 (published by A) waits an hour, then grants ``first``; revision 2 grants ``second``.
    A run started under 1 is still on 1 after B publishes 2 and after C rolls back to 1; a run
    started after each publication gets that revision and its publisher. A then loses their
    authority: only A's run fails (``publisher_lacks_authority``), the others grant as B and C."""
    a, b, c = [await administrator(realm, f"{who}@example.com") for who in ("a", "b", "c")]
    first = await realm.role("first", ["realm.workflows.read"])
    second = await realm.role("second", ["realm.audit.read"])

    def waits_then_grants(role: Role) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "steps": [
                {"id": "pause", "type": "wait", "duration": "1h"},
                {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            ],
        }

    wid = await create(realm, waits_then_grants(first))
    await publish_as(realm, a, wid, 1)
    subjects = [await realm.user(f"subject{i}@example.com") for i in range(3)]
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    worker = Runner(realm.sessions, "worker-seed-1-aaaa", settings=RunnerSettings(lease=LEASE), clock=clock)

    on_one = await start(realm, wid, subjects[0])
    clock.current = datetime.now(UTC) + timedelta(seconds=1)  # after the runs it must find due
    await drain(worker)
    async with realm.sessions() as session, session.begin():
        await stage_revision(session, realm.actor, wid, waits_then_grants(second))
    await publish_as(realm, b, wid, 2)
    on_two = await start(realm, wid, subjects[1])
    async with realm.sessions() as session, session.begin():
        await rollback(session, actor_of(realm, c), wid, 1)
    rolled_back = await start(realm, wid, subjects[2])
    clock.current = datetime.now(UTC) + timedelta(seconds=1)
    await drain(worker)

    expected = {on_one: (1, a.id), on_two: (2, b.id), rolled_back: (1, c.id)}
    for run_id, (revision, publisher) in expected.items():
        run, _ = await load(realm, run_id)
        assert (run.revision, run.publisher_id, run.state) == (revision, publisher, "waiting"), run_id

    async with realm.sessions() as session, session.begin():  # A is no administrator any more
        await session.execute(text("DELETE FROM role_assignments WHERE user_id = :u"), {"u": a.id})
    clock.advance(hours=1, seconds=1)
    await drain(worker)

    async with realm.sessions() as session:
        revisions = {
            number: digest
            for number, digest in await session.execute(
                text("SELECT number, hash FROM workflow_revisions WHERE workflow_id = :w"), {"w": wid}
            )
        }
        granted = {
            (user_id, role_id, granted_by)
            for user_id, role_id, granted_by in await session.execute(
                text("SELECT user_id, role_id, granted_by FROM role_assignments WHERE source_run_id IS NOT NULL")
            )
        }
    run, attempts = await load(realm, on_one)
    assert (run.state, run.error_category) == ("failed", "publisher_lacks_authority")
    assert {at.input_version for at in attempts} == {input_version(1, revisions[1], 1)}
    run, attempts = await load(realm, on_two)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    assert {at.input_version for at in attempts} == {input_version(2, revisions[2], 1)}
    run, attempts = await load(realm, rolled_back)
    assert run.state == "succeeded", (run.error_category, run.last_error)
    assert {at.input_version for at in attempts} == {input_version(1, revisions[1], 1)}
    assert granted == {(subjects[1].id, second.id, b.id), (subjects[2].id, first.id, c.id)}
    async with realm.sessions() as session:
        actors: dict[str, list[str]] = dict(
            (
                await session.execute(
                    text(
                        "SELECT correlation_id, array_agg(DISTINCT actor_id) FROM audit_events "
                        "WHERE type LIKE 'workflow.step.%' GROUP BY correlation_id"
                    )
                )
            ).all()
        )
    assert actors == {on_one: [a.id], on_two: [b.id], rolled_back: [c.id]}


# --- an event run's input version ------------------------------------------------------------------


async def test_an_event_runs_input_version_is_the_events_event_version(realm: RealmHandle) -> None:
    """The run records the event's ``event_version`` (7 here, where the definition's schema_version
    is 1) and each attempt's input_version ends with it; a manual run of the same workflow records
    the schema_version."""
    eng = await realm.organization("Eng")
    role = await realm.role("viewer", ["realm.workflows.read"])
    wid = await create(
        realm,
        {
            "schema_version": 1,
            "triggers": [{"type": "event", "event_types": ["organization.membership.added"]}, {"type": "manual"}],
            "steps": [{"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}],
        },
    )
    await publish_as(realm, realm.admin, wid, 1)
    alice, bob = await realm.user("alice@example.com"), await realm.user("bob@example.com")
    async with realm.sessions() as session, session.begin():
        await organizations.add_member(session, realm.actor, eng.id, alice.id, authority=None)
        await session.execute(
            text("UPDATE outbox_events SET event_version = 7 WHERE type = 'organization.membership.added'")
        )
    async with realm.sessions() as session, session.begin():
        assert await event_triggers.dispatch_outbox(session) >= 1
    manual = await start(realm, wid, bob)
    await drain(Runner(realm.sessions, "worker-seed-2-aaaa", settings=RunnerSettings(lease=LEASE)))
    async with realm.sessions() as session:
        [event_run] = (
            await session.execute(
                text("SELECT id FROM workflow_runs WHERE workflow_id = :w AND trigger_type = 'event'"), {"w": wid}
            )
        ).scalars()
        digest = await session.scalar(text("SELECT hash FROM workflow_revisions WHERE workflow_id = :w"), {"w": wid})
    run, attempts = await load(realm, event_run)
    assert (run.input_version, run.state) == (7, "succeeded")
    assert [at.input_version for at in attempts] == [input_version(1, digest, 7)]
    assert attempts[0].input_version.endswith(":i7")
    run, attempts = await load(realm, manual)
    assert (run.input_version, run.state) == (1, "succeeded")
    assert [at.input_version for at in attempts] == [input_version(1, digest, 1)]


# --- the delegation ceiling at publication ---------------------------------------------------------


async def publisher(realm: RealmHandle, email: str, permissions: list[str], organization_id: str | None = None) -> User:
    """A user who may publish and holds ``permissions`` (in ``organization_id`` when given)."""
    user = await realm.user(email)
    await realm.assign(user, await realm.role(f"publish-{email}", ["realm.workflows.publish"]))
    boundary = "organization" if organization_id else "realm"
    held = await realm.role(f"holds-{email}", permissions, boundary=boundary)
    await realm.assign(user, held, organization_id=organization_id)
    return user


async def refusal(realm: RealmHandle, user: User, workflow_id: str) -> tuple[str, list[tuple[str, str]]] | None:
    """None when ``user`` publishes revision 1, else the refusal's code and its (path, code) issues
    (the revision is left unpublished either way)."""
    async with realm.sessions() as session:
        try:
            await publish_revision(session, actor_of(realm, user), workflow_id, 1)
        except EngineError as refused:
            return refused.code, [(i.path, i.code) for i in refused.issues]
        finally:
            await session.rollback()
    return None


async def test_a_group_step_needs_the_ceiling_of_every_role_its_ancestors_grant(realm: RealmHandle) -> None:
    """``child`` grants nothing itself; its grandparent ``root`` grants ``auditor``. Publishing a
    join to ``child`` needs org.groups.write and every permission of ``auditor``: a publisher
    without realm.audit.read is refused, naming the step; one with it publishes."""
    org = await realm.organization("Eng")
    auditor = await realm.role("auditor", ["realm.audit.read"])
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        root, _ = await create_group(session, realm.actor, authority, org.id, name="Root", role_ids=[auditor.id])
        middle, _ = await create_group(session, realm.actor, authority, org.id, name="Middle", parent_id=root.id)
        child, _ = await create_group(session, realm.actor, authority, org.id, name="Child", parent_id=middle.id)
    wid = await create(
        realm,
        {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "steps": [
                {"id": "done", "type": "notify", "notice": "welcome"},
                {"id": "team", "type": "add_to_group", "group_id": child.id},
            ],
        },
    )
    short = await publisher(realm, "short@example.com", ["org.groups.write"])
    enough = await publisher(realm, "enough@example.com", ["org.groups.write", "realm.audit.read"])
    assert await refusal(realm, short, wid) == (
        "grant_ceiling_exceeded",
        [("/definition/steps/1", "grant_ceiling_exceeded")],
    )
    assert await refusal(realm, enough, wid) is None


async def test_a_group_step_is_checked_in_the_groups_own_organization(realm: RealmHandle) -> None:
    """A join to a group needs org.groups.write, and each organization role the group grants, in
    the group's organization (not realm-wide, not in the run's): a publisher who holds both only
    in Eng publishes a join to Eng's group and is refused one to Sales' group; the refusal names
    the permission in Sales."""
    eng, sales = await realm.organization("Eng"), await realm.organization("Sales")
    member_writer = await realm.role("member writer", ["org.members.write"], boundary="organization")
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        eng_team, _ = await create_group(
            session, realm.actor, authority, eng.id, name="Eng", role_ids=[member_writer.id]
        )
        sales_team, _ = await create_group(
            session, realm.actor, authority, sales.id, name="Sales", role_ids=[member_writer.id]
        )
    in_eng = await publisher(realm, "in-eng@example.com", ["org.groups.write", "org.members.write"], eng.id)

    def join(group_id: str) -> dict[str, Any]:
        steps = [{"id": "team", "type": "add_to_group", "group_id": group_id}]
        return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps}

    assert await refusal(realm, in_eng, await create(realm, join(eng_team.id), name="Join Eng")) is None
    async with realm.sessions() as session:
        try:
            await publish_revision(session, actor_of(realm, in_eng), await create(realm, join(sales_team.id)), 1)
        except EngineError as refused:
            assert (refused.code, [(i.path, i.code) for i in refused.issues]) == (
                "forbidden",
                [("/definition/steps/0", "forbidden")],
            )
            assert refused.members["missing_permissions"] == [
                {"permission": "org.groups.write", "organization_id": sales.id}
            ]
        else:
            raise AssertionError("a join to Sales' group was published by a publisher of Eng")
        finally:
            await session.rollback()


async def test_steps_without_an_organization_are_checked_where_every_trigger_pins_the_same_one(
    realm: RealmHandle,
) -> None:
    """``remove_membership`` without its own organization acts in the trigger's. A publisher who
    holds org.members.write only in Eng may publish it when every trigger pins Eng (an event's
    organization, a schedule of Eng's members or of a group of Eng); not when one trigger pins
    Sales or pins nothing (a manual start): then realm-wide authority is needed, and a publisher
    who holds org.members.write realm-wide publishes every variant."""
    eng, sales = await realm.organization("Eng"), await realm.organization("Sales")
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        team, _ = await create_group(session, realm.actor, authority, eng.id, name="Team")
    in_eng = await publisher(realm, "in-eng@example.com", ["org.members.write"], organization_id=eng.id)
    everywhere = await publisher(realm, "everywhere@example.com", ["org.members.write"])

    def event(org_id: str) -> dict[str, Any]:
        return {"type": "event", "event_types": ["organization.membership.added"], "organization_id": org_id}

    def schedule(select: dict[str, Any]) -> dict[str, Any]:
        return {"type": "schedule", "every": "24h", "select": select}

    variants: list[tuple[list[dict[str, Any]], bool]] = [
        ([event(eng.id), schedule({"type": "organization_members", "organization_id": eng.id})], True),
        ([event(eng.id), schedule({"type": "group_members", "group_id": team.id})], True),
        ([event(eng.id)], True),
        ([event(eng.id), event(sales.id)], False),
        ([event(eng.id), schedule({"type": "organization_members", "organization_id": sales.id})], False),
        ([event(eng.id), {"type": "manual"}], False),
        ([{"type": "event", "event_types": ["organization.membership.added"]}], False),
    ]
    for index, (triggers, allowed) in enumerate(variants):
        wid = await create(
            realm,
            {"schema_version": 1, "triggers": triggers, "steps": [{"id": "leave", "type": "remove_membership"}]},
            name=f"Leave {index}",
        )
        expected = None if allowed else ("forbidden", [("/definition/steps/0", "forbidden")])
        assert await refusal(realm, in_eng, wid) == expected, triggers
        assert await refusal(realm, everywhere, wid) is None, triggers


# --- requires_approval is fixed at creation ---------------------------------------------------------


async def test_no_endpoint_changes_requires_approval_after_creation(
    app: Litestar, client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """Every unsafe workflow route of the API is called with ``requires_approval`` in its body (and
    the policy turned on and off): a route with a body refuses the member at ``/requires_approval``,
    the two without one (enable, disable) ignore it, and the stored flags of a workflow with and one without approval never change. Revision 1 of the
    first still needs an approval to be published."""
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    flags: dict[str, bool] = {}
    for name, flag in (("Reviewed", True), ("Quick", False)):
        created = await client.post(
            realm.api + "/workflows",
            json={"name": name, "requires_approval": flag, "definition": definition},
            headers=realm.headers,
        )
        assert created.status_code == 201, created.text
        flags[created.json()["id"]] = flag

    async def stored() -> dict[str, bool]:
        async with realm.sessions() as session:
            rows = await session.execute(
                text("SELECT id, requires_approval FROM workflows WHERE realm_id = :r"), {"r": realm.id}
            )
            return {wid: flag for wid, flag in rows}

    routes = sorted(
        (method, path)
        for method, path in realm_routes(app)
        if path.startswith("/workflows/{workflow_id}") and method in {"POST", "PATCH", "PUT"}
    )
    assert ("PATCH", "/workflows/{workflow_id}") in routes and len(routes) >= 8, routes
    for wid, flag in flags.items():
        for method, path in routes:
            url = realm.api + path.replace("{workflow_id}", wid).replace("{n}", "1")
            answer = await client.request(method, url, json={"requires_approval": not flag}, headers=realm.headers)
            if answer.status_code == 422:  # a route with a body: the member is refused by name
                assert ("/requires_approval", "unknown_member") in {
                    (e["path"], e["code"]) for e in answer.json().get("errors", [])
                }, (method, path, answer.text)
            else:  # a route without a body (enable, disable) ignores it
                assert path.rsplit("/", 1)[-1] in {"enable", "disable"}, (method, path, answer.status_code)
            assert (await stored())[wid] is flag, (method, path)
        renamed = await client.patch(
            realm.api + f"/workflows/{wid}", json={"name": f"Renamed {wid[-4:]}"}, headers=realm.headers
        )
        assert renamed.status_code == 200 and renamed.json()["requires_approval"] is flag
    for on in (True, False):
        policy = await client.patch(
            realm.api + "/policy", json={"extensions": {"workflow_publish_approval": on}}, headers=realm.headers
        )
        assert policy.status_code == 200, policy.text
    assert await stored() == flags
    [reviewed] = [wid for wid, flag in flags.items() if flag]
    refused = await client.post(
        realm.api + f"/workflows/{reviewed}/revisions/1/publish", json={}, headers=realm.headers
    )
    assert refused.status_code == 403 and refused.json()["code"] == "approval_required"


# --- the outbox dispatch is one transaction ---------------------------------------------------------


async def subscription(realm: RealmHandle) -> str:
    """An active subscription to membership events (never called here: deliveries only queue)."""
    async with realm.sessions() as session, session.begin():
        made, _ = await webhooks.create_subscription(
            session,
            realm.actor,
            TEST_SECRET_KEY,
            destination="https://hooks.example.com/in",
            event_types=["organization.membership.added"],
        )
    return made.id


async def refuse_inserts(realm: RealmHandle, table: str, condition: str = "true") -> None:
    """PostgreSQL refuses an INSERT into ``table`` when ``condition`` (over NEW) holds."""
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "CREATE OR REPLACE FUNCTION seed_refuse() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN IF {condition} THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
            )
        )
        await session.execute(
            text(f"CREATE TRIGGER seed_refuse BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION seed_refuse()")
        )


async def allow_inserts(realm: RealmHandle, table: str) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text(f"DROP TRIGGER seed_refuse ON {table}"))


@pytest.mark.parametrize("failing", ["webhook_deliveries", "workflow_runs"])
async def test_an_error_in_the_outbox_dispatch_rolls_back_the_whole_batch(realm: RealmHandle, failing: str) -> None:
    """Two membership events, a workflow they trigger and a subscription that receives them. When
    the webhook fan-out fails (after both runs were started), or the second event's run cannot be
    started (after the first was), the dispatch leaves nothing: no run, no ``workflow.run.started``,
    no delivery, and both events still waiting. Once the error is gone the next dispatch does it
    all, once."""
    eng = await realm.organization("Eng")
    wid = await create(
        realm,
        {
            "schema_version": 1,
            "triggers": [{"type": "event", "event_types": ["organization.membership.added"]}],
            "steps": [{"id": "done", "type": "end"}],
        },
    )
    await publish_as(realm, realm.admin, wid, 1)
    created = await subscription(realm)
    alice, bob = await realm.user("alice@example.com"), await realm.user("bob@example.com")
    async with realm.sessions() as session, session.begin():
        await organizations.add_member(session, realm.actor, eng.id, alice.id, authority=None)
        await organizations.add_member(session, realm.actor, eng.id, bob.id, authority=None)
    condition = "true" if failing == "webhook_deliveries" else f"NEW.subject_id = '{bob.id}'"
    await refuse_inserts(realm, failing, condition)
    worker = Runner(realm.sessions, "worker-seed-3-aaaa", settings=RunnerSettings(lease=LEASE))

    async def state() -> tuple[int, int, int, int]:
        async with realm.sessions() as session:
            counts = await session.execute(
                text(
                    "SELECT (SELECT count(*) FROM workflow_runs WHERE workflow_id = :w),"
                    " (SELECT count(*) FROM audit_events WHERE type = 'workflow.run.started' AND realm_id = :r),"
                    " (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = :s),"
                    " (SELECT count(*) FROM outbox_events WHERE realm_id = :r AND dispatched_at IS NULL"
                    "    AND type = 'organization.membership.added')"
                ),
                {"w": wid, "r": realm.id, "s": created},
            )
            return tuple(counts.one())  # type: ignore[return-value]

    await wake_pass(worker, realm.sessions)  # the dispatch fails; the pass goes on
    assert await state() == (0, 0, 0, 2)
    await allow_inserts(realm, failing)
    await wake_pass(worker, realm.sessions)
    await wake_pass(worker, realm.sessions)
    assert await state() == (2, 2, 2, 0)
