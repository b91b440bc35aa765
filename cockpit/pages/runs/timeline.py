"""What a run's timeline shows: every step of its revision with its attempts, and what is undone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cockpit.pages.runs.shared import human_duration
from engine.runs import run_reads
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_STARTED,
    ATTEMPT_SUCCEEDED,
    AWAITING_APPROVAL,
    CANCELLED,
    COMPENSATED,
    COMPENSATING,
    COMPENSATION_FAILED,
    FAILED,
    FINISHED,
    PENDING,
    RUNNING,
    WAITING,
)
from engine.workflows.models import Workflow

# A run in one of these states has entered (or finished) undoing what it did.
COMPENSATION_PHASE = frozenset({COMPENSATING, FAILED, COMPENSATED, COMPENSATION_FAILED, CANCELLED})


def retry_waiting(run: WorkflowRun) -> bool:
    """A run that waits for a retry of a step or a compensation (what "retry now" acts on)."""
    return (
        run.state in (RUNNING, COMPENSATING)
        and run.error_category is not None
        and run_reads.next_attempt_at(run) is not None
        and run.lease_owner is None
    )


def paused(run: WorkflowRun, workflow: Workflow) -> bool:
    """A run the runner leaves where it is: going forward on a disabled workflow, not being cancelled."""
    return (
        workflow.state == "disabled"
        and run.state not in FINISHED
        and run.state != COMPENSATING
        and run.cancel_requested_at is None
    )


def cancellable(run: WorkflowRun) -> bool:
    return run.state not in FINISHED and run.state != COMPENSATING and run.cancel_requested_at is None


@dataclass(frozen=True)
class AttemptLine:
    attempt: StepAttempt
    duration: str | None


@dataclass
class StepLine:
    index: int
    id: str
    type: str
    status: str
    attempts: list[AttemptLine] = field(default_factory=list)
    current: bool = False
    next_attempt_at: datetime | None = None
    note: str | None = None
    error_category: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class CompensationLine:
    attempt: StepAttempt
    when: datetime | None


def step_lines(run: WorkflowRun, steps: Sequence[dict[str, Any]], attempts: Sequence[StepAttempt]) -> list[StepLine]:
    """Every step of the definition in order, with its attempts and where the run stands."""
    by_step: dict[str, list[StepAttempt]] = {}
    for attempt in attempts:
        by_step.setdefault(attempt.step_id, []).append(attempt)
    finished = run.state in FINISHED
    retry_at = run_reads.next_attempt_at(run)
    lines: list[StepLine] = []
    for index, step in enumerate(steps):
        step_id = str(step.get("id", f"step-{index}"))
        own = sorted(by_step.get(step_id, []), key=lambda a: a.number)
        current = not finished and run.state != COMPENSATING and index == run.step_index
        line = StepLine(
            index=index,
            id=step_id,
            type=str(step.get("type", "")),
            status="not reached",
            attempts=[AttemptLine(a, human_duration(a.started_at, a.finished_at)) for a in own],
            current=current,
        )
        last = own[-1] if own else None
        if any(a.state == ATTEMPT_SUCCEEDED for a in own):
            line.status = "succeeded"
        elif last is not None and last.state == ATTEMPT_STARTED:
            line.status = "in progress"
        elif last is not None and last.state == ATTEMPT_FAILED:
            if current and run.state == RUNNING and retry_at is not None:
                line.status = "retrying"
                line.next_attempt_at = retry_at
            elif current and run.state in (PENDING, RUNNING):
                line.status = "retrying"
                line.note = "The next attempt is due now."
            else:
                line.status = "failed"
                line.error_category, line.error = last.error_category, last.error_message
        elif current:
            if run.state == WAITING:
                line.status = "waiting"
                line.next_attempt_at = retry_at
            elif run.state == AWAITING_APPROVAL:
                line.status = "awaiting approval"
            else:
                line.status = "up next"
        if index == run.step_index and line.status == "not reached":
            # Where a run that stopped short stopped: a cancellation stops before this step; a
            # failure that left no attempt of it (its definition or authority gone) failed here.
            if run.cancel_requested_at is not None:
                line.status = "cancelled"
                line.note = "The run was cancelled before this step."
            elif run.state in (FAILED, COMPENSATING, COMPENSATED, COMPENSATION_FAILED) and run.error_category:
                line.status = "failed"
                line.error_category, line.error = run.error_category, run.last_error
        lines.append(line)
    return lines


def compensation_lines(attempts: Sequence[StepAttempt]) -> list[CompensationLine]:
    """Succeeded steps that have something to compensate, newest first (the order they are undone in)."""
    chosen = [a for a in attempts if a.state == ATTEMPT_SUCCEEDED and a.compensation_strategy != "none"]
    chosen.sort(key=lambda a: (a.step_index, a.number), reverse=True)
    return [CompensationLine(a, a.compensated_at) for a in chosen]
