"""Diagnostics of a workflow (seed 000 "Diagnostics") and the realm's runs that need a person.

The list of those runs, and marking one resolved: engine/runs/attention.py.

A workflow's diagnostics summarize its **last 500 runs** and the **last 1,000 attempts** of those
runs — never their inputs, results, error messages or subjects: states, step ids, error
categories, times and run ids only. Three statements whatever the size of the tables, sent to
asyncpg directly when the request only reads: the workflow with its pending approvals, the
newest 500 runs (with their resolutions), then their newest 1,000 attempts through
``ix_step_attempts_run_id_started_at`` — the index alone finds the 1,000th newest start, so only
the attempts from then on are read from the table. Everything else is computed here.

Health (checked in this order):

- ``attention_required``: a run of the window ended ``compensation_failed`` and nobody has marked
  it resolved — an administrator must finish undoing it by hand;
- ``unknown``: the window holds no attempt (no data to judge);
- ``degraded``: more than 10 % of the window's attempts failed (10 % exactly is healthy);
- ``healthy`` otherwise.

An approver's rejection fails its approval attempt, but it is a **decision**, not an operational
failure (engine/runs/outcome.py ``DECISION_CATEGORIES``): it counts among the attempts and never
among the failed ones, and the figures and charts show decisions as their own series. Seed 000
says "more than 10 % of attempts failed"; counting a "no" as a failure would mark a workflow
degraded because its approvers do their job (docs/architecture.md "Workflow health").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.endpoints.deliveries import count_failing_deliveries
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.db import fetch_hot, positional
from engine.platform.errors import NotFound
from engine.runs import read_models
from engine.runs import states as st
from engine.runs.approval_views import count_pending_approvals
from engine.runs.outcome import DECISION_CATEGORIES, is_decision

RUN_WINDOW = 500
ATTEMPT_WINDOW = 1000
RECENT = 20
DEGRADED_SHARE = 0.10  # more than this share of failed attempts: degraded

HEALTH_STATES = ("unknown", "healthy", "degraded", "attention_required")
HEALTH_LABELS = {
    "unknown": "No data",
    "healthy": "Healthy",
    "degraded": "Degraded",
    "attention_required": "Attention required",
}
# Runs that ended without doing their work (the counter cockpit_jobs_failed_total counts them too).
FAILED_OUTCOMES = (st.FAILED, st.COMPENSATED, st.COMPENSATION_FAILED)
DUE_STATES = (st.PENDING, st.RUNNING, st.COMPENSATING)


@dataclass(frozen=True)
class Health:
    status: str
    reason: str
    # attention_required: the runs an administrator must finish by hand, newest first.
    runs: tuple[str, ...] = ()


def classify_health(
    *,
    attempts: int,
    failed_attempts: int,
    open_compensation_failures: int,
    open_run_ids: list[str] | None = None,
    decisions: int = 0,
) -> Health:
    """The health rule of seed 000, with the reason in words.

    ``failed_attempts`` are operational failures only; ``decisions`` (approvers' rejections,
    counted among ``attempts``) are named in the reason and never degrade.
    """
    if open_compensation_failures > 0:
        n = open_compensation_failures
        them = "them" if n > 1 else "it"
        runs = list(open_run_ids or [])
        see = ""
        if runs:
            shown = ", ".join(runs[:3])
            more = f" and {len(runs) - 3} more" if len(runs) > 3 else ""
            see = f" — see run{'s' if len(runs) > 1 else ''} {shown}{more}"
        noun = "compensations" if n > 1 else "compensation"
        return Health(
            "attention_required",
            f"{n} {noun} failed: an administrator must finish undoing {them}{see}",
            tuple(runs),
        )
    if attempts <= 0:
        return Health("unknown", f"No step attempts in the last {RUN_WINDOW} runs yet: nothing to judge.")
    share = failed_attempts / attempts
    figure = f"{failed_attempts} of {attempts} attempts failed ({share * 100:.1f} %)"
    if decisions:
        figure += f"; {decisions} rejected by an approver (a decision, not a failure)"
    if failed_attempts * 10 > attempts:  # more than 10 %, in integers: no rounding at the boundary
        return Health("degraded", f"{figure}, more than 10 %.")
    return Health("healthy", f"{figure}, at most 10 %.")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


class RunRow(NamedTuple):  # a tuple: 500 of them are made per request
    id: str
    state: str
    created_at: datetime
    finished_at: datetime | None
    due_at: datetime | None
    error_category: str | None
    resolved: bool

    @property
    def duration_ms(self) -> float | None:
        if self.finished_at is None:
            return None
        return max(0.0, (self.finished_at - self.created_at).total_seconds() * 1000)


class AttemptRow(NamedTuple):  # a tuple: 1,000 of them are made per request
    id: str
    run_id: str
    step_id: str
    step_index: int
    step_type: str
    number: int
    state: str
    error_category: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass
class Diagnostics:
    workflow_id: str
    workflow_name: str
    generated_at: datetime
    runs: list[RunRow]
    attempts: list[AttemptRow]
    pending_approvals: int
    health: Health = field(init=False)
    open_compensation_failures: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.open_compensation_failures = [
            r.id for r in self.runs if r.state == st.COMPENSATION_FAILED and not r.resolved
        ]
        self.health = classify_health(
            attempts=len(self.attempts),
            failed_attempts=self.failed_attempts,
            open_compensation_failures=len(self.open_compensation_failures),
            open_run_ids=self.open_compensation_failures,
            decisions=self.decided_attempts,
        )

    @property
    def failed_attempts(self) -> int:
        """Attempts that failed operationally (an approver's rejection is a decision, not one)."""
        return sum(1 for a in self.attempts if a.state == st.ATTEMPT_FAILED and not is_decision(a.error_category))

    @property
    def decided_attempts(self) -> int:
        """Approval attempts an approver ended with a no."""
        return sum(1 for a in self.attempts if a.state == st.ATTEMPT_FAILED and is_decision(a.error_category))

    def rejected_runs(self) -> int:
        return sum(1 for r in self.runs if is_decision(r.error_category))

    def runs_by_state(self) -> dict[str, int]:
        counts = Counter(r.state for r in self.runs)
        return {state: counts.get(state, 0) for state in st.RUN_STATES}

    def step_failure_categories(self) -> dict[str, dict[str, int]]:
        """Per step id, how many failed attempts had each error category."""
        out: dict[str, Counter[str]] = {}
        for a in self.attempts:
            if a.state == st.ATTEMPT_FAILED and not is_decision(a.error_category):
                out.setdefault(a.step_id, Counter())[a.error_category or "error"] += 1
        return {step: dict(counts.most_common()) for step, counts in sorted(out.items())}

    def durations_ms(self) -> list[float]:
        return [d for d in (r.duration_ms for r in self.runs) if d is not None]

    def oldest_due_run(self) -> RunRow | None:
        due = [r for r in self.runs if r.due_at is not None and r.state in DUE_STATES]
        return min(due, key=lambda r: (r.due_at, r.id)) if due else None

    def recent_failures(self) -> list[AttemptRow]:
        return [a for a in self.attempts if a.state == st.ATTEMPT_FAILED and not is_decision(a.error_category)][:RECENT]

    def compensation_failures(self) -> int:
        return sum(1 for r in self.runs if r.state == st.COMPENSATION_FAILED)

    def view(self) -> read_models.WorkflowDiagnostics:
        """The answer of ``GET /workflows/{id}/diagnostics`` (docs/api.md "Diagnostics")."""
        durations = self.durations_ms()
        oldest = self.oldest_due_run()
        return read_models.WorkflowDiagnostics(
            workflow_id=self.workflow_id,
            generated_at=self.generated_at.isoformat(),
            window=read_models.Window(
                runs=len(self.runs), attempts=len(self.attempts), max_runs=RUN_WINDOW, max_attempts=ATTEMPT_WINDOW
            ),
            health=self.health.status,
            health_reason=self.health.reason,
            runs_by_state=self.runs_by_state(),
            step_failure_categories=self.step_failure_categories(),
            attempts=read_models.AttemptCounts(
                total=len(self.attempts),
                failed=self.failed_attempts,
                succeeded=sum(1 for a in self.attempts if a.state == st.ATTEMPT_SUCCEEDED),
                started=sum(1 for a in self.attempts if a.state == st.ATTEMPT_STARTED),
                rejected=self.decided_attempts,
            ),
            recent_attempts=[attempt_view(a) for a in self.attempts[:RECENT]],
            recent_failures=[attempt_view(a) for a in self.recent_failures()],
            run_duration_ms=read_models.Durations(
                count=len(durations), p50=_round(percentile(durations, 50)), p95=_round(percentile(durations, 95))
            ),
            pending_approvals=self.pending_approvals,
            oldest_due_run=None
            if oldest is None
            else read_models.DueRun(
                id=oldest.id, state=oldest.state, due_at=oldest.due_at.isoformat() if oldest.due_at else None
            ),
            compensation_failures=self.compensation_failures(),
            unresolved_compensation_failures=self.open_compensation_failures,
            runs_rejected=self.rejected_runs(),
        )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def attempt_view(a: AttemptRow) -> read_models.AttemptLine:
    return read_models.AttemptLine(
        id=a.id,
        run_id=a.run_id,
        step_id=a.step_id,
        step_type=a.step_type,
        number=a.number,
        state=a.state,
        error_category=a.error_category,
        started_at=a.started_at.isoformat(),
        finished_at=a.finished_at.isoformat() if a.finished_at else None,
    )


# The workflow of the realm, with its approvals waiting for a decision (the rule of
# ``approval_views.count_pending_approvals``: status pending, by realm and workflow).
_WORKFLOW_SQL = positional(
    """
    SELECT w.id, w.name,
           (SELECT count(*) FROM workflow_approvals a
             WHERE a.realm_id = :r AND a.workflow_id = w.id AND a.status = 'pending') AS pending
      FROM workflows w
     WHERE w.id = :w AND w.realm_id = :r
    """
)

_RUNS_SQL = positional(
    """
    SELECT r.id, r.state, r.created_at, r.finished_at, r.due_at, r.error_category,
           (res.run_id IS NOT NULL) AS resolved
      FROM workflow_runs r
      LEFT JOIN run_resolutions res ON res.run_id = r.id AND r.state = 'compensation_failed'
     WHERE r.workflow_id = :w AND r.realm_id = :r
     ORDER BY r.id DESC
     LIMIT :runs
    """
)

# The newest :attempts attempts of the window's runs. With 20 steps a run, 500 runs hold 10,000
# attempts: ``since`` finds the start of the :attempts-th newest in the (run_id, started_at) index
# alone (an index-only scan and a top-N sort), so only the attempts from then on are read.
_ATTEMPTS_SQL = positional(
    """
    WITH since AS (
      SELECT s.started_at FROM step_attempts s
       WHERE s.run_id = ANY(CAST(:ids AS text[]))
       ORDER BY s.started_at DESC
       LIMIT 1 OFFSET CAST(:attempts AS int) - 1
    )
    SELECT a.id, a.run_id, a.step_id, a.step_index, a.step_type, a.number, a.state, a.error_category,
           a.started_at, a.finished_at
      FROM step_attempts a
     WHERE a.run_id = ANY(CAST(:ids AS text[])) AND a.realm_id = :r
       AND a.started_at >= coalesce((SELECT started_at FROM since), '-infinity')
     ORDER BY a.started_at DESC, a.id DESC
     LIMIT :attempts
    """
)


async def pending_approvals(session: AsyncSession, realm_id: str | None, workflow_id: str | None = None) -> int:
    """Approvals waiting for a decision: of one workflow, of a realm, or of every realm (None)."""
    return await count_pending_approvals(session, realm_id, workflow_id)


async def failing_deliveries(session: AsyncSession, realm_id: str | None = None) -> int:
    """Webhook deliveries failing now (of one realm, or all): failed for good, or pending after a failed try."""
    return await count_failing_deliveries(session, realm_id)


async def workflow_diagnostics(session: AsyncSession, realm_id: str, workflow_id: str) -> Diagnostics:
    """The diagnostics of one workflow of the realm (404 for another realm's or an unknown id)."""
    found = await fetch_hot(session, _WORKFLOW_SQL, {"w": workflow_id, "r": realm_id})
    if not found:
        raise NotFound("No such workflow.")
    _id, name, pending = found[0]
    run_rows = await fetch_hot(session, _RUNS_SQL, {"w": workflow_id, "r": realm_id, "runs": RUN_WINDOW})
    runs = [RunRow(*row) for row in run_rows]
    attempts: list[AttemptRow] = []
    if runs:
        rows = await fetch_hot(
            session, _ATTEMPTS_SQL, {"ids": [r.id for r in runs], "r": realm_id, "attempts": ATTEMPT_WINDOW}
        )
        attempts = [AttemptRow(*row) for row in rows]
    return Diagnostics(
        workflow_id=workflow_id,
        workflow_name=name,
        generated_at=SYSTEM_CLOCK.now(),
        runs=runs,
        attempts=attempts,
        pending_approvals=int(pending),
    )


# --- Health of many workflows at once (the workflows list, the realm home) ------------------------

# Per workflow, the same windows as its diagnostics (``since`` as in ``_ATTEMPTS_SQL``), counted
# instead of returned.
_HEALTH_LATERAL = """
      CROSS JOIN LATERAL (
        WITH runs AS (
          SELECT r.id, r.state FROM workflow_runs r
           WHERE r.workflow_id = w.id AND r.realm_id = :r
           ORDER BY r.id DESC LIMIT :runs
        ), since AS (
          SELECT s.started_at FROM step_attempts s
           WHERE s.run_id IN (SELECT id FROM runs)
           ORDER BY s.started_at DESC LIMIT 1 OFFSET CAST(:attempts AS int) - 1
        ), attempts AS (
          SELECT a.state, a.error_category FROM step_attempts a
           WHERE a.run_id IN (SELECT id FROM runs) AND a.realm_id = :r
             AND a.started_at >= coalesce((SELECT started_at FROM since), '-infinity')
           ORDER BY a.started_at DESC, a.id DESC LIMIT :attempts
        )
        SELECT (SELECT count(*) FROM attempts) AS attempts,
               (SELECT count(*) FROM attempts WHERE state = 'failed'
                  AND coalesce(error_category, '') <> ALL(CAST(:decisions AS text[]))) AS failed,
               (SELECT count(*) FROM attempts WHERE state = 'failed'
                  AND error_category = ANY(CAST(:decisions AS text[]))) AS decided,
               (SELECT coalesce(array_agg(runs.id ORDER BY runs.id DESC), '{}') FROM runs
                 WHERE runs.state = 'compensation_failed'
                   AND NOT EXISTS (SELECT 1 FROM run_resolutions res WHERE res.run_id = runs.id)) AS open_ids
      ) h
"""

_HEALTH_SQL = text(
    "SELECT w.id, h.attempts, h.failed, h.open_ids, h.decided FROM unnest(CAST(:ids AS text[])) AS w(id)"
    + _HEALTH_LATERAL
)

# The realm home: its published workflows (newest first) and the realm's open compensation
# failures, in one statement (the count comes beside every row, or alone without workflows).
_HOME_SQL = text(
    """
    SELECT open.n, w.id, w.name
      FROM (SELECT count(*) AS n FROM workflow_runs r
             WHERE r.realm_id = :r AND r.state = 'compensation_failed'
               AND NOT EXISTS (SELECT 1 FROM run_resolutions res WHERE res.run_id = r.id)) open
      LEFT JOIN (SELECT id, name FROM workflows WHERE realm_id = :r AND published_revision IS NOT NULL
                  ORDER BY id DESC LIMIT :limit) w ON true
    """
)


def _health(attempts: Any, failed: Any, open_ids: Any, decided: Any = 0) -> Health:
    ids = list(open_ids or [])
    return classify_health(
        attempts=int(attempts),
        failed_attempts=int(failed),
        open_compensation_failures=len(ids),
        open_run_ids=ids,
        decisions=int(decided),
    )


async def health_of(session: AsyncSession, realm_id: str, workflow_ids: list[str]) -> dict[str, Health]:
    """The health of each workflow (same rule and window as its diagnostics), in one statement."""
    if not workflow_ids:
        return {}
    rows = await session.execute(
        _HEALTH_SQL,
        {
            "ids": list(workflow_ids),
            "r": realm_id,
            "runs": RUN_WINDOW,
            "attempts": ATTEMPT_WINDOW,
            "decisions": sorted(DECISION_CATEGORIES),
        },
    )
    return {
        workflow_id: _health(attempts, failed, open_ids, decided)
        for workflow_id, attempts, failed, open_ids, decided in rows
    }


@dataclass(frozen=True)
class WorkflowHealth:
    workflow_id: str
    name: str
    health: Health


HOME_WORKFLOWS = 100


async def realm_attention(
    session: AsyncSession,
    realm_id: str,
    *,
    limit: int = HOME_WORKFLOWS,
    health: Callable[[AsyncSession, str, list[str]], Awaitable[dict[str, Health]]] | None = None,
) -> tuple[list[WorkflowHealth], int]:
    """The realm's published workflows (at most ``limit``, newest first) whose health is degraded or
    worse, and how many of the realm's runs wait for an administrator.

    ``health`` computes the workflows' health (default :func:`health_of`; the web app passes its
    short-lived cache).
    """
    rows = (await session.execute(_HOME_SQL, {"r": realm_id, "limit": limit})).all()
    open_total = int(rows[0][0]) if rows else 0
    names = {workflow_id: name for _n, workflow_id, name in rows if workflow_id is not None}
    healths = await (health or health_of)(session, realm_id, list(names))
    rank = {"attention_required": 0, "degraded": 1}
    found = [WorkflowHealth(w, names[w], h) for w, h in healths.items() if h.status in rank]
    found.sort(key=lambda w: (rank[w.health.status], w.name.lower()))
    return found, open_total
