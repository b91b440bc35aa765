"""Runs, their attempts, previews, approvals and notices as the API answers them and the pages show
them (see :mod:`engine.platform.read_models`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from engine.platform.read_models import Shape


class RunTrigger(Shape):
    type: str
    key: str


class StepAttempt(Shape):
    """``input`` and ``result`` are free-form: what the step type takes and answers."""

    id: str
    step_id: str
    step_index: int
    step_type: str
    number: int
    state: str
    idempotency_key: str
    input: dict[str, Any]
    input_version: str
    error_category: str | None
    error_message: str | None
    max_attempts: int
    backoff_ms: int
    result: dict[str, Any] | None
    compensation_strategy: str
    compensation_state: str | None
    started_at: datetime
    finished_at: datetime | None


class Compensation(Shape):
    attempt_id: str
    step_id: str
    strategy: str
    state: str | None
    attempts: int
    result: dict[str, Any] | None
    error: str | None
    compensated_at: datetime | None


class WorkflowRun(Shape):
    """``input`` is free-form: the run's input (its subject and trigger data)."""

    id: str
    workflow_id: str
    revision: int
    subject_id: str
    organization_id: str | None
    state: str
    step_index: int
    error_category: str | None
    last_error: str | None
    trigger: RunTrigger
    input: dict[str, Any]
    input_version: int
    publisher_id: str
    starter_id: str | None
    depth: int
    parent_run_id: str | None
    rerun_of: str | None
    correlation_id: str | None
    due_at: datetime | None
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class WorkflowRunPage(Shape):
    items: list[WorkflowRun]
    next_cursor: str | None


class RunWithAttempts(WorkflowRun):
    """A run with its attempts, what was undone, and its approvals.

    ``next_attempt_at`` is in the answer to retry-now only.
    """

    attempts: list[StepAttempt]
    compensations: list[Compensation]
    approvals: list[Approval]
    next_attempt_at: datetime | UnsetType | None = UNSET


class PreviewRefusal(Shape):
    """The refusal a step would meet now: its error category, its message, and whether it is final."""

    category: str
    message: str
    permanent: bool


class PreviewAuditEvent(Shape):
    type: str
    details: dict[str, Any]


class PreviewEffect(Shape):
    """What a step would write, as data: ``kind`` names the effect, ``values`` its rows."""

    kind: str
    values: dict[str, Any]
    result: dict[str, Any]
    audit: list[PreviewAuditEvent]
    ends_run: bool


class PreviewStep(Shape):
    """``outcome``: would_succeed (``effect``), would_fail (``refusal``) or not_reached."""

    index: int
    step_id: str
    type: str
    outcome: str
    summary: str
    effect: PreviewEffect | None
    refusal: PreviewRefusal | None


class RunPreview(Shape):
    """What a run would do, step by step, judged now; nothing is written."""

    workflow_id: str
    revision: int
    subject_id: str
    organization_id: str | None
    publisher_id: str
    outcome: str
    steps: list[PreviewStep]


class ApprovalDelegation(Shape):
    from_: str = msgspec.field(name="from")
    to: str
    at: str


class Approval(Shape):
    """``request`` is what a role-assignment approval would grant (null for an approval step)."""

    id: str
    kind: str
    request: dict[str, Any] | None
    run_id: str | None
    workflow_id: str | None
    step_id: str | None
    subject_id: str
    status: str
    approvers: list[str]
    reminder_at: datetime | None
    reminded_at: datetime | None
    expires_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    comment: str | None
    delegations: list[ApprovalDelegation]
    created_at: datetime


class ApprovalPage(Shape):
    items: list[Approval]
    next_cursor: str | None


class RunTimeline(WorkflowRun):
    """A run with every attempt, what was undone, its approvals, its re-runs and when it goes on."""

    attempts: list[StepAttempt]
    compensations: list[Compensation]
    approvals: list[Approval]
    next_attempt_at: datetime | None
    reruns: list[str]


class PendingRoleAssignment(Shape):
    """A role that requires approval: nothing is assigned until the approver approves."""

    status: str
    approval: Approval


class BulkResult(Shape):
    """``done`` (with ``new_run_id`` for a re-run), or ``refused`` with the problem's ``code``,
    ``status_code`` and ``detail``."""

    run_id: str
    status: str
    new_run_id: str | UnsetType = UNSET
    code: str | UnsetType = UNSET
    status_code: int | UnsetType = UNSET
    detail: str | UnsetType = UNSET


class BulkOutcome(Shape):
    action: str
    matched: int
    capped: bool
    done: int
    refused: int
    results: list[BulkResult]


class Notice(Shape):
    id: str
    run_id: str | None
    approval_id: str | None
    workflow_id: str | None
    user_id: str
    notice: str
    to: str | None
    subject: str
    state: str
    attempts: int
    created_at: datetime
    sent_at: datetime | None
    next_attempt_at: datetime | None
    last_error: str | None


class NoticePage(Shape):
    items: list[Notice]
    next_cursor: str | None


# --- Diagnostics ----------------------------------------------------------------------------------


class Window(Shape):
    runs: int
    attempts: int
    max_runs: int
    max_attempts: int


class AttemptCounts(Shape):
    """``failed``: operational failures; ``rejected``: approval attempts an approver said no to
    (a decision, never counted as failed)."""

    total: int
    failed: int
    succeeded: int
    started: int
    rejected: int = 0


class AttemptLine(Shape):
    id: str
    run_id: str
    step_id: str
    step_type: str
    number: int
    state: str
    error_category: str | None
    started_at: str
    finished_at: str | None


class Durations(Shape):
    count: int
    p50: float | None
    p95: float | None


class DueRun(Shape):
    id: str
    state: str
    due_at: str | None


class WorkflowDiagnostics(Shape):
    """A workflow at a glance, from its last 500 runs and their last 1,000 attempts.

    Never inputs, results, error messages or subjects. ``health``: ``unknown`` (no attempt in the
    window), ``healthy``, ``degraded`` (more than 10 % of the attempts failed; an approver's
    rejection is a decision, counted in ``attempts.rejected``, never as failed) or
    ``attention_required`` (a compensation failed and nobody marked the run resolved).
    """

    workflow_id: str
    generated_at: str
    window: Window
    health: str
    health_reason: str
    runs_by_state: dict[str, int]
    step_failure_categories: dict[str, dict[str, int]]
    attempts: AttemptCounts
    recent_attempts: list[AttemptLine]
    recent_failures: list[AttemptLine]
    run_duration_ms: Durations
    pending_approvals: int
    oldest_due_run: DueRun | None
    compensation_failures: int
    unresolved_compensation_failures: list[str]
    runs_rejected: int = 0  # runs of the window that ended because an approver said no


class Resolution(Shape):
    run_id: str
    resolved_by: str
    resolved_at: str
    note: str


class LeftToUndoLine(Shape):
    attempt_id: str
    step_id: str
    step_type: str
    strategy: str
    compensation_state: str
    compensation_attempts: int
    last_error: str | None


class ResolutionLine(Shape):
    resolved_by: str | None
    resolved_at: str
    note: str | None


class AttentionLine(Shape):
    run_id: str
    workflow_id: str
    subject_id: str
    error_category: str | None
    finished_at: str | None
    left_to_undo: list[LeftToUndoLine]
    resolution: ResolutionLine | None


class AttentionPage(Shape):
    items: list[AttentionLine]
    next_cursor: str | None
