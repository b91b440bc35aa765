"""The batched executor of internal steps: one statement for the transitions of a whole group commit.

The single-run executor (engine/runs/runner.py) reads the run, its revision, its attempts and its
publisher's authority through the ORM and makes the effect through the directory's writers: some
twenty round trips. This module does the same work for a group of runs in three statements on the
raw asyncpg connection — the lock of every run of the group (``batched.LOCK_FOR_TRANSITION``, a
row lock under the lease), what the group's decisions read of the directory
(``batched.STEP_FACTS``), and one data-modifying statement for all of them
(``batched.FAST_TRANSITIONS``: each run's effect or refusal, its attempt, audit and outbox
events, and its advance, which renews the lease) — with what never changes, or changes rarely,
kept in memory:

- a revision is immutable once written: cached by id;
- the publisher's and the subject's authority, and the roles and groups the grant ceiling reads,
  are cached with the authorization epochs they were read at (``realms.authz_epoch``,
  ``users.authz_epoch``, moved by triggers on every change to roles, groups, assignments,
  memberships and user status). The lock reads the current epochs in the effect's own
  transaction: when either moved, the full authority query runs again, in that transaction. An
  authority also expires with its earliest expiring grant.

Every internal step type has a batched form. Each step is decided by the same function as the
single-run executor and the preview (engine/runs/decisions.py, ``decide``), on the snapshot
``snapshots.load_snapshot`` would read, built here from the caches and the group's facts
(``_snapshot``). An effect is written as decided; a permanent refusal is recorded here as the
single-run executor records it (the failed attempt, and the run compensating from now), with the
audit events built by the same functions. A run goes the ordinary way — this module writes
nothing for it and ``transitions`` leaves it out — when it is cancelled, its workflow is disabled,
its step was already applied, its step type has no batched form (or its ``perform`` was
replaced), its role needs approval, the refusal would be retried, or the step's writer holds a
rule the statement cannot (the realm's last administrator: see ``_snapshot``); and when the
statement finds the facts it was decided on changed meanwhile.

The caches and their reads are in engine/runs/fastpath_caches.py; what each step type reads, its
snapshot and its row of the statement in engine/runs/fastpath_forms.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from engine.platform.clock import Clock
from engine.runs.decisions import Refusal, decide
from engine.runs.fastpath_caches import Revision, Staged
from engine.runs.fastpath_forms import (
    AUDIT_COLUMNS,
    MIRRORED,
    MOVE_COLUMNS,
    OUTBOX_COLUMNS,
    Move,
    StepForms,
    Wanted,
)
from engine.runs.runstore import batched
from engine.runs.states import PENDING, RUNNING
from engine.runs.steps import STEP_TYPES


class FastPath(StepForms):
    """One per runner: its caches and the fast form of a transition."""

    def __init__(self, worker_id: str, clock: Clock, lease: timedelta, *, mail_configured: bool = False) -> None:
        self.worker_id = worker_id
        self.mail_configured = mail_configured  # notices are mailed (else recorded as not_configured)
        self.clock = clock
        self.lease = lease  # a run that goes on is held this long from its advance
        self.moved = 0  # transitions made and committed here, in this runner's life
        super().__init__()

    # --- reads --------------------------------------------------------------------------------

    async def lock(self, conn: Any, run_ids: list[str], *, now: datetime) -> dict[str, Any]:
        """Lock the runs this worker still holds; what each transition needs, by run id."""
        values = {"run_ids": run_ids, "worker_id": self.worker_id, "now": now}
        rows = await conn.fetch(batched.LOCK_FOR_TRANSITION.sql, *batched.LOCK_FOR_TRANSITION.args(values))
        return {row["id"]: row for row in rows}

    # --- the transitions of a group -----------------------------------------------------------

    async def transitions(
        self, conn: Any, staged: Staged, runs: list[Mapping[str, Any]], now: datetime, publishers: Collection[str]
    ) -> list[Move]:
        """The next internal step of each run, ready to be made together (``apply``); a run left out
        must be taken the ordinary way.

        ``publishers`` are the accountable publishers of every run in this transaction, and every
        subject of more than one of its runs: a run whose subject is one of them changes an authority
        another run of the transaction reads, and goes the ordinary way. What the decisions read of
        the directory is read for the whole group in one statement (``batched.STEP_FACTS``).
        """
        ready: list[tuple[Mapping[str, Any], Revision, dict[str, Any], int, Wanted]] = []
        for run in runs:
            found = await self._ready(conn, staged, run, now, publishers)
            if found is not None:
                ready.append((run, *found))
        facts = await self._facts(conn, [(run, wanted) for run, _, _, _, wanted in ready if wanted.facts])
        moves = []
        for run, revision, step, index, wanted in ready:
            snapshot = await self._snapshot(conn, staged, run, step, wanted, facts.get(run["id"]), now)
            if snapshot is None:
                continue
            decision = decide(snapshot)
            if isinstance(decision, Refusal) and not decision.permanent:
                continue  # a retry waits out its backoff: the ordinary way schedules it
            move = self._move(run, revision, step, index, snapshot.organization_id, decision, now, facts.get(run["id"]))
            if move is not None:
                moves.append(move)
        return moves

    async def transition(
        self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime, publishers: Collection[str]
    ) -> Move | None:
        """One run's next internal step (``transitions`` for a group of one)."""
        moves = await self.transitions(conn, staged, [run], now, publishers)
        return moves[0] if moves else None

    async def _ready(
        self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime, publishers: Collection[str]
    ) -> tuple[Revision, dict[str, Any], int, Wanted] | None:
        """The run's revision, step and its index, and what its decision reads; None when it goes the ordinary way."""
        if run["state"] not in (PENDING, RUNNING) or run["cancel_requested_at"] is not None:
            return None
        if run["due_at"] is None or run["due_at"] > now or run["workflow_state"] == "disabled":
            return None
        if run["succeeded"] or run["subject_id"] in publishers:
            return None
        revision = await self._revision(conn, run["revision_id"])
        if revision is None:
            return None
        steps: list[dict[str, Any]] = revision.definition["steps"]
        index: int = run["step_index"]
        if index >= len(steps):
            return None
        step = steps[index]
        step_type = STEP_TYPES.get(step.get("type", ""))
        if step_type is None or MIRRORED.get(step_type.name) is not type(step_type).perform:
            return None
        return revision, step, index, await self._wanted(conn, staged, run, step)

    async def apply(self, conn: Any, moves: list[Move]) -> set[str]:
        """Make the moves of a group in one statement: the runs that moved (the others wrote nothing)."""
        if not moves:
            return set()
        values: dict[str, Any] = {name: [move.row[name] for move in moves] for name in MOVE_COLUMNS}
        audit = [(move.run_id, *event) for move in moves for event in move.audit]
        for position, name in enumerate(AUDIT_COLUMNS):
            values[name] = [event[position] for event in audit]
        outbox = [(move.run_id, *event) for move in moves for event in move.outbox]
        for position, name in enumerate(OUTBOX_COLUMNS):
            values[name] = [event[position] for event in outbox]
        values["worker_id"] = self.worker_id
        q = batched.FAST_TRANSITIONS
        moved = {row[0] for row in await conn.fetch(q.sql, *q.args(values))}
        if any(move.outbox and move.run_id in moved for move in moves):
            await conn.execute(batched.OUTBOX_WAKE)  # the dispatcher wakes when this transaction commits
        return moved
