"""The durable runner: claims due runs and advances each by at most 25 transitions.

One transition is one database transaction. For an internal step that transaction holds the
lease check, the accountable publisher's authority re-check, the effect, the succeeded attempt,
the run's advance and the audit events — so a crash rolls all of it back, a step that runs again
after a crash never repeats an effect, and a worker that lost its lease cannot commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import load_authority
from engine.endpoints import transport
from engine.endpoints.calls import EndpointSettings, PreparedCall
from engine.endpoints.transport import CallOutcome
from engine.platform.errors import error_summary
from engine.platform.ids import new_id
from engine.runs import approvals, metrics, runstore
from engine.runs.decisions import Effect, Refusal, decide, publisher_refusal
from engine.runs.fastpath import FastPath, Move, Staged
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.outcome_events import emit_run_outcome
from engine.runs.retry import (
    COMPENSATION_BACKOFF_MS,
    COMPENSATION_MAX_ATTEMPTS,
    Clock,
    delay_ms,
    policy_for,
)
from engine.runs.runstore import LeaseLost
from engine.runs.snapshots import RunFacts, load_snapshot
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_STARTED,
    ATTEMPT_SUCCEEDED,
    AWAITING_APPROVAL,
    CANCELLED,
    COMP_DONE,
    COMP_FAILED,
    COMP_PENDING,
    COMPENSATED,
    COMPENSATING,
    COMPENSATION_FAILED,
    FAILED,
    FINISHED,
    FORWARD,
    PENDING,
    RUNNING,
    STRATEGY_NOTIFY_ENDPOINT,
    SUCCEEDED,
    WAITING,
    TransitionRefused,
)
from engine.runs.steps import APPROVAL, EXTERNAL, STEP_TYPES, WAIT, Outcome, StepContext, StepFailure, StepType
from engine.runs.steps.call_webhook import CallWebhook
from engine.workflows.definitions.canonical import input_version
from engine.workflows.models import Workflow, WorkflowRevision

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
CATEGORY = "workflow"

# What one round did to a run (Runner._advance_together).
_MOVED, _FINISHED, _IDLE, _LOST, _ALONE = "moved", "finished", "idle", "lost", "alone"


@dataclass
class RunnerSettings:
    lease: timedelta = timedelta(seconds=60)
    batch_size: int = 50
    tenant_share: int = 10
    # Runs whose transitions commit together (group commit; 1: each run commits alone).
    group_commit: int = 50
    # Internal steps that can only succeed in one statement each (engine/runs/fastpath.py); off, every
    # transition takes the ordinary path.
    fast_path: bool = True
    # Endpoint calls (call_webhook): the operator key, private egress, the timeout ceiling.
    endpoints: EndpointSettings = field(default_factory=EndpointSettings)
    # Endpoint calls of one round made at once (each outside any transaction).
    call_concurrency: int = 16
    # Notices are mailed after commit (engine/notices.py); without mail they are recorded not_configured.
    mail_configured: bool = False


def run_actor(run: WorkflowRun) -> Actor:
    """The accountable publisher, with the run id as request and correlation id."""
    return Actor(type="user", id=run.publisher_id, realm_id=run.realm_id, request_id=run.id, correlation_id=run.id)


class _PassConnection:
    """The connection a pass's fast transactions share: opened on first use, dropped after a failure."""

    def __init__(self, bind: AsyncEngine | None) -> None:
        self.bind = bind
        self.connection: AsyncConnection | None = None
        self.driver: Any = None

    async def raw(self) -> Any:
        """The asyncpg connection (None when the fast path is off)."""
        if self.bind is None:
            return None
        if self.connection is None:
            self.connection = await self.bind.connect()
            self.driver = (await self.connection.get_raw_connection()).driver_connection
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
            if not self.driver.is_closed() and not self.driver.is_in_transaction():
                with contextlib.suppress(Exception):
                    await self.driver.execute("RESET plan_cache_mode; RESET enable_seqscan; RESET jit")
                    clean = True
        finally:
            with contextlib.suppress(Exception):
                if not clean:
                    await connection.invalidate()  # its settings are unknown, or the server went away
                await connection.close()

    async def __aenter__(self) -> _PassConnection:
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
        self.clock = clock or Clock()
        self._last_realm: str | None = None
        self.last_claim_full = False  # the last pass's claim filled the batch
        self.fast = FastPath(worker_id, self.clock, self.settings.lease)
        # Calls prepared by a transaction, sent once it has committed (keyed by run).
        self._calls: dict[str, PreparedCall] = {}

    # --- passes ----------------------------------------------------------------------------------

    async def run_pass(self) -> int:
        """Claim due runs and advance each; returns the transitions made.

        ``last_claim_full`` then says whether the claim filled the batch (more runs may be due: a
        worker draining its backlog claims again at once).
        """
        started = time.time()
        limit = max(1, min(self.settings.batch_size, runstore.MAX_BATCH))
        claimed: list[runstore.Claimed] = []
        async with self.sessions() as session, session.begin():
            # Round after round of the fair claim (round-robin over realms, at most ``tenant_share``
            # runs of one realm per round) while the batch has room and some realm filled its share
            # (it may have more due runs): a realm alone fills the batch; realms that compete for
            # it share it by turns, and every realm with due runs is in the first round.
            while len(claimed) < limit:
                found = await runstore.claim_due_runs(
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
                if not runstore.share_filled(found, self.settings.tenant_share):
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
        group = max(1, min(self.settings.group_commit, runstore.MAX_BATCH))
        async with _PassConnection(self.sessions.kw.get("bind") if self.settings.fast_path else None) as conn:
            while going:
                going = await self._round(conn, going, group, done)
        return sum(done.values())

    async def _round(self, conn: _PassConnection, going: list[str], group: int, done: dict[str, int]) -> list[str]:
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
                    return await self._complete_call_alone(call)

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
                    await runstore.release_leases(session, idle, self.worker_id)
                    await runstore.release_leases(session, requeued, self.worker_id, due_again_at=self.clock.now())
            except Exception:
                # The leases expire by themselves; the other runs of the pass go on.
                log.warning("could not hand back leases", exc_info=True, extra={"runs": len(idle) + len(requeued)})
        return going

    async def _fast_round(self, conn: _PassConnection, run_ids: list[str]) -> dict[str, str]:
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
                moves: list[Move] = []
                for run_id in run_ids:
                    row = locked.get(run_id)
                    if row is None:
                        log.warning("lease lost; the run is left to its new holder", extra={"run_id": run_id})
                        outcomes[run_id] = _LOST
                        continue
                    move = await self.fast.transition(raw, staged, row, now, publishers)
                    if move is not None:
                        moves.append(move)
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

    async def _transition_alone(self, run_id: str, calls: list[PreparedCall] | None = None) -> str:
        """The ordinary transition in its own transaction; one run's trouble never strands the rest."""
        started = time.time()
        try:
            progressed, finished = await self._transition(run_id, calls)
        except LeaseLost:
            log.warning("lease lost; the run is left to its new holder", extra={"run_id": run_id})
            return _LOST
        except Exception:
            log.exception("advancing a run failed; its lease is handed back", extra={"run_id": run_id})
            try:
                async with self.sessions() as session, session.begin():
                    await runstore.release_lease(session, run_id, self.worker_id)
            except Exception:
                log.warning("could not hand back a lease", exc_info=True, extra={"run_id": run_id})
            return _LOST
        if trace.isEnabledFor(logging.DEBUG):  # pragma: no mutate block
            _traced("commit alone", started, self.worker_id, runs=1, moved=int(progressed))
        if not progressed:
            return _IDLE
        return _FINISHED if finished else _MOVED

    async def advance(self, run_id: str) -> int:
        """At most 25 transitions, then hand the lease back so other runs get their turn."""
        done = 0
        try:
            while done < MAX_TRANSITIONS:
                progressed, finished = await self._transition(run_id)
                if not progressed:
                    break
                done += 1
                if finished:
                    return done  # a finished run holds no lease any more
        except LeaseLost:
            log.warning("lease lost; the run is left to its new holder", extra={"run_id": run_id})
            return done
        async with self.sessions() as session, session.begin():
            await runstore.release_lease(session, run_id, self.worker_id)
        return done

    async def release_all(self) -> int:
        async with self.sessions() as session, session.begin():
            return await runstore.release_all_leases(session, self.worker_id)

    # --- one transition --------------------------------------------------------------------------

    async def transition(self, run_id: str) -> bool:
        """Make one step of progress in one transaction; False when the run has nothing to do now."""
        progressed, _ = await self._transition(run_id)
        return progressed

    async def _transition(self, run_id: str, calls: list[PreparedCall] | None = None) -> tuple[bool, bool]:
        """(progress made, run finished).

        A transition that starts an endpoint call commits the started attempt first; the call is
        then made outside any transaction — here, or by the caller when it passes ``calls`` — and
        its outcome recorded in a transaction of its own.
        """
        now = self.clock.now()
        self._calls.pop(run_id, None)
        try:
            async with self.sessions() as session, session.begin():
                run = await runstore.lock_leased_run(
                    session, run_id, self.worker_id, now=now, lease=self.settings.lease
                )
                before = run.state
                progressed = await self._dispatch(session, run, now)
        except BaseException:
            self._calls.pop(run_id, None)  # never send a call whose started attempt did not commit
            raise
        metrics.run_finished(before, run.state)  # committed: count a run that ended failing
        call = self._calls.pop(run_id, None)
        if call is not None:
            if calls is not None:
                calls.append(call)
                return True, False
            return True, await self._complete_call(call)
        return progressed, run.state in FINISHED

    # --- endpoint calls (outside any transaction) ------------------------------------------------

    async def _complete_call_alone(self, call: PreparedCall) -> str:
        try:
            finished = await self._complete_call(call)
        except LeaseLost:
            log.warning("lease lost during an endpoint call; the next claim records it", extra={"run_id": call.run_id})
            return _LOST
        except Exception:
            log.exception("recording an endpoint call failed; its lease is handed back", extra={"run_id": call.run_id})
            try:
                async with self.sessions() as session, session.begin():
                    await runstore.release_lease(session, call.run_id, self.worker_id)
            except Exception:
                log.warning("could not hand back a lease", exc_info=True, extra={"run_id": call.run_id})
            return _LOST
        return _FINISHED if finished else _MOVED

    async def _complete_call(self, call: PreparedCall) -> bool:
        """Send the call (no transaction open), then record its outcome under the lease."""
        async with transport.new_client(self.settings.endpoints.ca_bundle) as client:
            result = await transport.post(
                client,
                call.url,
                call.body,
                call.headers,
                timeout_s=call.timeout_s,
                allow_private_network=call.allow_private_network,
                operator_allows_private=self.settings.endpoints.allow_private_egress,
            )
        now = self.clock.now()
        async with self.sessions() as session, session.begin():
            run = await runstore.lock_leased_run(
                session, call.run_id, self.worker_id, now=now, lease=self.settings.lease
            )
            before = run.state
            attempt = await runstore.lock_attempt(session, call.attempt_id)
            if call.action == "execute":
                await self._record_call(session, run, attempt, result)
            else:
                await self._record_compensation_call(session, run, attempt, result)
        metrics.run_finished(before, run.state)  # committed: count a run that ended failing
        return run.state in FINISHED

    async def _start_call(
        self,
        session: AsyncSession,
        run: WorkflowRun,
        step: dict[str, Any],
        step_type: StepType,
        attempt: StepAttempt,
        ctx: StepContext,
    ) -> bool:
        """Record the attempt ``started`` (committed with this transaction) and prepare the call."""
        assert isinstance(step_type, CallWebhook)
        try:
            async with session.begin_nested():
                await step_type.decide_call(ctx, self.settings.endpoints)
                call = await step_type.prepare(ctx, attempt, self.settings.endpoints)
        except StepFailure as failure:
            await self._record_failure(session, run, attempt, failure)
            return True
        attempt.state = ATTEMPT_STARTED
        await runstore.record_attempt(session, attempt)
        self._calls[run.id] = call
        return True

    async def _record_call(
        self, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt | None, result: CallOutcome
    ) -> None:
        if attempt is None or attempt.state != ATTEMPT_STARTED:
            return  # recorded already (interrupted by another holder of the run)
        if run.state != RUNNING or run.step_index != attempt.step_index:
            raise TransitionRefused(f"run {run.id} moved on while its endpoint call was in flight")
        if result.succeeded:
            steps = await self._step_count(session, run)
            outcome = CallWebhook.succeeded(attempt.input.get("step", {}), result.status_code, result.latency_ms)
            await self._step_succeeded(session, run, attempt, outcome, steps)
            return
        attempt.result = {"status_code": result.status_code, "latency_ms": result.latency_ms}
        failure = StepFailure(result.category or "error", result.message, permanent=result.permanent)
        await self._record_failure(session, run, attempt, failure)

    async def _record_compensation_call(
        self, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt | None, result: CallOutcome
    ) -> None:
        if attempt is None or attempt.compensation_state != COMP_PENDING or run.state != COMPENSATING:
            return
        if result.succeeded:
            await self._compensation_done(
                session, run, attempt, {"status_code": result.status_code, "latency_ms": result.latency_ms}
            )
            return
        failure = StepFailure(result.category or "error", result.message, permanent=result.permanent)
        await self._compensation_failed_try(session, run, attempt, failure)

    async def _step_count(self, session: AsyncSession, run: WorkflowRun) -> int:
        revision = await session.get(WorkflowRevision, run.revision_id)
        return len(revision.definition.get("steps", [])) if revision is not None else run.step_index + 1

    async def _dispatch(self, session: AsyncSession, run: WorkflowRun, now: datetime) -> bool:
        if run.state in FINISHED or run.due_at is None or run.due_at > now:
            return False
        revision = await session.get(WorkflowRevision, run.revision_id)
        if revision is None:
            if run.state == COMPENSATING:
                return await self._compensate(session, run, None)
            await self._fail_run(session, run, "definition_unavailable", "The run's revision no longer exists.")
            return True
        if run.state in FORWARD and run.cancel_requested_at is None:
            workflow_state = await session.scalar(select(Workflow.state).where(Workflow.id == run.workflow_id))
            if workflow_state == "disabled":
                return False  # paused while its workflow is disabled; compensation and cancellation go on
        if run.cancel_requested_at is not None and run.state != COMPENSATING:
            await self._start_compensating(
                session, run, "cancelled", run.cancel_reason or "Cancelled.", reason="cancelled"
            )
            return True
        if run.state == PENDING:
            # Starting and the first step share one transaction (one commit less per run).
            await runstore.move_run(session, run, RUNNING, worker_id=self.worker_id, due_at=now, now=now)
        if run.state == RUNNING:
            return await self._run_step(session, run, revision)
        if run.state == AWAITING_APPROVAL:
            return await self._resume_approval(session, run, revision)
        if run.state == WAITING:
            return await self._end_wait(session, run, revision)
        if run.state == COMPENSATING:
            return await self._compensate(session, run, revision)
        return False

    async def _run_step(self, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision) -> bool:
        now = self.clock.now()
        definition = revision.definition
        steps: list[dict[str, Any]] = definition.get("steps", [])
        if run.step_index >= len(steps):
            await self._succeed_run(session, run)
            return True
        step = steps[run.step_index]
        step_type = STEP_TYPES.get(step.get("type", ""))
        attempts = await runstore.attempts_of_step(session, run.id, step["id"])
        if any(a.state == ATTEMPT_SUCCEEDED for a in attempts):
            # Already applied (by an earlier transaction that committed): skip, never apply again.
            if step.get("type") == "end" or run.step_index + 1 >= len(steps):
                await self._succeed_run(session, run, step_index=run.step_index + 1)
                return True
            await runstore.move_run(
                session, run, RUNNING, worker_id=self.worker_id, due_at=now, now=now, step_index=run.step_index + 1
            )
            return True
        if step_type is None:
            await self._fail_run(session, run, "definition_unavailable", f"No step type {step.get('type')!r} here.")
            return True
        if step_type.kind == APPROVAL:
            return await self._request_approval(session, run, revision, step, len(attempts) + 1)
        if step_type.kind == WAIT:
            wait = decide(await load_snapshot(session, RunFacts.of(run), step, now=now))
            assert isinstance(wait, Effect)  # a wait is never refused
            until = wait.values["until"]
            context = {**run.context, "wait": {"step_id": step["id"], "since": now.isoformat()}}
            await runstore.move_run(
                session, run, WAITING, worker_id=self.worker_id, due_at=until, now=now, context=context
            )
            return True
        policy = policy_for(definition, step)
        started = [a for a in attempts if a.state == ATTEMPT_STARTED]
        if started:
            # A worker recorded a call as started and stopped before recording its outcome: the
            # endpoint may or may not have acted. Transient and counted; the retry carries the same
            # Idempotency-Key, so the endpoint can tell.
            interrupted = StepFailure(
                "interrupted",
                "The worker stopped between the endpoint call and its outcome; retried with the same Idempotency-Key.",
                permanent=False,
            )
            await self._record_failure(session, run, started[-1], interrupted)
            return True
        number = len(attempts) + 1
        attempt = StepAttempt(
            id=new_id("wsa"),
            run_id=run.id,
            realm_id=run.realm_id,
            step_id=step["id"],
            step_index=run.step_index,
            step_type=step_type.name,
            number=number,
            idempotency_key=f"{run.id}.{step['id']}",
            # The resolved input: the step as published, for this subject, in this organization.
            input={
                "step": step,
                "subject_id": run.subject_id,
                "organization_id": step.get("organization_id") or run.organization_id,
            },
            input_version=input_version(revision.number, revision.hash, run.input_version),
            max_attempts=policy.max_attempts if step_type.retried else 1,
            backoff_ms=policy.backoff_ms if step_type.retried else 0,
            started_at=now,
        )
        actor = run_actor(run)
        ctx = StepContext(
            session=session,
            run=run,
            step=step,
            step_index=run.step_index,
            organization_id=step.get("organization_id") or run.organization_id,
            actor=actor,
            authority=await load_authority(session, run.realm_id, "user", run.publisher_id, now=now),
            now=now,
            mail_configured=self.settings.mail_configured,
        )
        if step_type.kind == EXTERNAL:
            return await self._start_call(session, run, step, step_type, attempt, ctx)
        try:
            async with session.begin_nested():
                # The publisher's re-check on the step's snapshot; the step type decides the rest.
                refused = publisher_refusal(await step_type.snapshot(ctx))
                if refused is not None:
                    raise StepFailure(refused.category, refused.message, permanent=refused.permanent)
                try:
                    outcome = await step_type.perform(ctx)
                except IntegrityError as exc:
                    # The directory refused the change (a concurrent duplicate, a vanished row):
                    # a permanent conflict, not a reason to retry the transaction forever.
                    raise StepFailure("conflict", error_summary(exc), permanent=True) from exc
        except StepFailure as failure:
            await self._record_failure(session, run, attempt, failure)
            return True
        except (TransitionRefused, IntegrityError):
            raise
        except Exception as exc:  # infrastructure: transient
            log.warning("step failed unexpectedly", exc_info=exc, extra={"run_id": run.id, "step_id": step["id"]})
            await self._record_failure(session, run, attempt, StepFailure("error", error_summary(exc), permanent=False))
            return True
        await self._step_succeeded(session, run, attempt, outcome, len(steps))
        return True

    async def _step_succeeded(
        self, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt, outcome: Outcome, steps: int
    ) -> None:
        """Record the succeeded attempt, audit it and advance the run (or finish it)."""
        now = self.clock.now()
        attempt.state = ATTEMPT_SUCCEEDED
        attempt.result = outcome.result
        attempt.compensation_strategy = outcome.strategy
        attempt.compensation_state = outcome.compensation_state
        attempt.finished_at = now
        await runstore.record_attempt(session, attempt)
        await record_audit(
            session,
            run_actor(run),
            "workflow.step.succeeded",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
            details={"step_id": attempt.step_id, "attempt": attempt.number, "idempotency_key": attempt.idempotency_key},
        )
        if outcome.ends_run or run.step_index + 1 >= steps:
            await self._succeed_run(session, run, step_index=run.step_index + 1)
        else:
            await runstore.move_run(
                session, run, RUNNING, worker_id=self.worker_id, due_at=now, now=now, step_index=run.step_index + 1
            )

    # --- approvals and waits -----------------------------------------------------------------------

    def _attempt(
        self, run: WorkflowRun, revision: WorkflowRevision, step: dict[str, Any], step_type: StepType, number: int
    ) -> StepAttempt:
        """An attempt of a step that is never retried (approval, wait)."""
        return StepAttempt(
            id=new_id("wsa"),
            run_id=run.id,
            realm_id=run.realm_id,
            step_id=step["id"],
            step_index=run.step_index,
            step_type=step_type.name,
            number=number,
            idempotency_key=f"{run.id}.{step['id']}",
            input={"step": step, "subject_id": run.subject_id, "organization_id": run.organization_id},
            input_version=input_version(revision.number, revision.hash, run.input_version),
            max_attempts=1,
            backoff_ms=0,
            started_at=self.clock.now(),
        )

    async def _request_approval(
        self, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision, step: dict[str, Any], number: int
    ) -> bool:
        now = self.clock.now()
        decision = decide(await load_snapshot(session, RunFacts.of(run), step, now=now))
        if isinstance(decision, Refusal):
            attempt = self._attempt(run, revision, step, STEP_TYPES["approval"], number)
            failure = StepFailure(decision.category, decision.message, permanent=decision.permanent)
            await self._record_failure(session, run, attempt, failure)
            return True
        approval = await approvals.request_approval(
            session,
            run,
            step,
            run.step_index,
            actor=run_actor(run),
            now=now,
            mail_configured=self.settings.mail_configured,
            approvers=decision.values["approvers"],
        )
        due = min(d for d in (approval.remind_at, approval.expires_at) if d is not None)
        await runstore.move_run(session, run, AWAITING_APPROVAL, worker_id=self.worker_id, due_at=due, now=now)
        return True

    async def _resume_approval(self, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision) -> bool:
        """The approval was decided, expired, or is due a reminder: act on it."""
        now = self.clock.now()
        steps: list[dict[str, Any]] = revision.definition.get("steps", [])
        step = steps[run.step_index]
        approval = await approvals.for_step(session, run.id, step["id"])
        if approval is None:
            attempt = self._attempt(run, revision, step, STEP_TYPES["approval"], 1)
            failure = StepFailure("approval_missing", "The run's approval record is missing.", permanent=True)
            await self._record_failure(session, run, attempt, failure)
            return True
        if approval.status == approvals.PENDING:
            if approval.expires_at <= now:
                await approvals.expire(session, approval, now=now, correlation_id=run.id)
            elif approval.reminded_at is None and approval.remind_at is not None and approval.remind_at <= now:
                await approvals.remind(session, approval, now=now, mail_configured=self.settings.mail_configured)
                await runstore.set_due(session, run, worker_id=self.worker_id, due_at=approval.expires_at, now=now)
                return True
            else:
                due = approval.expires_at if approval.reminded_at else (approval.remind_at or approval.expires_at)
                await runstore.set_due(session, run, worker_id=self.worker_id, due_at=due, now=now)
                return False
        attempt = self._attempt(run, revision, step, STEP_TYPES["approval"], 1)
        attempt.started_at = approval.created_at
        decision = {
            "approval_id": approval.id,
            "step_id": approval.step_id,
            "status": approval.status,
            "decided_by": approval.decided_by,
            "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
            "comment": approval.comment,
        }
        context = {**run.context, "approvals": [*(run.context.get("approvals") or []), decision]}
        if approval.status == approvals.APPROVED:
            attempt.state = ATTEMPT_SUCCEEDED
            attempt.result = {"approval_id": approval.id, "decided_by": approval.decided_by}
            attempt.finished_at = now
            await runstore.record_attempt(session, attempt)
            await record_audit(
                session,
                run_actor(run),
                "workflow.step.succeeded",
                category=CATEGORY,
                subject_type="workflow_run",
                subject_id=run.id,
                details={"step_id": step["id"], "attempt": 1, "idempotency_key": attempt.idempotency_key},
            )
            await runstore.move_run(
                session,
                run,
                RUNNING,
                worker_id=self.worker_id,
                due_at=now,
                now=now,
                step_index=run.step_index + 1,
                context=context,
            )
            return True
        category = {approvals.REJECTED: "approval_rejected", approvals.EXPIRED: "approval_expired"}.get(
            approval.status, "cancelled"
        )
        words = {
            "approval_rejected": "The approval was rejected.",
            "approval_expired": "The approval expired before anyone decided.",
        }.get(category, "The approval was cancelled.")
        await self._record_failure(session, run, attempt, StepFailure(category, words, permanent=True))
        return True

    async def _end_wait(self, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision) -> bool:
        """The wait is over (the claim only takes a run once it is due): record it and go on."""
        now = self.clock.now()
        steps: list[dict[str, Any]] = revision.definition.get("steps", [])
        step = steps[run.step_index]
        attempt = self._attempt(run, revision, step, STEP_TYPES["wait"], 1)
        waited = run.context.get("wait") or {}
        if waited.get("since"):
            attempt.started_at = datetime.fromisoformat(waited["since"])
        attempt.state = ATTEMPT_SUCCEEDED
        attempt.result = {"waited": step.get("duration")}
        attempt.finished_at = now
        await runstore.record_attempt(session, attempt)
        await record_audit(
            session,
            run_actor(run),
            "workflow.step.succeeded",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
            details={"step_id": step["id"], "attempt": 1, "idempotency_key": attempt.idempotency_key},
        )
        context = {k: v for k, v in run.context.items() if k != "wait"}
        await runstore.move_run(
            session,
            run,
            RUNNING,
            worker_id=self.worker_id,
            due_at=now,
            now=now,
            step_index=run.step_index + 1,
            context=context,
        )
        return True

    async def _record_failure(
        self,
        session: AsyncSession,
        run: WorkflowRun,
        attempt: StepAttempt,
        failure: StepFailure,
    ) -> None:
        """A failed attempt: retried by the policy the attempt recorded (its ``max_attempts`` and
        ``backoff_ms``), or the run compensates."""
        now = self.clock.now()
        attempt.state = ATTEMPT_FAILED
        attempt.error_category = failure.category
        attempt.error_message = failure.message[:2000]
        attempt.finished_at = now
        await runstore.record_attempt(session, attempt)
        await record_audit(
            session,
            run_actor(run),
            "workflow.step.failed",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
            details={"step_id": attempt.step_id, "attempt": attempt.number, "error_category": failure.category},
        )
        if failure.permanent:
            await self._start_compensating(session, run, failure.category, failure.message)
        elif attempt.number >= attempt.max_attempts:
            await self._start_compensating(session, run, "retries_exhausted", failure.message)
        else:
            wait = delay_ms(attempt.backoff_ms, attempt.number, rand=self.clock.random)
            await runstore.move_run(
                session,
                run,
                RUNNING,
                worker_id=self.worker_id,
                due_at=now + timedelta(milliseconds=wait),
                now=now,
                error_category=failure.category,
                last_error=failure.message[:2000],
            )

    async def _start_compensating(
        self, session: AsyncSession, run: WorkflowRun, category: str, message: str, *, reason: str | None = None
    ) -> None:
        now = self.clock.now()
        # A call recorded as started and never finished is over: the run no longer waits for it.
        await runstore.interrupt_started_attempts(session, run.id, now)
        if run.state == AWAITING_APPROVAL:
            await approvals.cancel_pending(session, run.id, now=now)
        await runstore.move_run(
            session,
            run,
            COMPENSATING,
            worker_id=self.worker_id,
            due_at=now,
            now=now,
            error_category=category,
            last_error=message[:2000],
        )
        await record_audit(
            session,
            run_actor(run),
            "workflow.run.failed",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
            details={"reason": reason or category, "error_category": category, "phase": "compensating"},
        )

    async def _fail_run(self, session: AsyncSession, run: WorkflowRun, category: str, message: str) -> None:
        await self._start_compensating(session, run, category, message)

    async def _succeed_run(self, session: AsyncSession, run: WorkflowRun, **values: Any) -> None:
        now = self.clock.now()
        await runstore.move_run(session, run, SUCCEEDED, worker_id=self.worker_id, due_at=None, now=now, **values)
        await emit_run_outcome(session, run)
        await record_audit(
            session,
            run_actor(run),
            "workflow.run.succeeded",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
        )

    # --- compensation ----------------------------------------------------------------------------

    async def _compensate(self, session: AsyncSession, run: WorkflowRun, revision: WorkflowRevision | None) -> bool:
        now = self.clock.now()
        summary = await runstore.compensation_summary(session, run.id)
        if summary.get(COMP_FAILED):
            await self._finish_compensation(session, run, summary)
            return True
        attempt = await runstore.next_compensation(session, run.id)
        if attempt is None:
            await self._finish_compensation(session, run, summary)
            return True
        step_type = STEP_TYPES.get(attempt.step_type)
        actor = run_actor(run)
        ctx = StepContext(
            session=session,
            run=run,
            step=attempt.input.get("step", attempt.input),
            step_index=attempt.step_index,
            organization_id=attempt.input.get("organization_id") or run.organization_id,
            actor=actor,
            authority=await load_authority(session, run.realm_id, "user", run.publisher_id, now=now),
            now=now,
        )
        attempt.compensation_attempts += 1
        if attempt.compensation_strategy == STRATEGY_NOTIFY_ENDPOINT and isinstance(step_type, CallWebhook):
            # The try is counted (and committed) before the call; not re-checked for authority.
            try:
                call = await step_type.prepare_compensation(ctx, attempt, self.settings.endpoints)
            except StepFailure as failure:
                await self._compensation_failed_try(session, run, attempt, failure)
                return True
            await session.flush()
            self._calls[run.id] = call
            return True
        try:
            if step_type is None:
                raise StepFailure("definition_unavailable", f"No step type {attempt.step_type!r} here.", permanent=True)
            async with session.begin_nested():
                result = await step_type.undo(ctx, attempt)
        except StepFailure as failure:
            await self._compensation_failed_try(session, run, attempt, failure)
            return True
        except (TransitionRefused, IntegrityError):
            raise
        except Exception as exc:
            log.warning("compensation failed unexpectedly", exc_info=exc, extra={"run_id": run.id})
            await self._compensation_failed_try(
                session, run, attempt, StepFailure("error", error_summary(exc), permanent=False)
            )
            return True
        await self._compensation_done(session, run, attempt, result)
        return True

    async def _compensation_done(
        self, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt, result: dict[str, Any]
    ) -> None:
        now = self.clock.now()
        attempt.compensation_state = COMP_DONE
        attempt.compensation_result = result
        attempt.compensated_at = now
        await session.flush()
        await record_audit(
            session,
            run_actor(run),
            "workflow.step.compensated",
            category=CATEGORY,
            subject_type="workflow_run",
            subject_id=run.id,
            details={"step_id": attempt.step_id, "attempt": attempt.number, "result": result},
        )
        await runstore.set_due(session, run, worker_id=self.worker_id, due_at=now, now=now)

    async def _compensation_failed_try(
        self, session: AsyncSession, run: WorkflowRun, attempt: StepAttempt, failure: StepFailure
    ) -> None:
        now = self.clock.now()
        attempt.compensation_error = f"{failure.category}: {failure.message}"[:2000]
        if failure.permanent or attempt.compensation_attempts >= COMPENSATION_MAX_ATTEMPTS:
            attempt.compensation_state = COMP_FAILED
            await session.flush()
            await record_audit(
                session,
                run_actor(run),
                "workflow.step.compensation_failed",
                category=CATEGORY,
                subject_type="workflow_run",
                subject_id=run.id,
                details={
                    "step_id": attempt.step_id,
                    "error_category": failure.category,
                    "tries": attempt.compensation_attempts,
                },
            )
            await runstore.set_due(session, run, worker_id=self.worker_id, due_at=now, now=now)
            return
        await session.flush()
        wait = delay_ms(COMPENSATION_BACKOFF_MS, attempt.compensation_attempts, rand=self.clock.random)
        await runstore.set_due(
            session, run, worker_id=self.worker_id, due_at=now + timedelta(milliseconds=wait), now=now
        )

    async def _finish_compensation(self, session: AsyncSession, run: WorkflowRun, summary: dict[str, int]) -> None:
        now = self.clock.now()
        actor = run_actor(run)
        if summary.get(COMP_FAILED):
            final, event = COMPENSATION_FAILED, "workflow.run.compensation_failed"
        elif run.cancel_requested_at is not None:
            final, event = CANCELLED, "workflow.run.cancelled"
        elif summary.get(COMP_DONE):
            final, event = COMPENSATED, "workflow.run.compensated"
        else:
            final, event = FAILED, "workflow.run.failed"
        await runstore.move_run(session, run, final, worker_id=self.worker_id, due_at=None, now=now)
        await emit_run_outcome(session, run)
        details: dict[str, Any] = {"error_category": run.error_category}
        if final == FAILED:
            details["phase"] = "finished"
            details["reason"] = run.error_category
        await record_audit(
            session, actor, event, category=CATEGORY, subject_type="workflow_run", subject_id=run.id, details=details
        )


__all__ = ["COMP_PENDING", "MAX_TRANSITIONS", "Runner", "RunnerSettings"]
