"""Claims and leases: which worker holds which run, and until when.

A worker claims due runs (fair across realms), locks one for a transition under its lease, and
hands leases back — one, a pass's worth, or all of them at shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.runs.models import WorkflowRun
from engine.runs.states import TransitionRefused

MAX_BATCH = 50


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


def share_filled(claimed: Sequence[Claimed], tenant_share: int) -> bool:
    """Whether some realm got its whole share in this claim: it may have more due runs."""
    counts: dict[str, int] = {}
    for item in claimed:
        counts[item.realm_id] = counts.get(item.realm_id, 0) + 1
    return any(count >= max(1, tenant_share) for count in counts.values())


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


async def release_leases(
    session: AsyncSession, run_ids: Sequence[str], worker_id: str, *, due_again_at: datetime | None = None
) -> None:
    """Hand back the leases of several runs at once (the end of a group-committed pass).

    ``due_again_at``: runs still due that made their 25 transitions go to the back of their realm's
    queue — due from then, behind the runs that became due meanwhile — instead of keeping the due
    time their internal steps kept (``FAST_TRANSITIONS``).
    """
    if run_ids:
        values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
        if due_again_at is not None:
            values["due_at"] = case(
                (WorkflowRun.due_at < due_again_at, due_again_at),  # type: ignore[operator]
                else_=WorkflowRun.due_at,
            )
        await session.execute(
            update(WorkflowRun)
            .where(WorkflowRun.id.in_(list(run_ids)), WorkflowRun.lease_owner == worker_id)  # type: ignore[attr-defined]
            .values(**values)
        )
