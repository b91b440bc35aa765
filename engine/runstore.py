"""All SQL of the engine's run tables: claims, leases and transitions.

The step logic (engine/runner.py) calls these verbs and never writes SQL itself. Every verb that
changes a run checks, in its WHERE clause, that this worker still holds the run's lease, so a
worker that lost its lease cannot commit anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from engine.states import (
    ATTEMPT_FAILED,
    ATTEMPT_SUCCEEDED,
    COMP_PENDING,
    COMPENSATING,
    FINISHED,
    FORWARD,
    TransitionRefused,
    allowed_from,
)
from engine.workflow_models import StepAttempt, WorkflowRun

MAX_BATCH = 50
NOTIFY_CHANNEL = "cockpit_runs_due"


class LeaseLost(TransitionRefused):
    """This worker no longer holds the run's lease: nothing it does may commit."""


@dataclass(frozen=True)
class Claimed:
    run_id: str
    realm_id: str


# Each realm with due runs, found by skipping through ix_workflow_runs_realm_due (one index probe
# per realm, whatever the number of due runs); then, per realm, at most ``share`` claimable runs
# read in due order from the same index (LATERAL … LIMIT). Realms are visited round-robin,
# starting after the realm the previous pass ended with, and the first run of every realm comes
# before the second of any: a realm with only new runs is never starved by older backlogs. The
# outer query locks the chosen rows one by one through their primary key (a LATERAL subquery, so
# no plan — generic or custom — ever scans the table to join them), in claim order, skipping those
# another worker holds, re-checking each once locked, and stops at the batch. Only unfinished
# states are ever selected.
CLAIM_SQL = text(
    """
    WITH RECURSIVE realms(realm_id) AS (
        (SELECT realm_id FROM workflow_runs WHERE due_at IS NOT NULL ORDER BY realm_id LIMIT 1)
        UNION ALL
        SELECT (SELECT r.realm_id FROM workflow_runs r
                 WHERE r.due_at IS NOT NULL AND r.realm_id > realms.realm_id
                 ORDER BY r.realm_id LIMIT 1)
          FROM realms WHERE realms.realm_id IS NOT NULL
    ),
    visits AS (
        SELECT realm_id, row_number() OVER (ORDER BY realm_id <= :after, realm_id) AS turn
          FROM realms WHERE realm_id IS NOT NULL
    ),
    candidates AS (
        SELECT c.id, c.due_at, v.turn,
               row_number() OVER (PARTITION BY v.realm_id ORDER BY c.due_at, c.id) AS place
          FROM visits v
          CROSS JOIN LATERAL (
              SELECT r.id, r.due_at
                FROM workflow_runs r JOIN workflows w ON w.id = r.workflow_id
               WHERE r.realm_id = v.realm_id
                 AND r.due_at IS NOT NULL AND r.due_at <= :now
                 AND r.state IN ('pending', 'running', 'waiting', 'awaiting_approval', 'compensating')
                 AND (r.lease_owner IS NULL OR r.lease_expires_at <= :now)
                 AND (w.state <> 'disabled' OR r.state = 'compensating' OR r.cancel_requested_at IS NOT NULL)
               ORDER BY r.due_at
               LIMIT :share
          ) c
    )
    SELECT x.id, x.realm_id
      FROM (SELECT id, place, turn FROM candidates ORDER BY place, turn) k
      CROSS JOIN LATERAL (
          SELECT r.id, r.realm_id
            FROM workflow_runs r
           WHERE r.id = k.id
             AND r.due_at IS NOT NULL AND r.due_at <= :now
             AND r.state IN ('pending', 'running', 'waiting', 'awaiting_approval', 'compensating')
             AND (r.lease_owner IS NULL OR r.lease_expires_at <= :now)
             FOR UPDATE SKIP LOCKED
      ) x
     ORDER BY k.place, k.turn
     LIMIT :limit
    """
)


async def claim_due_runs(
    session: AsyncSession,
    worker_id: str,
    *,
    now: datetime,
    lease: timedelta,
    batch_size: int,
    tenant_share: int,
    after_realm: str | None = None,
) -> list[Claimed]:
    """Lease up to ``min(batch_size, 50)`` due runs, at most ``tenant_share`` of one realm.

    Realms are visited round-robin from the one after ``after_realm`` (pass the realm of the last
    run the previous claim returned). Runs of a disabled workflow are skipped unless compensating
    or cancelled (those only remove access). ``FOR UPDATE SKIP LOCKED`` lets any number of
    workers claim at once. The cost depends on the number of realms with due runs and on the
    batch, never on the number of due runs.
    """
    limit = max(1, min(batch_size, MAX_BATCH))
    share = max(1, min(tenant_share, limit))
    rows = await session.execute(CLAIM_SQL, {"now": now, "share": share, "limit": limit, "after": after_realm or ""})
    chosen = [Claimed(run_id, realm_id) for run_id, realm_id in rows]
    if chosen:
        await session.execute(
            update(WorkflowRun)
            .where(WorkflowRun.id.in_([c.run_id for c in chosen]))  # type: ignore[attr-defined]
            .values(lease_owner=worker_id, lease_expires_at=now + lease)
        )
    return chosen


