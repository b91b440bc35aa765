"""The run lifecycle as a state machine on a real database.

Hypothesis drives starts, worker passes, single transitions, failures of effects and of their
undo, cancellations, disabling and enabling, lease expiry and workers that crash holding leases,
in any order. After every step the invariants of seed 000's execution rules must hold:

- no effect is applied twice (one succeeded attempt per step, one assignment per step);
- a finished run is neither due nor leased;
- every unfinished run that is not paused is due (these workflows have no approvals);
- each run's audit trail follows the sequence seed 000 lists, and ends as the run ended.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.platform.clock import FixedClock
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.errors import Conflict
from engine.runs import controls as run_controls
from engine.runs import run_reads
from engine.runs import service as runs
from engine.runs.runner import Runner, RunnerSettings
from engine.runs.runstore import leases
from engine.runs.states import FINISHED
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.directory import refuse_role_changes
from testing.factories import RealmHandle, make_realm
from testing.runs import advance_once

T = TypeVar("T")
LEASE = timedelta(seconds=30)

# One token per audit event of a run, in the order seed 000 lists them.
TOKENS = {
    "workflow.run.started": "S",
    "workflow.step.succeeded": "s",
    "workflow.step.failed": "f",
    "workflow.run.cancel_requested": "X",
    "workflow.run.failed": "F",
    "workflow.step.compensated": "c",
    "workflow.step.compensation_failed": "k",
    "workflow.run.succeeded": "D",
    "workflow.run.compensated": "C",
    "workflow.run.compensation_failed": "K",
    "workflow.run.cancelled": "Z",
}
# started, steps, perhaps a cancellation request, then either success or the failure path:
# workflow.run.failed, compensations, and the end.
TRAIL = re.compile(r"S[sf]*X?(D|F[ck]*(C|F|K|Z)?)?")
ENDS = {"D": "succeeded", "C": "compensated", "F": "failed", "K": "compensation_failed", "Z": "cancelled"}


class Harness:
    """The loop, database and realm one test shares across the examples Hypothesis runs."""

    def __init__(self, database_url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.engine = make_engine(database_url, pool_size=3)
        self.sessions: async_sessionmaker[AsyncSession] = make_sessionmaker(self.engine)
        self.realm: RealmHandle = self.run(make_realm(self.sessions))
        self.roles = [
            self.run(self.realm.role("first", ["realm.workflows.read"])),
            self.run(self.realm.role("second", ["realm.audit.read"])),
        ]
        self.run(refuse_role_changes(self.realm))
        self.examples = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self.engine.dispose())
        self.loop.close()


HARNESS: Harness | None = None


class RunLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        assert HARNESS is not None
        self.h = HARNESS
        self.h.examples += 1
        self.realm = self.h.realm
        self.clock = FixedClock(datetime.now(UTC) + timedelta(hours=1), jitter=0.0)
        settings_ = RunnerSettings(lease=LEASE, batch_size=5, tenant_share=5)
        self.workers = [
            Runner(self.realm.sessions, f"worker-prop-{n}-{self.h.examples}", settings=settings_, clock=self.clock)
            for n in range(2)
        ]
        self.crashes = 0
        # Rules other than passes run a few times per example at most, so the passes get their turn.
        self.toggles = 0
        self.failures = 0
        self.cancels = 0
        self.enabled = True
        self.runs: list[str] = []
        first, second = self.h.roles
        self.workflow_id = self.h.run(self._publish(first.id, second.id))

    async def _publish(self, first: str, second: str) -> str:
        definition = {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "retry": {"max_attempts": 3, "backoff": "10s"},
            "steps": [
                {"id": "one", "type": "assign_role", "role_id": first, "scope": "realm"},
                {"id": "two", "type": "assign_role", "role_id": second, "scope": "realm"},
                {"id": "done", "type": "end"},
            ],
        }
        async with self.realm.sessions() as session, session.begin():
            await session.execute(text("DELETE FROM refused_roles"))
            workflow, _ = await create_workflow(
                session,
                self.realm.actor,
                name=f"Lifecycle {self.h.examples}",
                definition=definition,
                has_definition=True,
                requires_approval=False,
            )
        async with self.realm.sessions() as session, session.begin():
            await publish_revision(session, self.realm.actor, workflow.id, 1)
        return workflow.id

    # --- rules -----------------------------------------------------------------------------------

    @initialize(count=st.integers(2, 4))
    def first_runs(self, count: int) -> None:
        for _ in range(count):
            self.start()

    @precondition(lambda self: self.enabled and len(self.runs) < 6)
    @rule()
    def start(self) -> None:
        async def go() -> str:
            subject = await self.realm.user()
            async with self.realm.sessions() as session, session.begin():
                run = await runs.start_manual_run(
                    session, self.realm.actor, self.workflow_id, subject_id=subject.id, organization_id=None
                )
                return run.id

        self.runs.append(self.h.run(go()))

    @rule(worker=st.integers(0, 1))
    def worker_pass(self, worker: int) -> None:
        self.h.run(self.workers[worker].run_pass())

    @rule(worker=st.integers(0, 1), hand_back=st.booleans())
    def one_transition(self, worker: int, hand_back: bool) -> None:
        """Claim one run and make one transition; perhaps keep holding its lease."""
        runner = self.workers[worker]

        async def go() -> None:
            async with self.realm.sessions() as session, session.begin():
                taken = await leases.claim_due_runs(
                    session, runner.worker_id, now=self.clock.now(), lease=LEASE, batch_size=1, tenant_share=1
                )
            for item in taken:
                try:
                    await advance_once(runner, item.run_id)
                except leases.LeaseLost:
                    continue
                if hand_back:
                    async with self.realm.sessions() as session, session.begin():
                        await leases.release_lease(session, item.run_id, runner.worker_id)

        self.h.run(go())

    @precondition(lambda self: self.failures < 4)
    @rule(effect=st.sampled_from(["INSERT", "DELETE"]), refused=st.booleans())
    def effects_fail(self, effect: str, refused: bool) -> None:
        """INSERT: the second grant fails (transiently); DELETE: undoing the first grant fails."""
        self.failures += 1
        role = self.h.roles[1 if effect == "INSERT" else 0].id

        async def go() -> None:
            async with self.realm.sessions() as session, session.begin():
                await session.execute(text("DELETE FROM refused_roles WHERE op = :op"), {"op": effect})
                if refused:
                    await session.execute(text("INSERT INTO refused_roles VALUES (:r, :op)"), {"r": role, "op": effect})

        self.h.run(go())

    @precondition(lambda self: bool(self.runs) and self.cancels < 4)
    @rule(pick=st.integers(0, 5))
    def cancel(self, pick: int) -> None:
        self.cancels += 1
        run_id = self.runs[pick % len(self.runs)]

        async def go() -> None:
            async with self.realm.sessions() as session:
                before = await run_reads.get_run(session, self.realm.id, run_id)
                refusable = before.state in FINISHED or before.state == "compensating" or before.cancel_requested_at
            try:
                async with self.realm.sessions() as session, session.begin():
                    await runs.cancel_run(session, self.realm.actor, run_id, reason="property")
            except Conflict:
                assert refusable, "a cancellable run was refused"
            else:
                assert not refusable, "a run that cannot be cancelled accepted a cancellation"

        self.h.run(go())

    @precondition(lambda self: self.enabled and self.toggles < 4)
    @rule()
    def disable(self) -> None:
        async def go() -> None:
            async with self.realm.sessions() as session, session.begin():
                await run_controls.set_workflow_enabled(session, self.realm.actor, self.workflow_id, False)

        self.h.run(go())
        self.enabled = False
        self.toggles += 1

    @precondition(lambda self: not self.enabled)
    @rule()
    def enable(self) -> None:
        async def go() -> None:
            async with self.realm.sessions() as session, session.begin():
                await run_controls.set_workflow_enabled(session, self.realm.actor, self.workflow_id, True)

        self.h.run(go())
        self.enabled = True
        self.toggles += 1

    @rule()
    def leases_expire(self) -> None:
        self.clock.advance(seconds=LEASE.total_seconds() + 1)

    @rule(seconds=st.sampled_from([31, 11, 300]))
    def time_passes(self, seconds: int) -> None:
        self.clock.advance(seconds=seconds)

    @precondition(lambda self: self.crashes < 3)
    @rule()
    def worker_crashes(self) -> None:
        """A worker claims runs and dies without a word: its leases must simply expire."""
        self.crashes += 1
        ghost = f"worker-ghost-{self.crashes}-{self.h.examples}"

        async def go() -> None:
            async with self.realm.sessions() as session, session.begin():
                await leases.claim_due_runs(
                    session, ghost, now=self.clock.now(), lease=LEASE, batch_size=1, tenant_share=1
                )

        self.h.run(go())

    def teardown(self) -> None:
        """This example's runs leave the database, so the next example starts from a clean realm."""

        async def go() -> None:
            async with self.realm.sessions() as session, session.begin():
                await session.execute(
                    text(
                        "DELETE FROM step_attempts WHERE run_id IN (SELECT id FROM workflow_runs WHERE workflow_id = :w)"
                    ),
                    {"w": self.workflow_id},
                )
                await session.execute(text("DELETE FROM workflow_runs WHERE workflow_id = :w"), {"w": self.workflow_id})

        self.h.run(go())

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def rules_of_execution_hold(self) -> None:
        self.h.run(self._check())

    async def _check(self) -> None:
        async with self.realm.sessions() as session:
            rows = (
                await session.execute(
                    text(
                        "SELECT r.id, r.state, r.due_at, r.lease_owner, r.lease_expires_at, r.cancel_requested_at, "
                        "w.state AS workflow_state FROM workflow_runs r JOIN workflows w ON w.id = r.workflow_id "
                        "WHERE r.workflow_id = :w"
                    ),
                    {"w": self.workflow_id},
                )
            ).all()
            duplicates = await session.scalar(
                text(
                    "SELECT count(*) FROM (SELECT run_id, step_id FROM step_attempts a JOIN workflow_runs r "
                    "ON r.id = a.run_id WHERE r.workflow_id = :w AND a.state = 'succeeded' "
                    "GROUP BY run_id, step_id HAVING count(*) > 1) d"
                ),
                {"w": self.workflow_id},
            )
            grants = dict(
                (
                    await session.execute(
                        text(
                            "SELECT r.id, (SELECT count(*) FROM audit_events e WHERE e.correlation_id = r.id "
                            "AND e.type = 'role.assigned') - (SELECT count(*) FROM step_attempts a "
                            "WHERE a.run_id = r.id AND a.state = 'succeeded' AND a.step_type = 'assign_role') "
                            "FROM workflow_runs r WHERE r.workflow_id = :w"
                        ),
                        {"w": self.workflow_id},
                    )
                ).all()
            )
            held = dict(
                (
                    await session.execute(
                        text(
                            "SELECT r.id, count(ra.id) FROM workflow_runs r "
                            "LEFT JOIN role_assignments ra ON ra.source_run_id = r.id "
                            "WHERE r.workflow_id = :w GROUP BY r.id"
                        ),
                        {"w": self.workflow_id},
                    )
                ).all()
            )
            trails: dict[str, str] = {}
            for run_id, event in (
                await session.execute(
                    text(
                        "SELECT e.subject_id, e.type FROM audit_events e JOIN workflow_runs r ON r.id = e.subject_id "
                        "WHERE r.workflow_id = :w AND e.type LIKE 'workflow.%' ORDER BY e.id"
                    ),
                    {"w": self.workflow_id},
                )
            ).all():
                trails[run_id] = trails.get(run_id, "") + TOKENS[event]
        assert duplicates == 0, "a step succeeded twice"
        for run in rows:
            assert grants[run.id] == 0, f"{run.id}: an effect without its attempt, or twice"
            assert held[run.id] <= 2, f"{run.id}: more assignments than grant steps"
            if run.state in FINISHED:
                assert (run.due_at, run.lease_owner, run.lease_expires_at) == (None, None, None), (
                    f"finished run {run.id} ({run.state}) is due or leased"
                )
                if run.state == "succeeded":
                    assert held[run.id] == 2, f"{run.id} succeeded without both grants"
                if run.state in ("compensated", "cancelled", "failed"):
                    assert held[run.id] == 0, f"{run.id} ended {run.state} but still holds what it granted"
            else:
                paused = (
                    run.workflow_state == "disabled" and run.state != "compensating" and not run.cancel_requested_at
                )
                if not paused:
                    assert run.due_at is not None, f"unfinished run {run.id} ({run.state}) is not due"
            trail = trails.get(run.id, "")
            assert TRAIL.fullmatch(trail), f"{run.id}: audit trail {trail!r} out of order"
            if "X" in trail:
                assert "D" not in trail, f"{run.id}: succeeded after its cancellation was requested"
            end = trail[-1] if (trail and trail[-1] in "DCKZ") or (trail.count("F") == 2) else None
            if run.state in FINISHED:
                assert end is not None and ENDS[end] == run.state, f"{run.id}: ended {run.state}, trail {trail!r}"
                if run.state == "cancelled":
                    assert "X" in trail
            else:
                assert end is None, f"{run.id}: {run.state} but its trail {trail!r} says it ended"


def test_the_run_lifecycle_keeps_its_invariants(database_url: str) -> None:
    global HARNESS
    HARNESS = Harness(database_url)
    try:
        run_state_machine_as_test(
            RunLifecycle,
            settings=settings(
                max_examples=20,
                stateful_step_count=25,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        HARNESS.close()
        HARNESS = None
