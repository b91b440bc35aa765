"""Events for automation — how a run ended, an approval asked and decided — written to the outbox
with the change and delivered, signed, to a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.audit import APPROVAL_EVENT_TYPES, RUN_OUTCOME_EVENT_TYPES
from engine.endpoints.deliveries import DeliveryDispatcher
from engine.platform.clock import FixedClock
from engine.runs.runner import Runner, RunnerSettings
from testing.approvals import approval_of
from testing.factories import RealmHandle, bearer
from testing.receiver import Receiver
from testing.runs import start
from testing.webhooks import dispatch, policy, settle, subscribe
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]
AUTOMATION = [*RUN_OUTCOME_EVENT_TYPES, *APPROVAL_EVENT_TYPES]


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made = [Receiver().start() for _ in range(3)]
    try:
        yield made
    finally:
        for r in made:
            r.stop()


def make_runner(realm: RealmHandle, clock: FixedClock, *, fast: bool = True, worker: str = "") -> Runner:
    settings = RunnerSettings(lease=timedelta(seconds=30), fast_path=fast)
    return Runner(realm.sessions, worker or f"worker-events-{int(fast)}-aaaa", settings=settings, clock=clock)


async def drain(runner: Runner) -> None:
    for _ in range(20):
        if not await runner.run_pass():
            return


async def deliver(realm: RealmHandle, hooks: list[str]) -> None:
    await dispatch(realm)
    await settle(realm, DeliveryDispatcher(realm.sessions, policy()), hooks)


async def outbox(realm: RealmHandle, run_id: str) -> list[tuple[str, str | None]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT type, correlation_id FROM outbox_events WHERE payload->>'run_id' = :r ORDER BY id"),
            {"r": run_id},
        )
        return [(t, c) for t, c in rows.all()]


def without_moments(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("id", "timestamp")}


async def test_a_finished_run_is_delivered_signed_alike_from_the_fast_path_and_the_ordinary_one(
    realm: RealmHandle, receivers: list[Receiver]
) -> None:
    named, everything, directory_only = receivers
    hook = await subscribe(realm, named, ["workflow.run.succeeded", "user.created"])
    all_hook = await subscribe(realm, everything)  # null: every directory event, none of the runs'
    dir_hook = await subscribe(realm, directory_only, ["user.suspended"])
    org = await realm.organization("Eng")
    role = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "done", "type": "end"},
        ),
    )
    bodies = []
    for fast in (True, False):
        subject = await realm.user()
        await realm.member(org, subject)
        run_id = await start(realm, wid, subject.id, org.id)
        runner = make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5)), fast=fast)
        await drain(runner)
        assert runner.fast.moved == (2 if fast else 0)
        # Written with the run's last transition, with the run as its correlation.
        assert await outbox(realm, run_id) == [("workflow.run.succeeded", run_id)]
        await deliver(realm, [hook, all_hook, dir_hook])
        got = [r for r in named.requests() if r.json["type"] == "workflow.run.succeeded"]
        body = got[-1].json
        assert got[-1].verified_by == [0]
        assert (got[-1].header("Webhook-Signature") or "").startswith("v1,")
        assert set(body) == {"type", "timestamp", "id", "realm_id", "correlation_id", "data"}
        assert body["id"].startswith("obx_") and body["correlation_id"] == run_id
        assert body["data"] == {
            "subject_id": subject.id,
            "organization_id": org.id,
            "run_id": run_id,
            "workflow_id": wid,
            "revision": 1,
            "state": "succeeded",
            "error_category": None,
        }
        bodies.append(body)
    # One shape whichever executor wrote it: only the run and its subject differ.
    assert without_moments(bodies[0]) | {"correlation_id": None} == without_moments(bodies[1]) | {
        "correlation_id": None,
        "data": bodies[0]["data"]
        | {"run_id": bodies[0]["data"]["run_id"], "subject_id": bodies[0]["data"]["subject_id"]},
    }
    assert [r.json["type"] for r in named.requests()].count("workflow.run.succeeded") == 2
    assert not any(r.json["type"].startswith("workflow.") for r in everything.requests())
    assert directory_only.requests() == []


async def test_an_approval_asked_then_rejected_and_the_run_compensated(
    realm: RealmHandle, receivers: list[Receiver], client: Client
) -> None:
    receiver = receivers[0]
    hook = await subscribe(realm, receiver, AUTOMATION)
    subject = await realm.user()
    approver = await realm.user()
    role = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"},
        ),
    )
    runner = make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5)))
    run_id = await start(realm, wid, subject.id)
    await drain(runner)
    await deliver(realm, [hook])
    [asked] = receiver.requests()
    token = await realm.token(approver, audience="account")
    pending = await approval_of(client, realm, token)
    assert asked.json["type"] == "workflow.approval.requested" and asked.verified_by == [0]
    assert asked.json["data"] == {
        "subject_id": subject.id,
        "organization_id": None,
        "approval_id": pending["id"],
        "run_id": run_id,
        "workflow_id": wid,
        "step_id": "approve",
        "status": "pending",
        "decided_by": None,
    }
    rejected = await client.post(f"{realm.api}/approvals/{pending['id']}/reject", json={}, headers=bearer(token))
    assert rejected.status_code == 200, rejected.text
    # The decision's event is in the outbox as soon as the decision is (same transaction).
    assert [t for t, _ in await outbox(realm, run_id)][-1] == "workflow.approval.rejected"
    await drain(runner)
    await deliver(realm, [hook])
    got = [r.json for r in receiver.requests()]
    assert [b["type"] for b in got] == [
        "workflow.approval.requested",
        "workflow.approval.rejected",
        "workflow.run.compensated",
    ]
    assert got[1]["data"]["decided_by"] == approver.id and got[1]["data"]["status"] == "rejected"
    assert got[2]["data"]["state"] == "compensated" and got[2]["data"]["error_category"] == "approval_rejected"


async def test_an_approval_approved_and_the_run_succeeded_shaped_like_directory_events(
    realm: RealmHandle, receivers: list[Receiver], client: Client
) -> None:
    receiver = receivers[0]
    hook = await subscribe(realm, receiver, [*AUTOMATION, "user.created"])
    subject = await realm.user()
    approver = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    runner = make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5)))
    run_id = await start(realm, wid, subject.id)
    await drain(runner)
    token = await realm.token(approver, audience="account")
    pending = await approval_of(client, realm, token)
    approved = await client.post(f"{realm.api}/approvals/{pending['id']}/approve", json={}, headers=bearer(token))
    assert approved.status_code == 200, approved.text
    await drain(runner)
    await realm.user("later@example.com")  # a directory event to the same subscription
    await deliver(realm, [hook])
    everything = [r.json for r in receiver.requests()]
    got = [b for b in everything if b["type"].startswith("workflow.")]
    assert [b["type"] for b in got] == [
        "workflow.approval.requested",
        "workflow.approval.approved",
        "workflow.run.succeeded",
    ]
    assert [b["type"] for b in everything].count("user.created") >= 3  # subject, approver, later
    assert got[1]["data"]["status"] == "approved" and got[1]["data"]["decided_by"] == approver.id
    assert got[2]["data"]["run_id"] == run_id and got[2]["data"]["error_category"] is None
    # The same envelope as a directory event, and the same signature.
    assert {frozenset(b) for b in everything} == {
        frozenset({"type", "timestamp", "id", "realm_id", "correlation_id", "data"})
    }
    assert all(r.verified_by == [0] for r in receiver.requests())


async def test_an_approval_that_expires_fails_the_run_and_a_cancelled_run_says_so(
    realm: RealmHandle, receivers: list[Receiver], client: Client
) -> None:
    receiver = receivers[0]
    hook = await subscribe(realm, receiver, AUTOMATION)
    subject = await realm.user()
    approver = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    expiring = await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock))
    cancelled = await start(realm, wid, subject.id)
    clock.advance(seconds=1)
    await drain(make_runner(realm, clock))
    answer = await client.post(f"{realm.api}/workflow-runs/{cancelled}/cancel", json={}, headers=realm.headers)
    assert answer.status_code == 202, answer.text
    await drain(make_runner(realm, clock))
    clock.advance(minutes=61)
    await drain(make_runner(realm, clock, worker="worker-events-2-bbbb"))
    await deliver(realm, [hook])
    got = [(r.json["type"], r.json["data"]["run_id"]) for r in receiver.requests()]
    assert got == [
        ("workflow.approval.requested", expiring),
        ("workflow.approval.requested", cancelled),
        ("workflow.run.cancelled", cancelled),  # its pending approval is cancelled, without an event
        ("workflow.approval.expired", expiring),
        ("workflow.run.failed", expiring),
    ]
    failed = receiver.requests()[-1].json["data"]
    assert (failed["state"], failed["error_category"]) == ("failed", "approval_expired")


async def test_subscriptions_name_the_automation_events_and_nothing_unknown(realm: RealmHandle, client: Client) -> None:
    made = await client.post(
        f"{realm.api}/webhooks",
        json={
            "destination": "https://hooks.example.com/runs",
            "event_types": ["workflow.run.failed", "workflow.approval.requested"],
        },
        headers=realm.headers,
    )
    assert made.status_code == 201, made.text
    assert made.json()["event_types"] == ["workflow.run.failed", "workflow.approval.requested"]
    refused = await client.post(
        f"{realm.api}/webhooks",
        json={"destination": "https://hooks.example.com/x", "event_types": ["workflow.run.started"]},
        headers=realm.headers,
    )
    assert refused.status_code == 422
    assert [(e["path"], e["code"]) for e in refused.json()["errors"]] == [("/event_types/0", "unknown_event_type")]
