"""A held run's transitions and its step attempts.

Every verb that changes a run checks, in its WHERE clause, that this worker still holds the run's
lease (engine/runs/runstore/leases.py), so a worker that lost its lease cannot commit anything.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_STARTED,
    ATTEMPT_SUCCEEDED,
    COMP_PENDING,
    FINISHED,
    TransitionRefused,
    allowed_from,
)


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
    """A later due time without a state change (a retry or a compensation waiting), lease held."""
    result = await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.id == run.id, WorkflowRun.lease_owner == worker_id)
        .values(due_at=due_at, updated_at=now)
        .returning(WorkflowRun.id)
    )
    if result.scalar_one_or_none() is None:
        raise TransitionRefused(f"run {run.id} is not held by {worker_id}")
    run.due_at = due_at
    run.updated_at = now


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


async def lock_attempt(session: AsyncSession, attempt_id: str) -> StepAttempt | None:
    """An attempt, locked and read afresh (its endpoint call's outcome is about to be recorded)."""
    rows = await session.execute(
        select(StepAttempt)
        .where(StepAttempt.id == attempt_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return rows.scalar_one_or_none()


async def interrupt_started_attempts(session: AsyncSession, run_id: str, now: datetime) -> int:
    """Close every attempt of the run still ``started`` (a call whose outcome was never recorded)."""
    result = await session.execute(
        update(StepAttempt)
        .where(StepAttempt.run_id == run_id, StepAttempt.state == ATTEMPT_STARTED)  # type: ignore[arg-type]
        .values(
            state=ATTEMPT_FAILED,
            error_category="interrupted",
            error_message="The worker stopped between the endpoint call and its outcome.",
            finished_at=now,
        )
        .returning(StepAttempt.id)
    )
    return len(result.scalars().all())


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
