"""The demo realm as the layout and accessibility tests look at it: every kind of page and state,
seeded on the live server's database, and the list of pages to visit.

``demo`` and ``receiver`` are fixtures: a test module that uses them imports them by name.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from e2e.helpers import LiveServer, in_database
from engine.directory import principals, webhooks
from engine.directory.audit import Actor
from engine.runs import service as runs
from engine.seeding.demo_realm import DEMO_SLUG, seed_demo
from engine.seeding.demo_workflow import approve_demo_request, seed_demo_workflow
from engine.workflows.catalog import create_workflow
from testing.processes import cockpit_env
from testing.receiver import Receiver

LAYOUT_ENV = {"COCKPIT_ALLOW_PRIVATE_EGRESS": "true", "COCKPIT_DELIVERY_BACKOFF_MS": "1000"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook endpoint that refuses its second request once (503) and then accepts everything."""
    answers = iter([200, 503])
    r = Receiver(respond=lambda _r: next(answers, 200)).start()
    try:
        yield r
    finally:
        r.stop()


def _demo_with(receiver: Receiver) -> Any:
    async def work(session: Any) -> dict[str, str]:
        return await _demo(session, receiver)

    return work


async def _demo(session: Any, receiver: Receiver) -> dict[str, str]:
    """The demo realm, plus a run that failed and one that was cancelled: every state to look at;
    a webhook subscription that receives the realm's events, and a service principal."""
    demo = await seed_demo(session)
    admin = Actor(type="user", id=demo.admin.id, realm_id=demo.realm.id)
    operator_key = cockpit_env("", Path("."))["COCKPIT_SECRET_KEY"]
    subscription, secret = await webhooks.create_subscription(
        session, admin, operator_key, destination=receiver.url, allow_private_network=True
    )
    receiver.secrets.append(secret)
    robot = await principals.create_service_principal(
        session, admin, name="HR sync", description="Sends joiners and leavers from the HR system.", authority=None
    )
    workflow_id, run_ids = await seed_demo_workflow(session, demo)
    draft, _ = await create_workflow(
        session,
        admin,
        name="Contractor offboarding",
        description="Ends a contractor's access when their engagement ends. Not published yet.",
        definition={"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]},
        has_definition=True,
        requires_approval=False,
    )
    cancelled = await runs.start_manual_run(
        session, admin, workflow_id, subject_id=demo.users["grace@demo.example"].id, organization_id=None
    )
    await runs.cancel_run(session, admin, cancelled.id, reason="Started for the wrong person")
    organization = next(iter(demo.organizations.values()))
    group = next(iter(demo.groups.values()))
    return {
        "workflow": workflow_id,
        "draft": draft.id,
        "run": run_ids[0],
        "cancelled": cancelled.id,
        "user": demo.users["margaret@demo.example"].id,
        "webhook": subscription.id,
        "service_principal": robot.id,
        "organization": organization.id,
        "group": group.id,
        "group_organization": group.organization_id,
        "role": next(iter(demo.roles.values())).id,
    }


def _wait_finished(live_server: LiveServer, run_ids: list[str], timeout_s: float = 60) -> None:
    async def states(session: Any) -> list[str]:
        rows = await session.execute(text("SELECT state FROM workflow_runs WHERE id = ANY(:ids)"), {"ids": run_ids})
        return [r[0] for r in rows]

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = in_database(live_server, states)
        if found and all(
            s in {"succeeded", "cancelled", "compensated", "failed", "compensation_failed"} for s in found
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"runs not finished after {timeout_s} s: {found}")


def _approve_when_asked(live_server: LiveServer, run_id: str, timeout_s: float = 60) -> None:
    """The demo approver approves the run's request as soon as the live worker has made it."""

    async def approve(session: Any) -> bool:
        return await approve_demo_request(session, run_id)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if in_database(live_server, approve):
            return
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} asked for no approval within {timeout_s} s")


