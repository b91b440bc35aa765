"""``retention.cleanup``: finished runs are deleted a while after they ended (seed 000 "Retention").

Runs that finished more than ``COCKPIT_RUN_RETENTION_DAYS`` (default 180) days ago are deleted
with everything that hangs off them (their step attempts go by ``ON DELETE CASCADE``; so must
any table that belongs to a run). The work is done in bounded batches, each its own short
transaction: the oldest finished runs first (``ix_workflow_runs_finished_at``), taken with
``FOR UPDATE SKIP LOCKED`` so a batch never waits for — or blocks for long — anyone else.
Runs that point at a deleted run (``rerun_of``) keep going: the link becomes NULL.

The last pass (time, count, cutoff) is kept in ``maintenance_passes`` and read by
:func:`last_retention_cleanup`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.runs.models import MaintenancePass

log = logging.getLogger("cockpit.retention")

TASK = "retention.cleanup"
BATCH_SIZE = 1000
MAX_BATCHES = 100  # at most 100 000 runs per pass; the next pass goes on

DELETE_BATCH = """
WITH doomed AS (
    SELECT id FROM workflow_runs
     WHERE finished_at IS NOT NULL AND finished_at < :cutoff
     ORDER BY finished_at
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
)
DELETE FROM workflow_runs r USING doomed WHERE r.id = doomed.id
"""


@dataclass(frozen=True)
class RetentionPass:
    ran_at: datetime
    deleted: int
    cutoff: datetime
    batches: int


async def cleanup_finished_runs(
    sessions: async_sessionmaker[AsyncSession],
    *,
    retention_days: int,
    clock: Clock | None = None,
    batch_size: int = BATCH_SIZE,
    max_batches: int = MAX_BATCHES,
) -> RetentionPass:
    """Delete finished runs older than the retention, ``batch_size`` per transaction; record and log the count."""
    now = (clock or SYSTEM_CLOCK).now()
    cutoff = now - timedelta(days=retention_days)
    deleted = 0
    batches = 0
    while batches < max_batches:
        async with sessions() as session, session.begin():
            connection = await session.connection()
            result = await connection.execute(text(DELETE_BATCH), {"cutoff": cutoff, "batch": batch_size})
        count = int(result.rowcount or 0)
        batches += 1
        deleted += count
        if count < batch_size:
            break
    async with sessions() as session, session.begin():
        values = {
            "task": TASK,
            "ran_at": now,
            "items": deleted,
            "details": {"cutoff": cutoff.isoformat(), "batches": batches, "retention_days": retention_days},
        }
        statement = insert(MaintenancePass).values(**values)
        await session.execute(
            statement.on_conflict_do_update(
                index_elements=["task"],
                set_={
                    "ran_at": statement.excluded.ran_at,
                    "items": statement.excluded["items"],
                    "details": statement.excluded.details,
                },
            )
        )
    log.info("retention cleanup", extra={"deleted": deleted, "batches": batches, "cutoff": cutoff.isoformat()})
    return RetentionPass(ran_at=now, deleted=deleted, cutoff=cutoff, batches=batches)


@dataclass(frozen=True)
class RetentionStatus:
    ran_at: datetime
    deleted: int
    cutoff: str | None
    retention_days: int | None


async def last_retention_cleanup(session: AsyncSession) -> RetentionStatus | None:
    """The last ``retention.cleanup`` pass: when it ran and how many runs it deleted (None: never ran)."""
    row = await session.get(MaintenancePass, TASK, populate_existing=True)
    if row is None:
        return None
    return RetentionStatus(
        ran_at=row.ran_at,
        deleted=row.items,
        cutoff=row.details.get("cutoff"),
        retention_days=row.details.get("retention_days"),
    )
