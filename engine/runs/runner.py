"""The durable runner's pass loop: claims due runs and advances each by at most 25 transitions.

A pass claims due runs (fairly across realms) and advances them in rounds, one transition of every
run still going per round: first together on the fast path, in group commits; the runs it cannot
take alone, the ordinary way (engine/runs/transition.py); then the round's endpoint calls, at once
and outside any transaction (engine/runs/endpoint_calls.py). A run with nothing to do now, or that
made its 25 transitions, hands its lease back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from engine.endpoints.calls import PreparedCall
from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.platform.db import Driver, driver_of
from engine.runs.endpoint_calls import complete_call
from engine.runs.fastpath import FastPath
from engine.runs.fastpath_caches import Staged
from engine.runs.fastpath_forms import Move
from engine.runs.holder import RunnerSettings, run_actor
from engine.runs.runstore import leases
from engine.runs.runstore.leases import LeaseLost
from engine.runs.states import COMP_PENDING
from engine.runs.transition import transition

log = logging.getLogger("cockpit.engine")
# What a runner does and when, at DEBUG (COCKPIT_LOG_LEVEL=DEBUG): one line per claim and per commit,
# with the wall-clock start and the duration, so idle time between them can be counted
# (bench/engine.py --trace reads these lines).
trace = logging.getLogger("cockpit.engine.trace")


# Diagnostics for people (the trace and the log lines) are left out of mutation testing: no rule
# depends on their words (docs/testing.md, "Mutation testing").
def _traced(event: str, started: float, owner: str, **fields: Any) -> None:  # pragma: no mutate block
    trace.debug(
        event,
        extra={"owner": owner, "start": round(started, 6), "ms": round((time.time() - started) * 1000, 3)} | fields,
    )


MAX_TRANSITIONS = 25

# What one round did to a run (Runner._advance_together).
_MOVED, _FINISHED, _IDLE, _LOST, _ALONE = "moved", "finished", "idle", "lost", "alone"


class PassConnection:
    """The connection a pass's fast transactions share: opened on first use, dropped after a failure.

    It plans generically and never scans while the pass holds it, and goes back to the pool with the
    server's settings (or is thrown away when they are unknown).
    """

    def __init__(self, bind: AsyncEngine | None) -> None:
        self.bind = bind
        self.connection: AsyncConnection | None = None
        self.driver: Driver | None = None

    async def raw(self) -> Driver | None:
        """The asyncpg connection (None when the fast path is off)."""
        if self.bind is None:
            return None
        if self.connection is None:
            self.connection = await self.bind.connect()
            self.driver = driver_of(await self.connection.get_raw_connection())
            # The fast path's statements are fixed and read by key only, and they are prepared once:
            # - a generic plan serves every group size (left to choose, the server plans a lone run's
            #   transition anew at every execution, its custom plans looking cheaper);
            # - no sequential scans: a plan made while a table was nearly empty (a new database, the
            #   first burst of runs) would otherwise scan it until the statistics catch up;
            # - no JIT: before PostgreSQL 18 a disabled scan adds a huge cost, which would cross
            #   jit_above_cost, and key probes gain nothing from compiling.
            await self.driver.execute(
                "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; SET jit = off"
            )
        return self.driver

    async def drop(self) -> None:
        connection, self.connection = self.connection, None
        if connection is None:
            return
        clean = False
        try:
            # Back to the pool as it came, or not at all: a connection still inside a transaction
            # (its rollback failed or was interrupted) would undo the RESET when it rolls back.
            driver = self.driver
            if driver is not None and not driver.is_closed() and not driver.is_in_transaction():
                with contextlib.suppress(Exception):
                    await driver.execute("RESET plan_cache_mode; RESET enable_seqscan; RESET jit")
                    clean = True
        finally:
            with contextlib.suppress(Exception):
                if not clean:
                    await connection.invalidate()  # its settings are unknown, or the server went away
                await connection.close()

    async def __aenter__(self) -> PassConnection:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.drop()


class Runner:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        worker_id: str,
        *,
        settings: RunnerSettings | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.sessions = sessions
        self.worker_id = worker_id
        self.settings = settings or RunnerSettings()
        self.clock: Clock = clock or SYSTEM_CLOCK
        self._last_realm: str | None = None
        self.last_claim_full = False  # the last pass's claim filled the batch
        self.fast = FastPath(worker_id, self.clock, self.settings.lease, mail_configured=self.settings.mail_configured)

    # --- passes ----------------------------------------------------------------------------------

    async def run_pass(self) -> int:
        """Claim due runs and advance each; returns the transitions made.

        ``last_claim_full`` then says whether the claim filled the batch (more runs may be due: a
        worker draining its backlog claims again at once).
        """
        started = time.time()
        limit = max(1, min(self.settings.batch_size, leases.MAX_BATCH))
        claimed: list[leases.Claimed] = []
        async with self.sessions() as session, session.begin():
            # Round after round of the fair claim (round-robin over realms, at most ``tenant_share``
            # runs of one realm per round) while the batch has room and some realm filled its share
            # (it may have more due runs): a realm alone fills the batch; realms that compete for
            # it share it by turns, and every realm with due runs is in the first round.
            while len(claimed) < limit:
                found = await leases.claim_due_runs(
                    session,
                    self.worker_id,
                    now=self.clock.now(),
                    lease=self.settings.lease,
                    batch_size=limit - len(claimed),
                    tenant_share=self.settings.tenant_share,
                    after_realm=self._last_realm,
                )
                claimed += found
                if found:
                    self._last_realm = found[-1].realm_id  # the next round starts with the realm after it
                if not leases.share_filled(found, self.settings.tenant_share):
                    break
        self.last_claim_full = len(claimed) >= limit
        if trace.isEnabledFor(logging.DEBUG):  # pragma: no mutate block
            _traced("claim", started, self.worker_id, runs=len(claimed))
        return await self._advance_together([item.run_id for item in claimed])

    async def _advance_together(self, run_ids: list[str]) -> int:
        """Advance the claimed runs in rounds: one transition of every run still going per round.

        The runs of a round commit together in groups of ``group_commit`` (engine/runs/fastpath.py), each
        internal step in one statement. A run the fast path cannot take, and every run of a group whose
        transaction failed, makes its transition alone, the ordinary way: a failure in one run never
        loses or repeats another's work. Each run still makes at most 25 transitions and then hands
        its lease back; one that has nothing to do now hands it back at once.
        """
        done = dict.fromkeys(run_ids, 0)
        going = list(run_ids)
        group = max(1, min(self.settings.group_commit, leases.MAX_BATCH))
        async with PassConnection(self.sessions.kw.get("bind") if self.settings.fast_path else None) as conn:
            while going:
                going = await self._round(conn, going, group, done)
        return sum(done.values())

    async def _round(self, conn: PassConnection, going: list[str], group: int, done: dict[str, int]) -> list[str]:
        """One transition of every run still going; the runs that go on."""
        outcomes: dict[str, str] = {}
        for start in range(0, len(going), group):
            outcomes |= await self._fast_round(conn, going[start : start + group])
        calls: list[PreparedCall] = []
        for run_id in going:
            if outcomes[run_id] == _ALONE:
                outcomes[run_id] = await self._transition_alone(run_id, calls)
        if calls:
            # The round's endpoint calls go out together, after every transaction of the round has
            # committed: a slow endpoint delays only its own run's next transition.
            limit = asyncio.Semaphore(max(1, self.settings.call_concurrency))

            async def bounded(call: PreparedCall) -> str:
                async with limit:
                    return await self.complete_call_alone(call)

            for call, outcome in zip(calls, await asyncio.gather(*(bounded(c) for c in calls)), strict=True):
                outcomes[call.run_id] = outcome
        for run_id in going:
            if outcomes[run_id] in (_MOVED, _FINISHED):
                done[run_id] += 1
        # Nothing to do now, or its 25 transitions made: the lease goes back to the pool.
        # A run that made its 25 and is still due goes behind the runs that became due meanwhile.
        spent = {r for r in going if done[r] >= MAX_TRANSITIONS}
        idle = [r for r in going if outcomes[r] == _IDLE]
        requeued = [r for r in going if outcomes[r] == _MOVED and r in spent]
        going = [r for r in going if outcomes[r] == _MOVED and r not in spent]
        if idle or requeued:
            try:
                async with self.sessions() as session, session.begin():
                    await leases.release_leases(session, idle, self.worker_id)
                    await leases.release_leases(session, requeued, self.worker_id, due_again_at=self.clock.now())
            except Exception:
                # The leases expire by themselves; the other runs of the pass go on.
                log.warning("could not hand back leases", exc_info=True, extra={"runs": len(idle) + len(requeued)})
        return going

    async def _fast_round(self, conn: PassConnection, run_ids: list[str]) -> dict[str, str]:
        """One transaction for a group of runs: each run's outcome (``_ALONE``: not made here)."""
        outcomes = dict.fromkeys(run_ids, _ALONE)
        started = time.time()
        now = self.clock.now()
        staged = Staged()
        try:
            raw = await conn.raw()
            if raw is None:
                return outcomes
            async with raw.transaction():
                locked = await self.fast.lock(raw, run_ids, now=now)
                marks = [time.time()]  # locked, then each transition made, then committed (the trace)
                # Runs whose subject's authority another run of this transaction reads or changes
                # (a publisher, or a subject of two runs) go the ordinary way.
                subjects = Counter(row["subject_id"] for row in locked.values())
                publishers = {row["publisher_id"] for row in locked.values()}
                publishers |= {subject for subject, count in subjects.items() if count > 1}
                for run_id in run_ids:
                    if run_id not in locked:
                        log.warning("lease lost; the run is left to its new holder", extra={"run_id": run_id})
                        outcomes[run_id] = _LOST
                rows = [locked[run_id] for run_id in run_ids if run_id in locked]
                moves: list[Move] = await self.fast.transitions(raw, staged, rows, now, publishers)
                # One statement for the group; a run it could not move wrote nothing and goes alone.
                moved = await self.fast.apply(raw, moves)
                for move in moves:
                    if move.run_id in moved:
                        outcomes[move.run_id] = _FINISHED if move.finished else _MOVED
                marks.append(time.time())
        except Exception:
            # Nothing of the group committed: each of its runs makes its transition alone.
            log.warning("a group commit failed; its runs go one per transaction", exc_info=True)
            await conn.drop()
            return dict.fromkeys(run_ids, _ALONE)
        staged.committed()
        made = sum(1 for o in outcomes.values() if o in (_MOVED, _FINISHED))
        self.fast.moved += made
        if trace.isEnabledFor(logging.DEBUG):  # pragma: no mutate block
            lock_ms, steps_ms, commit_ms = (
                round((b - a) * 1000, 3) for a, b in zip([started, *marks], [*marks, time.time()], strict=True)
            )
            _traced(
                "group commit",
                started,
                self.worker_id,
                runs=len(run_ids),
                moved=made,
                lock_ms=lock_ms,
                steps_ms=steps_ms,
                commit_ms=commit_ms,
            )
        return outcomes

    async def _transition_alone(self, run_id: str, calls: list[PreparedCall]) -> str:
        """The ordinary transition in its own transaction; one run's trouble never strands the rest.

        An endpoint call it starts is added to ``calls``, sent with the round's other calls."""
        started = time.time()
        try:
            progressed, finished, call = await transition(self, run_id)
        except LeaseLost:
            log.warning("lease lost; the run is left to its new holder", extra={"run_id": run_id})
            return _LOST
        except Exception:
            log.exception("advancing a run failed; its lease is handed back", extra={"run_id": run_id})
            try:
                async with self.sessions() as session, session.begin():
                    await leases.release_lease(session, run_id, self.worker_id)
            except Exception:
                log.warning("could not hand back a lease", exc_info=True, extra={"run_id": run_id})
            return _LOST
        if trace.isEnabledFor(logging.DEBUG):  # pragma: no mutate block
            _traced("commit alone", started, self.worker_id, runs=1, moved=int(progressed))
        if call is not None:
            calls.append(call)
            return _MOVED
        if not progressed:
            return _IDLE
        return _FINISHED if finished else _MOVED

    async def release_all(self) -> int:
        async with self.sessions() as session, session.begin():
            return await leases.release_all_leases(session, self.worker_id)

    # --- one endpoint call -----------------------------------------------------------------------

    async def complete_call_alone(self, call: PreparedCall) -> str:
        """Record the outcome of one endpoint call the round started, in a transaction of its own.

        What a pass does with each call of its round, once every transaction of the round has
        committed: ``"finished"`` (the call ended the run), ``"moved"``, or ``"lost"`` (the lease
        was lost, or recording failed and the lease was handed back when it could be).
        """
        try:
            finished = await complete_call(self, call)
        except LeaseLost:
            log.warning("lease lost during an endpoint call; the next claim records it", extra={"run_id": call.run_id})
            return _LOST
        except Exception:
            log.exception("recording an endpoint call failed; its lease is handed back", extra={"run_id": call.run_id})
            try:
                async with self.sessions() as session, session.begin():
                    await leases.release_lease(session, call.run_id, self.worker_id)
            except Exception:
                log.warning("could not hand back a lease", exc_info=True, extra={"run_id": call.run_id})
            return _LOST
        return _FINISHED if finished else _MOVED


__all__ = ["COMP_PENDING", "MAX_TRANSITIONS", "Runner", "RunnerSettings", "run_actor"]