def _wait_delivered(live_server: LiveServer, receiver: Receiver, webhook_id: str, timeout_s: float = 90) -> None:
    """Until every delivery of the subscription is settled, one of them after a failed try."""

    async def counts(session: Any) -> tuple[int, int, int]:
        row = (
            await session.execute(
                text(
                    "SELECT count(*), count(*) FILTER (WHERE state = 'succeeded'),"
                    " count(*) FILTER (WHERE attempts > 1) FROM webhook_deliveries WHERE subscription_id = :s"
                ),
                {"s": webhook_id},
            )
        ).one()
        return int(row[0]), int(row[1]), int(row[2])

    deadline = time.monotonic() + timeout_s
    found = (0, 0, 0)
    while time.monotonic() < deadline:
        found = in_database(live_server, counts)
        total, succeeded, retried = found
        if total >= 3 and succeeded == total and retried >= 1:
            assert all(r.verified_by for r in receiver.requests()), "a delivery was not signed"
            return
        time.sleep(0.5)
    raise AssertionError(f"deliveries (total, succeeded, retried) after {timeout_s} s: {found}")


@pytest.fixture
def demo(live_server: LiveServer, receiver: Receiver) -> dict[str, str]:
    ids = in_database(live_server, _demo_with(receiver))
    _approve_when_asked(live_server, ids["run"])
    _wait_finished(live_server, [ids["run"], ids["cancelled"]])
    _wait_delivered(live_server, receiver, ids["webhook"])
    return ids


def demo_pages(ids: dict[str, str]) -> list[tuple[str, str]]:
    r = f"/realms/{DEMO_SLUG}"
    return [
        ("home", f"{r}/"),
        ("workflows", f"{r}/workflows"),
        ("workflow", f"{r}/workflows/{ids['workflow']}"),
        ("draft-workflow", f"{r}/workflows/{ids['draft']}"),
        ("revision", f"{r}/workflows/{ids['workflow']}/revisions/1"),
        ("editor", f"{r}/workflows/{ids['workflow']}/edit"),
        ("diagnostics", f"{r}/workflows/{ids['workflow']}/diagnostics"),
        ("revisions", f"{r}/workflows/{ids['workflow']}/revisions"),
        ("workflow-runs", f"{r}/workflows/{ids['workflow']}/runs"),
        ("start-run", f"{r}/workflows/{ids['workflow']}/runs/start"),
        ("new-workflow", f"{r}/workflows/new"),
        ("new-workflow-from-template", f"{r}/workflows/new?template=offboarding"),
        ("editor-from-template", f"{r}/workflows/{ids['draft']}/edit?template=approved-access"),
        ("start-many", f"{r}/workflows/{ids['workflow']}/runs/start-many"),
        ("runs", f"{r}/runs"),
        ("needs-attention", f"{r}/attention"),
        ("approvals", f"{r}/approvals"),
        ("approvals-decided", f"{r}/approvals/decided"),
        ("notices", f"{r}/notices"),
        ("timeline", f"{r}/runs/{ids['run']}"),
        ("timeline-cancelled", f"{r}/runs/{ids['cancelled']}"),
        ("users", f"{r}/users"),
        ("user", f"{r}/users/{ids['user']}"),
        ("service-principals", f"{r}/service-principals"),
        ("service-principal", f"{r}/service-principals/{ids['service_principal']}"),
        ("organizations", f"{r}/organizations"),
        ("organization", f"{r}/organizations/{ids['organization']}"),
        ("group", f"{r}/organizations/{ids['group_organization']}/groups/{ids['group']}"),
        ("roles", f"{r}/roles"),
        ("role", f"{r}/roles/{ids['role']}"),
        ("webhooks", f"{r}/webhooks"),
        ("webhook-deliveries", f"{r}/webhooks/{ids['webhook']}/deliveries"),
        ("templates", f"{r}/templates"),
        ("policy", f"{r}/policy"),
        ("tokens", f"{r}/tokens"),
        ("audit", f"{r}/audit"),
        ("api-reference", "/schema"),
    ]
