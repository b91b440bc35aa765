"""Event triggers through the outbox dispatcher, loop protection, and disabled workflows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from engine.directory import organizations
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs import triggers
from testing.factories import RealmHandle
from testing.runs import drain, make_runner
from testing.workflows import publish


def on_membership(*steps: dict[str, Any], organization_id: str | None = None) -> dict[str, Any]:
    trigger: dict[str, Any] = {"type": "event", "event_types": ["organization.membership.added"]}
    if organization_id:
        trigger["organization_id"] = organization_id
    return {"schema_version": 1, "triggers": [trigger], "steps": list(steps)}


async def dispatch(realm: RealmHandle) -> int:
    async with realm.sessions() as session, session.begin():
        return await triggers.dispatch_outbox(session)


async def runs_of(realm: RealmHandle, workflow_id: str) -> list[Any]:
    async with realm.sessions() as session:
        return list(
            (
                await session.execute(
                    text(
                        "SELECT id, state, depth, trigger_type, trigger_key, subject_id FROM workflow_runs WHERE workflow_id = :w ORDER BY id"
                    ),
                    {"w": workflow_id},
                )
            ).all()
        )


async def test_a_membership_event_starts_a_run_once_with_the_organization_pin(realm: RealmHandle) -> None:
    eng = await realm.organization("Eng")
    sales = await realm.organization("Sales")
    role = await realm.role("eng-member", ["realm.workflows.read"], boundary="organization")
    wid = await publish(
        realm,
        on_membership(
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "organization"}, organization_id=eng.id
        ),
    )
    alice = await realm.user("alice@example.com")
    bob = await realm.user("bob@example.com")
    async with realm.sessions() as session, session.begin():
        await organizations.add_member(session, realm.actor, eng.id, alice.id, authority=None)
        await organizations.add_member(
            session, realm.actor, sales.id, bob.id, authority=None
        )  # another organization: no run
    assert await dispatch(realm) >= 2
    assert await dispatch(realm) == 0  # every event is dispatched once
    started = await runs_of(realm, wid)
    assert [(r.subject_id, r.trigger_type, r.depth) for r in started] == [(alice.id, "event", 0)]
    await drain(make_runner(realm))
    assert (await runs_of(realm, wid))[0].state == "succeeded"
    async with realm.sessions() as session:
        org = await session.scalar(
            text("SELECT organization_id FROM role_assignments WHERE user_id = :u"), {"u": alice.id}
        )
    assert org == eng.id  # the step used the organization of the triggering event


async def test_an_event_caused_by_a_run_never_triggers_the_same_workflow(realm: RealmHandle) -> None:
    """A workflow that adds a membership when a membership is added would loop on itself."""
    eng = await realm.organization("Eng")
    ops = await realm.organization("Ops")
    group_role = await realm.role("x", ["realm.workflows.read"])
    del group_role
    # Workflow A: on a membership in Eng, suspend nothing but add the subject to Ops through… there is no
    # add_membership step; use a membership removal which emits organization.membership.removed instead:
    wid = await publish(
        realm,
        {
            "schema_version": 1,
            "triggers": [
                {"type": "event", "event_types": ["organization.membership.added", "organization.membership.removed"]}
            ],
            "steps": [{"id": "leave", "type": "remove_membership", "organization_id": ops.id}],
        },
    )
    alice = await realm.user("alice@example.com")
    async with realm.sessions() as session, session.begin():
        await organizations.add_member(session, realm.actor, ops.id, alice.id, authority=None)
    await dispatch(realm)
    await drain(make_runner(realm))
    first = await runs_of(realm, wid)
    assert [r.state for r in first] == ["succeeded"]  # removed from Ops: emits membership.removed caused by the run
    await dispatch(realm)
    assert len(await runs_of(realm, wid)) == 1  # the caused event did not trigger the same workflow
    async with realm.sessions() as session:
        suppressed = (
            await session.execute(
                text(
                    "SELECT actor_type, details->>'reason', details->>'parent_run_id' FROM audit_events WHERE type = 'workflow.trigger.suppressed'"
                )
            )
        ).all()
        caused = await session.scalar(
            text("SELECT correlation_id FROM outbox_events WHERE type = 'organization.membership.removed'")
        )
    assert suppressed == [("system", "WORKFLOW_LOOP", first[0].id)]
    assert caused == first[0].id  # caused events carry the run id as correlation id
    del eng


async def test_runs_deeper_than_three_are_not_started(realm: RealmHandle) -> None:
    """Chains through other workflows stop at depth 3."""
    orgs = [await realm.organization(f"O{i}") for i in range(6)]
    alice = await realm.user("alice@example.com")
    # Workflow i: when alice's membership in O(i) is removed... build a chain with membership.removed events:
    # W_i reacts to removals (any organization) and removes alice from O(i+1).
    wids = []
    for i in range(5):
        wids.append(
            await publish(
                realm,
                {
                    "schema_version": 1,
                    "triggers": [
                        {
                            "type": "event",
                            "event_types": ["organization.membership.removed"],
                            "organization_id": orgs[i].id,
                        }
                    ],
                    "steps": [{"id": "next", "type": "remove_membership", "organization_id": orgs[i + 1].id}],
                },
                name=f"W{i}",
            )
        )
    async with realm.sessions() as session, session.begin():
        for org in orgs:
            await organizations.add_member(session, realm.actor, org.id, alice.id, authority=None)
    async with realm.sessions() as session, session.begin():
        await organizations.remove_member(session, realm.actor, orgs[0].id, alice.id, authority=None)
    r = make_runner(realm)
    for _ in range(8):
        await dispatch(realm)
        await drain(r)
    depths = []
    for wid in wids:
        depths += [row.depth for row in await runs_of(realm, wid)]
    assert sorted(depths) == [0, 1, 2, 3]
    async with realm.sessions() as session:
        suppressed = (
            (
                await session.execute(
                    text("SELECT details->>'depth' FROM audit_events WHERE type = 'workflow.trigger.suppressed'")
                )
            )
            .scalars()
            .all()
        )
    assert suppressed == ["4"]


async def test_a_disabled_workflows_runs_pause_until_enabled(realm: RealmHandle) -> None:
    subject = await realm.user("s@example.com")
    wid = await publish(
        realm, {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    )
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(session, realm.actor, wid, subject_id=subject.id, organization_id=None)
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, wid, False)
    await drain(make_runner(realm))
    assert [r.state for r in await runs_of(realm, wid)] == ["pending"]
    async with realm.sessions() as session:
        due = await session.scalar(text("SELECT due_at FROM workflow_runs WHERE workflow_id = :w"), {"w": wid})
    assert due is None  # paused runs leave the due index
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, wid, True)
    await drain(make_runner(realm))
    assert [r.state for r in await runs_of(realm, wid)] == ["succeeded"]
    del run
