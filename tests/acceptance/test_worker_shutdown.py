"""A worker stopped gracefully (SIGTERM) hands back every lease it holds, and only its own."""

from __future__ import annotations

import signal
from pathlib import Path

from sqlalchemy import text

from engine.runs import service as runs
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.factories import RealmHandle
from testing.processes import cockpit_env, start, wait_for

DEADLINE_S = 120  # generous: a loaded machine starts Python and PostgreSQL connections slowly


async def leases(realm: RealmHandle) -> dict[str, tuple[str | None, object]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT id, lease_owner, lease_expires_at FROM workflow_runs WHERE realm_id = :r"), {"r": realm.id}
        )
        return {run_id: (owner, expires) for run_id, owner, expires in rows}


async def test_sigterm_hands_back_the_leases_the_worker_holds(
    realm: RealmHandle, database_url: str, tmp_path: Path
) -> None:
    end = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, realm.actor, name="W", definition=end, has_definition=True, requires_approval=False
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)
    run_ids = []
    for name in ("ours", "theirs"):
        subject = await realm.user(f"{name}@example.com")
        async with realm.sessions() as session, session.begin():
            run = await runs.start_manual_run(
                session, realm.actor, workflow.id, subject_id=subject.id, organization_id=None
            )
            run_ids.append(run.id)
    ours, theirs = run_ids
    # Nothing is due: the worker must not finish the runs before it is stopped.
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE workflow_runs SET due_at = now() + interval '1 day' WHERE realm_id = :r"), {"r": realm.id}
        )

    log = tmp_path / "worker.log"
    # The worker's own heartbeat loop is slowed right down, so a later heartbeat can only come from
    # the periodic task: proof that the worker is in its job loop (its signal handlers installed).
    env = cockpit_env(database_url, tmp_path / "home", COCKPIT_WORKER_HEARTBEAT_SECONDS="3600")
    worker = start(["worker", "--no-migrate"], env, log)
    try:

        async def heartbeat() -> str | None:
            async with realm.sessions() as session:
                found: str | None = await session.scalar(
                    text(
                        "SELECT worker_id FROM worker_heartbeats "
                        "WHERE pid = :p AND stopped_at IS NULL AND last_seen_at > started_at"
                    ),
                    {"p": worker.pid},
                )
                return found

        worker_id = str(await wait_for(heartbeat, "a heartbeat from the worker's job loop"))
        # The worker holds one run (as it would in the middle of a pass); another worker holds the other.
        async with realm.sessions() as session, session.begin():
            for run_id, owner in ((ours, worker_id), (theirs, "worker-elsewhere-1-bbbb")):
                await session.execute(
                    text(
                        "UPDATE workflow_runs SET lease_owner = :o, lease_expires_at = now() + interval '1 hour' "
                        "WHERE id = :r"
                    ),
                    {"o": owner, "r": run_id},
                )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_S) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    held = await leases(realm)
    assert held[ours] == (None, None), log.read_text()  # handed back: another worker continues at once
    assert held[theirs][0] == "worker-elsewhere-1-bbbb"  # not ours to hand back
    async with realm.sessions() as session:
        stopped = await session.scalar(
            text("SELECT stopped_at FROM worker_heartbeats WHERE worker_id = :w"), {"w": worker_id}
        )
    assert stopped is not None
    output = log.read_text()
    assert "leases handed back" in output and "Traceback" not in output
