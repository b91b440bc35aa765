"""A run and its attempts as the JSON API answers them (the shapes are
:mod:`engine.runs.read_models`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from msgspec import UNSET, UnsetType

from engine.runs import read_models
from engine.runs.models import StepAttempt, WorkflowRun


def attempt_view(attempt: StepAttempt) -> read_models.StepAttempt:
    return read_models.StepAttempt(
        id=attempt.id,
        step_id=attempt.step_id,
        step_index=attempt.step_index,
        step_type=attempt.step_type,
        number=attempt.number,
        state=attempt.state,
        idempotency_key=attempt.idempotency_key,
        input=attempt.input,
        input_version=attempt.input_version,
        error_category=attempt.error_category,
        error_message=attempt.error_message,
        max_attempts=attempt.max_attempts,
        backoff_ms=attempt.backoff_ms,
        result=attempt.result,
        compensation_strategy=attempt.compensation_strategy,
        compensation_state=attempt.compensation_state,
        started_at=attempt.started_at,
        finished_at=attempt.finished_at,
    )


def compensation_view(attempt: StepAttempt) -> read_models.Compensation:
    return read_models.Compensation(
        attempt_id=attempt.id,
        step_id=attempt.step_id,
        strategy=attempt.compensation_strategy,
        state=attempt.compensation_state,
        attempts=attempt.compensation_attempts,
        result=attempt.compensation_result,
        error=attempt.compensation_error,
        compensated_at=attempt.compensated_at,
    )


def _run_members(run: WorkflowRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "workflow_id": run.workflow_id,
        "revision": run.revision,
        "subject_id": run.subject_id,
        "organization_id": run.organization_id,
        "state": run.state,
        "step_index": run.step_index,
        "error_category": run.error_category,
        "last_error": run.last_error,
        "trigger": read_models.RunTrigger(type=run.trigger_type, key=run.trigger_key),
        "input": run.input,
        "input_version": run.input_version,
        "publisher_id": run.publisher_id,
        "starter_id": run.starter_id,
        "depth": run.depth,
        "parent_run_id": run.parent_run_id,
        "rerun_of": run.rerun_of,
        "correlation_id": run.correlation_id,
        "due_at": run.due_at,
        "cancel_requested_at": run.cancel_requested_at,
        "cancel_requested_by": run.cancel_requested_by,
        "cancel_reason": run.cancel_reason,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
    }


def run_view(run: WorkflowRun) -> read_models.WorkflowRun:
    """A run as lists show it."""
    return read_models.WorkflowRun(**_run_members(run))


def _compensations(attempts: list[StepAttempt]) -> list[read_models.Compensation]:
    """What was undone (or is to be undone): the succeeded attempts of steps that compensate."""
    return [compensation_view(a) for a in attempts if a.state == "succeeded" and a.compensation_strategy != "none"]


def run_with_attempts(
    run: WorkflowRun,
    attempts: list[StepAttempt],
    approvals: list[read_models.Approval],
    *,
    next_attempt_at: datetime | UnsetType | None = UNSET,
) -> read_models.RunWithAttempts:
    """A run with its attempts, what was undone and its approvals (``next_attempt_at`` when given)."""
    return read_models.RunWithAttempts(
        **_run_members(run),
        attempts=[attempt_view(a) for a in attempts],
        compensations=_compensations(attempts),
        approvals=approvals,
        next_attempt_at=next_attempt_at,
    )


def run_timeline(
    run: WorkflowRun,
    attempts: list[StepAttempt],
    approvals: list[read_models.Approval],
    *,
    next_attempt_at: datetime | None,
    reruns: list[str],
) -> read_models.RunTimeline:
    """A run with every attempt, what was undone, its approvals, its re-runs and when it goes on."""
    return read_models.RunTimeline(
        **_run_members(run),
        attempts=[attempt_view(a) for a in attempts],
        compensations=_compensations(attempts),
        approvals=approvals,
        next_attempt_at=next_attempt_at,
        reruns=reruns,
    )
