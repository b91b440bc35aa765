"""A worker drains due work pass after pass, fairly across realms, and stops when nothing is due.

Everything here runs in-process against the test's own PostgreSQL database, with a fixed clock
a little in the future so that the runs just started are due.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from sqlalchemy import text

from engine.platform.clock import FixedClock
from engine.runs.runner import Runner, RunnerSettings
from engine.worker import queue
from engine.worker.drain import drain
from engine.worker.runtime import wake_pass
from testing.chaos import start_manual_runs
from testing.factories import RealmHandle, make_realm
from testing.workflows import manual, publish

END = manual({"id": "done", "type": "end"})  # one transition per run: start, end and succeed


class CountingRunner(Runner):
    """A runner that counts its passes."""

    passes = 0

    async def run_pass(self) -> int:
        self.passes += 1
        return await super().run_pass()


def runner(realm: RealmHandle, **settings: Any) -> CountingRunner:
    return CountingRunner(
        realm.sessions,
        "worker-drain-1-aaaa",
        settings=RunnerSettings(lease=timedelta(seconds=30), **settings),
        clock=FixedClock(datetime.now(UTC) + timedelta(seconds=1)),
    )


async def due_runs(realm: RealmHandle, count: int) -> list[str]:
    """``count`` manual runs of a one-step workflow in ``realm``, started in one transaction."""
    workflow_id = await publish(realm, END)
    subjects = [(await realm.user(f"u{n:03d}@example.com")).id for n in range(count)]
    return await start_manual_runs(realm.sessions, realm.actor, workflow_id, subjects)


async def succeeded(realm: RealmHandle, run_ids: list[str]) -> int:
    async with realm.sessions() as session:
        found = await session.scalar(
            text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND state = 'succeeded'"), {"ids": run_ids}
        )
    return int(found or 0)


async def test_a_wake_up_drains_the_due_runs_of_several_realms_in_one_go(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    third = await make_realm(realm.sessions)
    backlog = {handle.id: await due_runs(handle, 25) for handle in (realm, other_realm, third)}
    worker = runner(realm, batch_size=10, tenant_share=3)

    assert await wake_pass(worker, realm.sessions) == (75, False)
    for handle in (realm, other_realm, third):
        assert await succeeded(handle, backlog[handle.id]) == 25
    assert 8 <= worker.passes <= 9  # eight full claims of 10 (the last one 5), then one that finds nothing


async def test_the_periodic_pass_drains_a_backlog_by_itself(realm: RealmHandle, other_realm: RealmHandle) -> None:
    """Without any notification (a lost NOTIFY, a listening connection down), one periodic job does it all."""
    backlog = await due_runs(realm, 30) + await due_runs(other_realm, 12)
    worker = runner(realm, batch_size=10, tenant_share=2)
    runtime = queue.WorkerRuntime(worker_id=worker.worker_id, sessions=realm.sessions, settings=None, runner=worker)
    await queue.workflows_run(SimpleNamespace(additional_context={"runtime": runtime}), 0)  # type: ignore[arg-type]
    assert await succeeded(realm, backlog) == 42
    assert worker.passes > 1


async def test_a_realm_alone_fills_the_batch_beyond_its_share(realm: RealmHandle) -> None:
    run_ids = await due_runs(realm, 12)
    worker = runner(realm, batch_size=10, tenant_share=2)
    assert await worker.run_pass() == 10  # five rounds of the claim, two runs each
    assert worker.last_claim_full
    assert await succeeded(realm, run_ids) == 10
    assert await worker.run_pass() == 2
    assert not worker.last_claim_full


async def test_a_busy_realm_never_crowds_out_another(realm: RealmHandle, other_realm: RealmHandle) -> None:
    busy = await due_runs(realm, 30)
    quiet = await due_runs(other_realm, 3)
    worker = runner(realm, batch_size=10, tenant_share=2)
    assert await worker.run_pass() == 10
    # Every run of the quiet realm in the first pass; the busy realm takes only the room left.
    assert (await succeeded(other_realm, quiet), await succeeded(realm, busy)) == (3, 7)


async def test_realms_that_compete_share_the_batch_by_turns(realm: RealmHandle, other_realm: RealmHandle) -> None:
    first = await due_runs(realm, 20)
    second = await due_runs(other_realm, 20)
    worker = runner(realm, batch_size=10, tenant_share=2)
    assert await worker.run_pass() == 10
    assert (await succeeded(realm, first), await succeeded(other_realm, second)) == (5, 5)
    assert await worker.run_pass() == 10
    assert (await succeeded(realm, first), await succeeded(other_realm, second)) == (10, 10)


async def test_an_idle_worker_stops_after_one_pass(realm: RealmHandle) -> None:
    worker = runner(realm)
    assert await drain(worker) == (0, False)
    assert worker.passes == 1


async def test_a_drain_stops_at_its_pass_limit_and_says_work_is_left(realm: RealmHandle) -> None:
    run_ids = await due_runs(realm, 25)
    worker = runner(realm, batch_size=10, tenant_share=10)
    assert await drain(worker, max_passes=2) == (20, True)
    assert await succeeded(realm, run_ids) == 20
    assert await drain(worker) == (5, False)
    assert await succeeded(realm, run_ids) == 25
