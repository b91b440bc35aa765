"""TestWorkflowIdempotency: a worker killed between an endpoint call and its record.

A real ``cockpit worker`` process makes the call; the receiver SIGKILLs it the moment the first
request arrives, so the outcome is never recorded. A second worker finds the started attempt,
records it ``interrupted`` (transient, counted) and calls again after the backoff with the same
Idempotency-Key and a new Webhook-Id. The receiver verifies every signature; the run succeeds once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from sqlalchemy import text

from engine.directory import webhooks
from engine.runs import service as runs
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.processes import cockpit_env, start, wait_for
from testing.receiver import Received, Receiver


async def test_a_worker_killed_between_the_call_and_the_record(
    realm: RealmHandle, database_url: str, tmp_path: Path
) -> None:
    receiver = Receiver().start()
    worker_pids: list[int] = []

    def kill_the_caller(r: Received) -> None:
        if r.header("Idempotency-Key") and len(step_calls()) == 1:
            os.killpg(worker_pids[0], signal.SIGKILL)  # before any answer: the outcome is never recorded

    def step_calls() -> list[Received]:
        return [r for r in receiver.requests() if r.header("Idempotency-Key")]

    receiver.on_request = kill_the_caller
    async with realm.sessions() as session, session.begin():
        subscription, secret = await webhooks.create_subscription(
            session,
            realm.actor,
            TEST_SECRET_KEY,
            destination=receiver.url,
            allow_private_network=True,
            event_types=["role.assignment.expired"],  # step calls only: no event of this test goes there
        )
    receiver.secrets.append(secret)
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "sync", "type": "call_webhook", "subscription_id": subscription.id},
            {"id": "done", "type": "end"},
        ],
        "retry": {"max_attempts": 3, "backoff": "1s"},
    }
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, realm.actor, name="Sync", definition=definition, has_definition=True, requires_approval=False
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)
    subject = await realm.user("subject@example.com")
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, realm.actor, workflow.id, subject_id=subject.id, organization_id=None
        )
    env = cockpit_env(
        database_url,
        tmp_path / "home",
        COCKPIT_ALLOW_PRIVATE_EGRESS="true",
        COCKPIT_WORKER_LEASE_SECONDS="3",
    )
    first = start(["worker", "--no-migrate"], env, tmp_path / "worker-1.log")
    worker_pids.append(first.pid)
    second = None
    try:
        receiver.wait_for(1, timeout=120)  # the only requests are step calls (see event_types)
        assert first.wait(timeout=60) == -signal.SIGKILL

        async def attempts() -> list[tuple[str, str | None]]:
            async with realm.sessions() as session:
                rows = await session.execute(
                    text(
                        "SELECT state, error_category FROM step_attempts WHERE run_id = :r ORDER BY number, step_index"
                    ),
                    {"r": run.id},
                )
                return [(state, category) for state, category in rows]

        assert await attempts() == [("started", None)]  # the call went out; its outcome did not come back
        second = start(["worker", "--no-migrate"], env, tmp_path / "worker-2.log")

        async def finished() -> str | None:
            async with realm.sessions() as session:
                state: str | None = await session.scalar(
                    text("SELECT state FROM workflow_runs WHERE id = :r AND finished_at IS NOT NULL"), {"r": run.id}
                )
                return state

        assert await wait_for(finished, "the run finishes") == "succeeded"
        async with realm.sessions() as session:
            sync = (
                await session.execute(
                    text(
                        "SELECT id, number, state, error_category, idempotency_key FROM step_attempts "
                        "WHERE run_id = :r AND step_id = 'sync' ORDER BY number"
                    ),
                    {"r": run.id},
                )
            ).all()
            succeeded_events = await session.scalar(
                text("SELECT count(*) FROM audit_events WHERE correlation_id = :r AND type = 'workflow.run.succeeded'"),
                {"r": run.id},
            )
        assert [(a.number, a.state, a.error_category) for a in sync] == [
            (1, "failed", "interrupted"),
            (2, "succeeded", None),
        ]
        assert succeeded_events == 1
        got = step_calls()
        assert len(got) == 2 and len(receiver.requests()) == 2
        assert all(r.verified_by == [0] for r in got), "a call failed signature verification"
        assert {r.header("Idempotency-Key") for r in got} == {f"{run.id}.sync"}
        assert [r.header("Webhook-Id") for r in got] == [sync[0].id, sync[1].id]
        assert [r.json["attempt"] for r in got] == [1, 2]
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
        receiver.stop()