async def lock_leased_run(
    session: AsyncSession, run_id: str, worker_id: str, *, now: datetime, lease: timedelta
) -> WorkflowRun:
    """Lock the run for one transition and renew the lease; :class:`LeaseLost` when it is not ours."""
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run_id,
            WorkflowRun.lease_owner == worker_id,
            WorkflowRun.lease_expires_at > now,  # type: ignore[operator]
        )
        .values(lease_expires_at=now + lease)
        .returning(WorkflowRun.id)
    )
    if result.scalar_one_or_none() is None:
        raise LeaseLost(f"worker {worker_id} no longer holds the lease of {run_id}")
    run = (
        await session.execute(
            select(WorkflowRun).where(WorkflowRun.id == run_id).execution_options(populate_existing=True)
        )
    ).scalar_one()
    return run


async def release_lease(session: AsyncSession, run_id: str, worker_id: str) -> None:
    await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.id == run_id, WorkflowRun.lease_owner == worker_id)
        .values(lease_owner=None, lease_expires_at=None)
    )


async def release_all_leases(session: AsyncSession, worker_id: str) -> int:
    """Hand back every lease this worker holds (at shutdown), so others continue at once."""
    result = await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.lease_owner == worker_id)
        .values(lease_owner=None, lease_expires_at=None)
        .returning(WorkflowRun.id)
    )
    return len(result.scalars().all())


async def move_run(
    session: AsyncSession,
    run: WorkflowRun,
    target: str,
    *,
    worker_id: str,
    due_at: datetime | None,
    now: datetime,
    **values: Any,
) -> None:
    """Advance the run to ``target`` (allowed states only, lease held), with its next due time."""
    values |= {"state": target, "due_at": due_at, "updated_at": now}
    if target in FINISHED:
        values |= {"finished_at": now, "due_at": None, "lease_owner": None, "lease_expires_at": None}
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run.id,
            WorkflowRun.state.in_(allowed_from(target)),  # type: ignore[attr-defined]
            WorkflowRun.lease_owner == worker_id,
        )
        .values(**values)
        .returning(WorkflowRun.id)
    )
    if result.scalar_one_or_none() is None:
        raise TransitionRefused(f"run {run.id} cannot move from {run.state} to {target}")
    for key, value in values.items():
        setattr(run, key, value)


async def set_due(session: AsyncSession, run: WorkflowRun, *, worker_id: str, due_at: datetime, now: datetime) -> None:
    """A later due time without a state change (a retry or a compensation waiting)."""
    await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.id == run.id, WorkflowRun.lease_owner == worker_id)
        .values(due_at=due_at, updated_at=now)
    )
    run.due_at = due_at


async def attempts_of_step(session: AsyncSession, run_id: str, step_id: str) -> list[StepAttempt]:
    rows = await session.execute(
        select(StepAttempt)
        .where(StepAttempt.run_id == run_id, StepAttempt.step_id == step_id)
        .order_by(StepAttempt.number)  # type: ignore[arg-type]
    )
    return list(rows.scalars())


async def record_attempt(session: AsyncSession, attempt: StepAttempt) -> StepAttempt:
    """Insert a finished attempt. The database refuses a second succeeded attempt of one step."""
    session.add(attempt)
    await session.flush()
    return attempt


async def next_compensation(session: AsyncSession, run_id: str) -> StepAttempt | None:
    """The newest succeeded attempt whose compensation is still pending (one at a time)."""
    rows = await session.execute(
        select(StepAttempt)
        .where(
            StepAttempt.run_id == run_id,
            StepAttempt.state == ATTEMPT_SUCCEEDED,
            StepAttempt.compensation_state == COMP_PENDING,
        )
        .order_by(StepAttempt.step_index.desc(), StepAttempt.number.desc())  # type: ignore[attr-defined]
        .limit(1)
        .with_for_update()
    )
    return rows.scalar_one_or_none()


async def compensation_summary(session: AsyncSession, run_id: str) -> dict[str, int]:
    rows = await session.execute(
        select(StepAttempt.compensation_state, func.count())
        .where(StepAttempt.run_id == run_id, StepAttempt.state == ATTEMPT_SUCCEEDED)
        .group_by(StepAttempt.compensation_state)
    )
    return {str(state): int(count) for state, count in rows}


async def request_cancel(
    session: AsyncSession, run_id: str, realm_id: str, *, by: str, reason: str | None, now: datetime
) -> WorkflowRun | None:
    """Mark the run for cancellation and make it due; None when it cannot be cancelled (409)."""
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run_id,
            WorkflowRun.realm_id == realm_id,
            WorkflowRun.state.in_(sorted(FORWARD)),  # type: ignore[attr-defined]
            WorkflowRun.cancel_requested_at.is_(None),  # type: ignore[union-attr]
        )
        .values(
            cancel_requested_at=now,
            cancel_requested_by=by,
            cancel_reason=reason,
            due_at=now,
            updated_at=now,
            # A run paused by a disabled workflow is due now: the kept due time no longer applies.
            context=WorkflowRun.context.op("-", return_type=JSONB)(literal("paused_due_at", String())),  # type: ignore[attr-defined]
        )
        .returning(WorkflowRun)
    )
    return result.scalar_one_or_none()


async def notify_due(session: AsyncSession) -> None:
    """Wake the workers when this transaction commits (LISTEN/NOTIFY; the 1 s pass is the safety net)."""
    await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})


def failed_attempts(attempts: Sequence[StepAttempt]) -> int:
    return sum(1 for a in attempts if a.state == ATTEMPT_FAILED)


__all__ = [
    "COMPENSATING",
    "Claimed",
    "LeaseLost",
]
