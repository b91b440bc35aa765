"""Tables of runs and their step attempts (seed 000 "Concepts": Run, Step attempt)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, Index, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from engine.platform.tables import tz_column, utcnow


class WorkflowRun(SQLModel, table=True):
    """One execution of one revision for one subject (seed 000 "Concepts": Run).

    ``due_at`` is set while the run has something to do (and NULL once it waits for a person or
    has finished), so the partial index on it stays small at millions of finished runs.
    """

    __tablename__ = "workflow_runs"
    __table_args__ = (
        CheckConstraint(
            "state IN ('pending', 'running', 'waiting', 'awaiting_approval', 'compensating', 'succeeded',"
            " 'failed', 'compensated', 'compensation_failed', 'cancelled')",
            name="state",
        ),
        CheckConstraint("trigger_type IN ('manual', 'event', 'schedule')", name="trigger_type"),
        # A finished run is never due and never leased: the claim can never take it again.
        CheckConstraint(
            "state NOT IN ('succeeded', 'failed', 'compensated', 'compensation_failed', 'cancelled')"
            " OR (due_at IS NULL AND lease_owner IS NULL AND lease_expires_at IS NULL)",
            name="finished_not_due",
        ),
        # The claim reads each realm's due runs in due order (finished and paused runs leave it).
        Index("ix_workflow_runs_realm_due", "realm_id", "due_at", postgresql_where=text("due_at IS NOT NULL")),
        Index("ix_workflow_runs_realm_id_id", "realm_id", "id"),
        Index("ix_workflow_runs_workflow_id_id", "workflow_id", "id"),
        Index("ix_workflow_runs_realm_subject_id", "realm_id", "subject_id", "id"),
        Index("ix_workflow_runs_realm_state_id", "realm_id", "state", "id"),
        # The list's filters by organization and by who started a run by hand (never changed after
        # the insert, so they cost updates nothing).
        Index(
            "ix_workflow_runs_realm_organization_id",
            "realm_id",
            "organization_id",
            "id",
            postgresql_where=text("organization_id IS NOT NULL"),
        ),
        Index(
            "ix_workflow_runs_realm_starter_id",
            "realm_id",
            "starter_id",
            "id",
            postgresql_where=text("starter_id IS NOT NULL"),
        ),
        # The realm home: runs in flight (finished_at IS NULL) and outcomes of the last 24 hours.
        Index("ix_workflow_runs_realm_finished", "realm_id", "finished_at", "state"),
        Index("ix_workflow_runs_lease_owner", "lease_owner", postgresql_where=text("lease_owner IS NOT NULL")),
        Index("uq_workflow_runs_trigger", "workflow_id", "trigger_type", "trigger_key", "subject_id", unique=True),
        # Retention reads the oldest finished runs of every realm; re-runs find what they repeat.
        Index("ix_workflow_runs_finished_at", "finished_at", postgresql_where=text("finished_at IS NOT NULL")),
        Index("ix_workflow_runs_rerun_of", "rerun_of", postgresql_where=text("rerun_of IS NOT NULL")),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    workflow_id: str = Field(foreign_key="workflows.id", max_length=40, ondelete="CASCADE")
    revision: int
    revision_id: str = Field(foreign_key="workflow_revisions.id", max_length=40, ondelete="CASCADE")
    subject_id: str = Field(max_length=40)
    organization_id: str | None = Field(default=None, max_length=40)
    trigger_type: str = Field(max_length=20)
    trigger_key: str = Field(max_length=200)
    input: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False, server_default=text("'{}'::jsonb")))
    input_version: int = Field(default=1)
    publisher_id: str = Field(max_length=40)
    starter_id: str | None = Field(default=None, max_length=40)
    depth: int = Field(default=0)
    parent_run_id: str | None = Field(default=None, max_length=40)
    # What caused the run: the request that started it by hand, or the triggering event's
    # correlation (a run id when another run caused the event) or the event itself.
    correlation_id: str | None = Field(default=None, max_length=100)
    state: str = Field(default="pending", max_length=30)
    step_index: int = Field(default=0)
    context: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False, server_default=text("'{}'::jsonb")))
    error_category: str | None = Field(default=None, max_length=60)
    last_error: str | None = Field(default=None, max_length=2000)
    due_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    lease_owner: str | None = Field(default=None, max_length=200)
    lease_expires_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    cancel_requested_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    cancel_requested_by: str | None = Field(default=None, max_length=40)
    cancel_reason: str | None = Field(default=None, max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    finished_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    # The run this one repeats (POST /workflow-runs/{id}/rerun); NULL once that run is purged.
    rerun_of: str | None = Field(default=None, foreign_key="workflow_runs.id", max_length=40, ondelete="SET NULL")


class StepAttempt(SQLModel, table=True):
    """One attempt of one step (seed 000 "Concepts": Step attempt), with its compensation.

    At most one succeeded attempt per step of a run: the database refuses a second, so an
    internal effect can never be recorded — or applied, since both commit together — twice.
    """

    __tablename__ = "step_attempts"
    __table_args__ = (
        UniqueConstraint("run_id", "step_id", "number"),
        Index(
            "uq_step_attempts_succeeded", "run_id", "step_id", unique=True, postgresql_where=text("state = 'succeeded'")
        ),
        # A run's attempts, and the newest attempts of many runs (a workflow's diagnostics, migration 0014).
        Index("ix_step_attempts_run_id_started_at", "run_id", "started_at"),
        CheckConstraint("state IN ('started', 'succeeded', 'failed')", name="state"),
        CheckConstraint(
            "compensation_strategy IN ('none', 'undo', 'notify_endpoint', 'impossible')", name="compensation_strategy"
        ),
        CheckConstraint(
            "compensation_state IS NULL OR compensation_state IN "
            "('pending', 'done', 'not_needed', 'impossible', 'failed')",
            name="compensation_state",
        ),
    )

    id: str = Field(primary_key=True, max_length=40)
    run_id: str = Field(foreign_key="workflow_runs.id", max_length=40, ondelete="CASCADE")
    realm_id: str = Field(max_length=40)
    step_id: str = Field(max_length=40)
    step_index: int
    step_type: str = Field(max_length=40)
    number: int
    idempotency_key: str = Field(max_length=100)
    state: str = Field(default="started", max_length=20)
    input: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False, server_default=text("'{}'::jsonb")))
    input_version: str = Field(max_length=100)
    result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    error_category: str | None = Field(default=None, max_length=60)
    error_message: str | None = Field(default=None, max_length=2000)
    max_attempts: int = Field(default=1)
    backoff_ms: int = Field(default=0)
    compensation_strategy: str = Field(default="none", max_length=30)
    compensation_state: str | None = Field(default=None, max_length=30)
    compensation_attempts: int = Field(default=0)
    compensation_result: dict[str, Any] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    compensation_error: str | None = Field(default=None, max_length=2000)
    started_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    finished_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    compensated_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class RunResolution(SQLModel, table=True):
    """An administrator's word that what a ``compensation_failed`` run left to undo was undone by hand.

    The run keeps its state (the record of what happened does not change); this row says that
    nobody needs to act on it any more, who said so, when, and how.
    """

    __tablename__ = "run_resolutions"

    run_id: str = Field(primary_key=True, foreign_key="workflow_runs.id", max_length=40, ondelete="CASCADE")
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    resolved_by: str = Field(max_length=40)
    note: str = Field(max_length=2000)
    resolved_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class ScheduleFiring(SQLModel, table=True):
    """One slot of one schedule trigger that fired (seed 000 "Triggers": schedules).

    The unique ``(workflow_id, trigger_index, slot_at)`` is what lets any number of schedulers
    run at once: the first to insert a slot's row fires it, the others find it taken.
    """

    __tablename__ = "workflow_schedule_firings"
    __table_args__ = (UniqueConstraint("workflow_id", "trigger_index", "slot_at"),)

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    workflow_id: str = Field(foreign_key="workflows.id", max_length=40, ondelete="CASCADE")
    trigger_index: int
    revision: int
    slot_at: datetime = Field(sa_column=tz_column())
    fired_at: datetime = Field(sa_column=tz_column())
    selected: int = Field(default=0)
    started: int = Field(default=0)
    truncated: int = Field(default=0)


class MaintenancePass(SQLModel, table=True):
    """The last pass of a housekeeping task (``retention.cleanup``): when, and how much it did."""

    __tablename__ = "maintenance_passes"

    task: str = Field(primary_key=True, max_length=60)
    ran_at: datetime = Field(sa_column=tz_column())
    items: int = Field(default=0)
    details: dict[str, Any] = Field(sa_column=Column(JSONB, nullable=False, server_default=text("'{}'::jsonb")))
