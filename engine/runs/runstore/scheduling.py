"""When a run is due, set from outside the runner, and the workers' wake-up.

Starting runs, cancelling, retrying now, pausing and resuming a workflow's runs, and an approval
decided: each makes runs due (or not) and wakes the workers on ``NOTIFY_CHANNEL`` at commit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String, literal, or_, text, update
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncSession

from engine.runs.models import WorkflowRun
from engine.runs.states import COMPENSATING, FORWARD, RUNNING

NOTIFY_CHANNEL = "cockpit_runs_due"


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


async def retry_now(session: AsyncSession, run_id: str, realm_id: str, *, now: datetime) -> WorkflowRun | None:
    """Make a run that waits for a retry (of a step or a compensation) due now; None when nothing waits (409).

    Waiting for a retry: running or compensating, after a failure, with a later due time, and held
    by no worker (a run being advanced right now is not waiting for anything).
    """
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run_id,
            WorkflowRun.realm_id == realm_id,
            WorkflowRun.state.in_([RUNNING, COMPENSATING]),  # type: ignore[attr-defined]
            WorkflowRun.error_category.is_not(None),  # type: ignore[union-attr]
            WorkflowRun.due_at > now,  # type: ignore[operator]
            or_(WorkflowRun.lease_owner.is_(None), WorkflowRun.lease_expires_at <= now),  # type: ignore[union-attr, operator]
        )
        .values(due_at=now, updated_at=now)
        .returning(WorkflowRun)
    )
    return result.scalar_one_or_none()


async def notify_due(session: AsyncSession) -> None:
    """Wake the workers when this transaction commits (LISTEN/NOTIFY; the 1 s pass is the safety net)."""
    await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})


async def insert_runs(session: AsyncSession, rows: list[dict[str, Any]]) -> set[str]:
    """Insert pending runs (one statement); the ids inserted — a run whose trigger already started
    it (``uq_workflow_runs_trigger``) is left out."""
    if not rows:
        return set()
    inserted = await session.execute(
        insert(WorkflowRun).values(rows).on_conflict_do_nothing().returning(WorkflowRun.id)
    )
    return {str(run_id) for run_id in inserted.scalars()}


# The states a disabled workflow pauses (forward, not compensating).
_PAUSABLE = "('pending', 'running', 'waiting', 'awaiting_approval')"


async def pause_runs(session: AsyncSession, workflow_id: str) -> None:
    """The workflow is disabled: its runs going forward leave the due index, their due time kept.

    Runs asked to cancel go on (they only remove access), and so do compensating runs."""
    await session.execute(
        text(
            "UPDATE workflow_runs SET due_at = NULL, "
            "context = context || jsonb_build_object('paused_due_at', due_at) "
            "WHERE workflow_id = :w AND due_at IS NOT NULL AND cancel_requested_at IS NULL "
            f"AND state IN {_PAUSABLE}"
        ),
        {"w": workflow_id},
    )


async def resume_runs(session: AsyncSession, workflow_id: str) -> None:
    """The workflow is enabled again: paused runs get their kept due time back, and workers wake.

    Only a run still paused — unfinished, not cancelled, not compensating, without a due time of its
    own — gets it; the kept time is dropped everywhere else: a finished run never becomes due again,
    and a compensation waiting for its retry keeps its wait."""
    await session.execute(
        text(
            "UPDATE workflow_runs SET due_at = CASE"
            " WHEN due_at IS NULL AND cancel_requested_at IS NULL"
            f" AND state IN {_PAUSABLE}"
            " THEN COALESCE((context->>'paused_due_at')::timestamptz, now()) ELSE due_at END, "
            "context = context - 'paused_due_at' "
            "WHERE workflow_id = :w AND context->>'paused_due_at' IS NOT NULL"
        ),
        {"w": workflow_id},
    )
    await notify_due(session)


async def make_decided_due(session: AsyncSession, run_id: str, *, now: datetime) -> None:
    """The run's approval was decided: due now, and workers wake. A run paused by its disabled
    workflow keeps its place (its kept due time becomes now) and continues when enabled."""
    await session.execute(
        text(
            "UPDATE workflow_runs SET updated_at = :now,"
            " due_at = CASE WHEN context->>'paused_due_at' IS NULL THEN :now ELSE due_at END,"
            " context = CASE WHEN context->>'paused_due_at' IS NULL THEN context"
            " ELSE jsonb_set(context, '{paused_due_at}', to_jsonb(CAST(:now AS timestamptz))) END"
            " WHERE id = :id AND state = 'awaiting_approval'"
        ),
        {"now": now, "id": run_id},
    )
    await notify_due(session)
