"""Reading runs: one run (with its workflow, steps and re-runs), its attempts, and lists with filters.

The lists' filters (``RunFilter``) serve the API, the pages and the bulk actions alike
(engine/runs/controls.py selects runs with ``_runs_query``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnClause
from sqlmodel import col

from engine.directory.models import User
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Issue, NotFound, ValidationFailed
from engine.platform.ids import id_floor
from engine.platform.pagination import Page, keyset_page
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.outcome import DECISION_CATEGORIES
from engine.runs.states import FINISHED, RUN_STATES
from engine.workflows.models import Workflow, WorkflowRevision


async def get_run(session: AsyncSession, realm_id: str, run_id: str) -> WorkflowRun:
    run = await session.get(WorkflowRun, run_id, populate_existing=True)
    if run is None or run.realm_id != realm_id:
        raise NotFound("No such run.")
    return run


async def run_attempts(session: AsyncSession, run_id: str) -> list[StepAttempt]:
    rows = await session.execute(
        select(StepAttempt).where(StepAttempt.run_id == run_id).order_by(StepAttempt.step_index, StepAttempt.number)  # type: ignore[arg-type]
    )
    return list(rows.scalars())


# State groups a list can filter by, besides one state.
STATE_GROUPS: dict[str, frozenset[str]] = {
    "failed_any": frozenset({"failed", "compensated", "compensation_failed"}),
    "in_flight": frozenset(RUN_STATES) - FINISHED,
    "finished": FINISHED,
    # Ended because an approver said no (a decision, engine/runs/outcome.py), whatever was undone.
    "rejected": FINISHED,
}
TRIGGER_TYPES = ("manual", "event", "schedule")


@dataclass(frozen=True)
class RunFilter:
    """What a run list (or a bulk action) selects; every part optional."""

    workflow_id: str | None = None
    state: str | None = None
    state_group: str | None = None
    subject_id: str | None = None
    trigger_type: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    organization_id: str | None = None
    starter_id: str | None = None

    def issues(self, prefix: str = "query:") -> list[Issue]:
        out: list[Issue] = []
        if self.state and self.state not in RUN_STATES:
            out.append(Issue(f"{prefix}state", "invalid", "state is one of " + ", ".join(RUN_STATES)))
        if self.state_group and self.state_group not in STATE_GROUPS:
            out.append(Issue(f"{prefix}state_group", "invalid", "state_group is one of " + ", ".join(STATE_GROUPS)))
        if self.trigger_type and self.trigger_type not in TRIGGER_TYPES:
            out.append(Issue(f"{prefix}trigger_type", "invalid", "trigger_type is one of " + ", ".join(TRIGGER_TYPES)))
        if self.created_after and self.created_before and self.created_after >= self.created_before:
            out.append(Issue(f"{prefix}created_before", "invalid", "created_before must be later than created_after"))
        return out


def _runs_query(
    realm_id: str,
    *,
    workflow_id: str | None,
    state: str | None,
    subject_id: str | None,
    where: RunFilter | None = None,
) -> Select[Any]:
    """The runs of a realm with the list's filters (served by the ``(realm_id, …, id)`` indexes).

    A time range becomes an id range (ids sort by creation time), so it narrows the same index scan.
    """
    where = where or RunFilter()
    issues = RunFilter(
        state=state,
        state_group=where.state_group,
        trigger_type=where.trigger_type,
        created_after=where.created_after,
        created_before=where.created_before,
    ).issues()
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    query = select(WorkflowRun).where(WorkflowRun.realm_id == realm_id)
    if workflow_id:
        query = query.where(WorkflowRun.workflow_id == workflow_id)
    if state:
        query = query.where(WorkflowRun.state == state)
    if where.state_group:
        query = query.where(col(WorkflowRun.state).in_(sorted(STATE_GROUPS[where.state_group])))
        if where.state_group == "rejected":
            query = query.where(col(WorkflowRun.error_category).in_(sorted(DECISION_CATEGORIES)))
    if subject_id:
        query = query.where(WorkflowRun.subject_id == subject_id)
    if where.trigger_type:
        query = query.where(WorkflowRun.trigger_type == where.trigger_type)
    if where.organization_id:
        query = query.where(WorkflowRun.organization_id == where.organization_id)
    if where.starter_id:
        query = query.where(WorkflowRun.starter_id == where.starter_id)
    if where.created_after:
        query = query.where(col(WorkflowRun.id) >= id_floor("wrn", int(where.created_after.timestamp() * 1000)))
    if where.created_before:
        query = query.where(col(WorkflowRun.id) < id_floor("wrn", int(where.created_before.timestamp() * 1000)))
    return query


async def list_runs(
    session: AsyncSession,
    realm_id: str,
    *,
    workflow_id: str | None = None,
    state: str | None = None,
    subject_id: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
    where: RunFilter | None = None,
) -> Page[WorkflowRun]:
    """Newest first, keyset pages."""
    query = _runs_query(realm_id, workflow_id=workflow_id, state=state, subject_id=subject_id, where=where)
    return await keyset_page(session, query, WorkflowRun.id, cursor=cursor, limit=limit, descending=True)


@dataclass(frozen=True)
class RunLine:
    """A run as the cockpit lists it: with its workflow's name, its subject's email and its current step."""

    run: WorkflowRun
    workflow_name: str
    subject: str
    current_step: str | None
    subject_name: str | None = None  # the subject's display name (None: no longer in the directory)


async def list_run_lines(
    session: AsyncSession,
    realm_id: str,
    *,
    workflow_id: str | None = None,
    state: str | None = None,
    subject_id: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
    where: RunFilter | None = None,
) -> Page[RunLine]:
    """One page of :func:`list_runs` with what a list shows beside each run, in two queries.

    The runs come with their workflow's name and their subject's email; the steps of the
    revisions they are pinned to are read once per revision (a page of runs names a few), not
    once per run: a definition is a TOASTed document, and reading it for every row of the page
    cost more than the rest of the query.
    """
    query = (
        _runs_query(realm_id, workflow_id=workflow_id, state=state, subject_id=subject_id, where=where)
        .add_columns(
            func.coalesce(Workflow.name, WorkflowRun.workflow_id),
            func.coalesce(User.email, WorkflowRun.subject_id),
            User.display_name,
        )
        .outerjoin(Workflow, (Workflow.id == WorkflowRun.workflow_id) & (Workflow.realm_id == WorkflowRun.realm_id))
        .outerjoin(User, (User.id == WorkflowRun.subject_id) & (User.realm_id == WorkflowRun.realm_id))
    )
    page = await keyset_page(session, query, WorkflowRun.id, cursor=cursor, limit=limit, descending=True)
    revision_ids = sorted({run.revision_id for run, _name, _subject, _display in page.items})
    steps: dict[str, list[dict[str, Any]]] = {}
    if revision_ids:
        rows = await session.execute(
            select(WorkflowRevision.id, WorkflowRevision.definition["steps"]).where(
                WorkflowRevision.realm_id == realm_id,
                col(WorkflowRevision.id).in_(revision_ids),
            )
        )
        steps = {rid: _steps_of(found) for rid, found in rows}
    lines = []
    for run, name, subject, display in page.items:
        definition = steps.get(run.revision_id, [])
        current = str(definition[run.step_index].get("id")) if 0 <= run.step_index < len(definition) else None
        lines.append(RunLine(run, name, subject, current, display))
    return Page(items=lines, next_cursor=page.next_cursor)


def _steps_of(steps: Any) -> list[dict[str, Any]]:
    """The steps of a definition that are objects, in order (what the pages show)."""
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []


@dataclass(frozen=True)
class RunContext:
    """A run with its workflow and the steps of the revision it is pinned to."""

    run: WorkflowRun
    workflow: Workflow
    steps: list[dict[str, Any]]
    reruns: list[str]  # the runs that repeat this one, oldest first


# Read with the run in the same query (``ix_workflow_runs_rerun_of``): the timeline links both ways.
_RERUNS: ColumnClause[Any] = literal_column(
    "ARRAY(SELECT again.id FROM workflow_runs again WHERE again.rerun_of = workflow_runs.id"
    " AND again.realm_id = workflow_runs.realm_id ORDER BY again.id)"
)


async def get_run_context(session: AsyncSession, realm_id: str, run_id: str) -> RunContext:
    """The run, its workflow, its revision's steps and its re-runs in one query (404 for either missing)."""
    row = (
        await session.execute(
            select(WorkflowRun, Workflow, WorkflowRevision.definition["steps"], _RERUNS)
            .outerjoin(Workflow, (Workflow.id == WorkflowRun.workflow_id) & (Workflow.realm_id == WorkflowRun.realm_id))
            .outerjoin(
                WorkflowRevision,
                (WorkflowRevision.workflow_id == WorkflowRun.workflow_id)
                & (WorkflowRevision.realm_id == WorkflowRun.realm_id)
                & (WorkflowRevision.number == WorkflowRun.revision),
            )
            .where(WorkflowRun.id == run_id, WorkflowRun.realm_id == realm_id)
            .execution_options(populate_existing=True)
        )
    ).first()
    if row is None:
        raise NotFound("No such run.")
    run, workflow, steps, reruns = row
    if workflow is None:
        raise NotFound("No such workflow.")
    return RunContext(run=run, workflow=workflow, steps=_steps_of(steps), reruns=list(reruns or []))


async def reruns_of(session: AsyncSession, realm_id: str, run_id: str) -> list[str]:
    """The runs that repeat this one, oldest first (``ix_workflow_runs_rerun_of``)."""
    rows = await session.execute(
        select(WorkflowRun.id)
        .where(WorkflowRun.rerun_of == run_id, WorkflowRun.realm_id == realm_id)
        .order_by(WorkflowRun.id)
    )
    return list(rows.scalars())


def next_attempt_at(run: WorkflowRun) -> datetime | None:
    """When a run waiting for a retry (or a compensation retry) goes on.

    A run awaiting an approval is due at the approval's reminder or expiry, which is no attempt:
    those are the approval's own ``reminder_at`` and ``expires_at``.
    """
    if run.state in FINISHED or run.state == "awaiting_approval" or run.due_at is None:
        return None
    return run.due_at if run.due_at > SYSTEM_CLOCK.now() else None
