"""Runs for tests: started through the engine's own services, driven by a real Runner on the test's
database, and read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from engine.endpoints.calls import PreparedCall
from engine.platform.clock import FixedClock
from engine.runs import run_reads
from engine.runs import service as runs
from engine.runs.endpoint_calls import complete_call
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.runner import MAX_TRANSITIONS, Runner, RunnerSettings
from engine.runs.runstore import leases
from engine.runs.runstore.leases import LeaseLost
from engine.runs.transition import transition
from testing.factories import RealmHandle
from testing.workflows import manual, publish

LEASE = timedelta(seconds=30)


async def start(realm: RealmHandle, workflow_id: str, subject_id: str, organization_id: str | None = None) -> str:
    """A run of the workflow for ``subject_id``, started by hand by the realm's administrator; its id."""
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, realm.actor, workflow_id, subject_id=subject_id, organization_id=organization_id
        )
        return run.id


async def load(realm: RealmHandle, run_id: str) -> tuple[WorkflowRun, list[StepAttempt]]:
    async with realm.sessions() as session:
        run = await run_reads.get_run(session, realm.id, run_id)
        return run, await run_reads.run_attempts(session, run_id)


def make_runner(
    realm: RealmHandle, clock: FixedClock | None = None, worker: str = "worker-test-1-aaaa", **settings: Any
) -> Runner:
    """A runner on the realm's database with a 30 s lease and any other ``RunnerSettings``."""
    return Runner(realm.sessions, worker, settings=RunnerSettings(lease=LEASE, **settings), clock=clock)


def clock_now() -> FixedClock:
    return FixedClock(datetime.now(UTC) + timedelta(seconds=5))  # runs started now are due


async def transition_once(r: Runner, run_id: str, calls: list[PreparedCall] | None = None) -> tuple[bool, bool]:
    """One transition of the run: (progress made, run finished). The endpoint call it starts is
    sent at once, or kept in ``calls`` (as a pass keeps a round's calls) and counted as progress."""
    progressed, finished, call = await transition(r, run_id)
    if call is None:
        return progressed, finished
    if calls is None:
        return True, await complete_call(r, call)
    calls.append(call)
    return True, False


async def advance_once(r: Runner, run_id: str) -> bool:
    """One transition of a run the runner holds, its endpoint call sent at once; False when the
    run has nothing to do now. A lost lease raises ``LeaseLost``."""
    progressed, _ = await transition_once(r, run_id)
    return progressed


async def advance(r: Runner, run_id: str) -> int:
    """What a pass does for one run it claimed, without the pass: at most ``MAX_TRANSITIONS``
    transitions, then the lease handed back (a finished run holds none). A lost lease ends it with
    the transitions made so far, and hands back nothing: the run is its new holder's."""
    done = 0
    try:
        while done < MAX_TRANSITIONS:
            progressed, finished = await transition_once(r, run_id)
            if not progressed:
                break
            done += 1
            if finished:
                return done
    except LeaseLost:
        return done
    async with r.sessions() as session, session.begin():
        await leases.release_lease(session, run_id, r.worker_id)
    return done


async def drain(r: Runner, rounds: int = 20) -> None:
    """Passes of the runner until one finds nothing due (at most ``rounds``)."""
    for _ in range(rounds):
        if not await r.run_pass():
            return


async def drain_realm(realm: RealmHandle, rounds: int = 10) -> None:
    """:func:`drain` with a runner of the default settings on the system clock."""
    await drain(Runner(realm.sessions, "worker-test-pages-aaaa"), rounds)


async def rows(realm: RealmHandle, sql: str, **params: Any) -> list[Any]:
    async with realm.sessions() as session:
        return list((await session.execute(text(sql), params)).all())


async def events(realm: RealmHandle, run_id: str, prefix: str = "workflow.") -> list[tuple[str, str | None, Any]]:
    """(type, actor, details) of the run's audit events, oldest first."""
    return [
        (t, a, d)
        for t, a, d in await rows(
            realm,
            "SELECT type, actor_id, details FROM audit_events WHERE correlation_id = :r AND type LIKE :p ORDER BY id",
            r=run_id,
            p=prefix + "%",
        )
    ]


async def run_state(realm: RealmHandle, run_id: str) -> str:
    async with realm.sessions() as session:
        return str(await session.scalar(text("SELECT state FROM workflow_runs WHERE id = :r"), {"r": run_id}))


async def finish_runs(realm: RealmHandle, count: int, *, days_ago: int) -> list[str]:
    """``count`` runs that really ran to their end, then dated as if they had ended ``days_ago`` days ago."""
    wid = await publish(realm, manual({"id": "done", "type": "end"}), name=f"W{days_ago}-{count}")
    subject = await realm.user()
    ids = [await start(realm, wid, subject.id) for _ in range(count)]
    await drain(make_runner(realm))
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE workflow_runs SET finished_at = now() - make_interval(days => :d) WHERE id = ANY(:ids)"),
            {"d": days_ago, "ids": ids},
        )
    return ids


async def existing(realm: RealmHandle, ids: list[str]) -> set[str]:
    """Those of the runs ``ids`` still in the database."""
    async with realm.sessions() as session:
        result = await session.execute(text("SELECT id FROM workflow_runs WHERE id = ANY(:ids)"), {"ids": ids})
        return set(result.scalars())
