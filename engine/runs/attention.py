"""Runs that need a person: those that ended ``compensation_failed``, what each left to undo, and
marking one resolved once it was undone by hand (audited; the run keeps its state).

A workflow's health counts such a run until it is marked resolved (engine/runs/diagnostics.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor, record_audit
from engine.platform.errors import Conflict, Issue, NotFound, ValidationFailed
from engine.runs import read_models
from engine.runs import states as st
from engine.runs.models import RunResolution, WorkflowRun


@dataclass(frozen=True)
class LeftToUndo:
    """A step whose effect a failed compensation left in place."""

    attempt_id: str
    step_id: str
    step_type: str
    strategy: str
    compensation_state: str
    compensation_attempts: int
    last_error: str | None


@dataclass
class AttentionRun:
    id: str
    workflow_id: str
    workflow_name: str | None
    subject_id: str
    subject_email: str | None
    error_category: str | None
    finished_at: datetime | None
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    resolved_by_email: str | None = None
    note: str | None = None
    left: list[LeftToUndo] = field(default_factory=list)


ATTENTION_PAGE = 50
ATTENTION_FILTERS = ("open", "resolved", "all")

_ATTENTION_SQL = text(
    """
    SELECT r.id, r.workflow_id, w.name, r.subject_id, u.email, r.error_category, r.finished_at,
           res.resolved_at, res.resolved_by, ru.email, res.note
      FROM workflow_runs r
      LEFT JOIN workflows w ON w.id = r.workflow_id AND w.realm_id = r.realm_id
      LEFT JOIN users u ON u.id = r.subject_id AND u.realm_id = r.realm_id
      LEFT JOIN run_resolutions res ON res.run_id = r.id
      LEFT JOIN users ru ON ru.id = res.resolved_by AND ru.realm_id = r.realm_id
     WHERE r.realm_id = :r AND r.state = 'compensation_failed'
       AND (CAST(:cursor AS text) IS NULL OR r.id < :cursor)
       AND (:show = 'all' OR (:show = 'open') = (res.run_id IS NULL))
     ORDER BY r.id DESC
     LIMIT :limit
    """
)

_LEFT_SQL = text(
    """
    SELECT a.run_id, a.id, a.step_id, a.step_type, a.compensation_strategy, a.compensation_state,
           a.compensation_attempts, a.compensation_error
      FROM step_attempts a
     WHERE a.run_id = ANY(:ids) AND a.realm_id = :r AND a.state = 'succeeded'
       AND a.compensation_state IN ('pending', 'failed')
     ORDER BY a.run_id, a.step_index DESC
    """
)


async def needs_attention(
    session: AsyncSession, realm_id: str, *, show: str = "open", cursor: str | None = None, limit: int = ATTENTION_PAGE
) -> tuple[list[AttentionRun], str | None]:
    """Runs of the realm that ended ``compensation_failed``, newest first, with what is left to undo.

    ``show``: ``open`` (not marked resolved), ``resolved`` or ``all``. Two statements per page.
    """
    if show not in ATTENTION_FILTERS:
        raise ValidationFailed(
            "The request is not valid.", issues=[Issue("query:show", "invalid", "must be open, resolved or all")]
        )
    rows = (
        await session.execute(_ATTENTION_SQL, {"r": realm_id, "cursor": cursor, "show": show, "limit": limit + 1})
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    runs = [
        AttentionRun(
            id=row[0],
            workflow_id=row[1],
            workflow_name=row[2],
            subject_id=row[3],
            subject_email=row[4],
            error_category=row[5],
            finished_at=row[6],
            resolved_at=row[7],
            resolved_by=row[8],
            resolved_by_email=row[9],
            note=row[10],
        )
        for row in rows
    ]
    if runs:
        by_id = {r.id: r for r in runs}
        for row in await session.execute(_LEFT_SQL, {"ids": list(by_id), "r": realm_id}):
            by_id[row[0]].left.append(LeftToUndo(*row[1:]))
    return runs, (runs[-1].id if more and runs else None)


MAX_NOTE = 2000


async def resolve_run(session: AsyncSession, actor: Actor, run_id: str, *, note: str) -> RunResolution:
    """Mark a ``compensation_failed`` run resolved: what it left was undone by hand (audited).

    The run keeps its state. 404 for an unknown run or another realm's; 409 when the run did not
    end ``compensation_failed`` or is resolved already; 422 without a note.
    """
    stripped = (note or "").strip()
    if not stripped:
        raise ValidationFailed(
            "The request is not valid.", issues=[Issue("/note", "too_short", "say what was done by hand")]
        )
    if len(note) > MAX_NOTE:
        raise ValidationFailed(
            "The request is not valid.", issues=[Issue("/note", "too_long", f"must be at most {MAX_NOTE} characters")]
        )
    run = await session.get(WorkflowRun, run_id, with_for_update=True)
    if run is None or run.realm_id != actor.realm_id:
        raise NotFound("No such run.")
    if run.state != st.COMPENSATION_FAILED:
        raise Conflict("Only a run whose compensation failed can be marked resolved.", code="not_compensation_failed")
    if await session.get(RunResolution, run_id) is not None:
        raise Conflict("The run is marked resolved already.", code="already_resolved")
    assert actor.id is not None
    resolution = RunResolution(run_id=run.id, realm_id=run.realm_id, resolved_by=actor.id, note=stripped)
    session.add(resolution)
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.run.resolved",
        category="workflow",
        subject_type="workflow_run",
        subject_id=run.id,
        details={"workflow_id": run.workflow_id, "note": stripped},
    )
    return resolution


def resolution_view(resolution: RunResolution) -> read_models.Resolution:
    return read_models.Resolution(
        run_id=resolution.run_id,
        resolved_by=resolution.resolved_by,
        resolved_at=resolution.resolved_at.isoformat(),
        note=resolution.note,
    )


def attention_view(run: AttentionRun) -> read_models.AttentionLine:
    """A run that needs a person, as the API answers it."""
    return read_models.AttentionLine(
        run_id=run.id,
        workflow_id=run.workflow_id,
        subject_id=run.subject_id,
        error_category=run.error_category,
        finished_at=run.finished_at.isoformat() if run.finished_at else None,
        left_to_undo=[
            read_models.LeftToUndoLine(
                attempt_id=left.attempt_id,
                step_id=left.step_id,
                step_type=left.step_type,
                strategy=left.strategy,
                compensation_state=left.compensation_state,
                compensation_attempts=left.compensation_attempts,
                last_error=left.last_error,
            )
            for left in run.left
        ],
        resolution=None
        if run.resolved_at is None
        else read_models.ResolutionLine(
            resolved_by=run.resolved_by, resolved_at=run.resolved_at.isoformat(), note=run.note
        ),
    )
