"""Prometheus metrics of the engine: the worker's counters and the gauges read from the database.

**Multiprocess mode.** Workers count in their own processes, not in the web server's. Each
process writes its counters to memory-mapped files in one folder (``PROMETHEUS_MULTIPROC_DIR``,
by default ``<COCKPIT_HOME>/metrics``), and the web server's ``/metrics`` sums the files of every
process, live or gone, so a worker's counts survive its restarts and Prometheus scrapes one
address. prometheus-client picks its mode when it is first imported: the CLI sets the folder
before anything imports it (``engine.platform.metrics_setup``). Without the folder (tests running the
app in their own process) every metric lives in the process's own registry.

Label values carry no realm data beyond a realm's id: task names, the fixed ``type="workflow"``,
run states.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.platform.metrics_setup import multiprocess_dir
from engine.runs import states as st

WORKER_RUNS = Counter(
    "cockpit_worker_runs",
    "Tasks a worker ran, by task name (workflows.run, outbox.dispatch, workers.heartbeat, …).",
    ["task"],
)
JOBS_FAILED = Counter(
    "cockpit_jobs_failed",
    'Jobs that ended without doing their work; type="workflow": runs ending failed, compensated or'
    " compensation_failed.",
    ["type"],
)
JOBS_FAILED.labels(type="workflow")  # present (at 0) before the first failure

FAILED_OUTCOMES = frozenset({st.FAILED, st.COMPENSATED, st.COMPENSATION_FAILED})


def run_finished(before: str, after: str) -> None:
    """Count a run that just moved into a failing final state (called after its commit)."""
    if after != before and after in FAILED_OUTCOMES:
        JOBS_FAILED.labels(type="workflow").inc()


def count_tasks(tasks: Iterable[Any]) -> None:
    """Wrap every Procrastinate task so each run of it counts in ``cockpit_worker_runs_total{task}``.

    Done once per worker process on the app's registered tasks, so a task added later is counted
    without touching this module.
    """
    for task in tasks:
        if task.func in _COUNTED:
            continue
        WORKER_RUNS.labels(task=task.name)
        task.func = _counted(task.name, task.func)


# The task functions already wrapped by ``_counted`` (a task is counted once, however often asked).
_COUNTED: weakref.WeakSet[Callable[..., Any]] = weakref.WeakSet()


def _counted(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return await func(*args, **kwargs)
        finally:
            WORKER_RUNS.labels(task=name).inc()

    _COUNTED.add(counted)
    return counted


# --- Gauges read from the database at scrape time -------------------------------------------------

# One statement, a few index probes per realm whatever the number of runs:
# - unfinished runs by state: the NULL end of ix_workflow_runs_realm_finished (realm_id, finished_at, state);
# - finished in the last 24 hours by state: a short range of the same index;
# - due backlog and the oldest due run: ix_workflow_runs_realm_due, partial on due_at IS NOT NULL.
# The finished runs of all time (millions) are never counted: use the counters for totals.
_GAUGES_SQL = text(
    """
    SELECT 'unfinished', rl.id, s.state, s.n::float8
      FROM realms rl CROSS JOIN LATERAL (
        SELECT state, count(*) AS n FROM workflow_runs
         WHERE realm_id = rl.id AND finished_at IS NULL GROUP BY state) s
    UNION ALL
    SELECT 'finished_24h', rl.id, d.state, d.n::float8
      FROM realms rl CROSS JOIN LATERAL (
        SELECT state, count(*) AS n FROM workflow_runs
         WHERE realm_id = rl.id AND finished_at > now() - interval '24 hours' GROUP BY state) d
    UNION ALL
    SELECT 'due', rl.id, NULL,
           (SELECT count(*) FROM workflow_runs WHERE realm_id = rl.id AND due_at <= now())::float8
      FROM realms rl
    UNION ALL
    SELECT 'oldest_due_age', rl.id, NULL,
           coalesce(extract(epoch FROM now() - (
             SELECT min(due_at) FROM workflow_runs
              WHERE realm_id = rl.id AND due_at <= now()
                AND state IN ('pending', 'running', 'compensating'))), 0)::float8
      FROM realms rl
    """
)


async def database_gauges(session: AsyncSession) -> list[Metric]:
    """The gauges computed from the database now, as metric families ready to expose."""
    from engine.runs.diagnostics import failing_deliveries, pending_approvals

    unfinished = GaugeMetricFamily(
        "cockpit_runs", "Unfinished workflow runs by realm and state.", labels=["realm_id", "state"]
    )
    finished = GaugeMetricFamily(
        "cockpit_runs_finished_24h",
        "Workflow runs that finished in the last 24 hours, by realm and final state.",
        labels=["realm_id", "state"],
    )
    due = GaugeMetricFamily(
        "cockpit_runs_due", "Runs whose due time has come (the backlog workers must clear).", labels=["realm_id"]
    )
    oldest = GaugeMetricFamily(
        "cockpit_oldest_due_run_age_seconds",
        "How long the oldest due run (pending, running or compensating) has been waiting; 0 when none.",
        labels=["realm_id"],
    )
    values: dict[str, dict[tuple[str, str | None], float]] = {
        "unfinished": {},
        "finished_24h": {},
        "due": {},
        "oldest_due_age": {},
    }
    realms: set[str] = set()
    for kind, realm_id, state, value in await session.execute(_GAUGES_SQL):
        realms.add(realm_id)
        values[kind][(realm_id, state)] = float(value)
    for realm_id in sorted(realms):
        for state in sorted(st.IN_FLIGHT):
            unfinished.add_metric([realm_id, state], values["unfinished"].get((realm_id, state), 0.0))
        for state in sorted(st.FINISHED):
            finished.add_metric([realm_id, state], values["finished_24h"].get((realm_id, state), 0.0))
        due.add_metric([realm_id], values["due"].get((realm_id, None), 0.0))
        oldest.add_metric([realm_id], values["oldest_due_age"].get((realm_id, None), 0.0))
    approvals = GaugeMetricFamily("cockpit_approvals_pending", "Approvals waiting for a decision.")
    approvals.add_metric([], float(await pending_approvals(session, None)))
    deliveries = GaugeMetricFamily(
        "cockpit_webhook_deliveries_failing",
        "Webhook deliveries failing now: failed for good, or pending after a failed try.",
    )
    deliveries.add_metric([], float(await failing_deliveries(session, None)))
    return [unfinished, finished, due, oldest, approvals, deliveries]


class _Snapshot:
    """A collector that serves metric families computed before the scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def exposition(database: list[Metric]) -> bytes:
    """The text format of every metric: this process's (or every process's) plus the database's."""
    from prometheus_client import generate_latest

    folder = multiprocess_dir()
    registry = CollectorRegistry()
    if folder:
        MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]  # prometheus_client leaves it untyped
        own = generate_latest(registry)
    else:
        own = generate_latest(REGISTRY)
    snapshot = CollectorRegistry()
    snapshot.register(_Snapshot(database))
    return own + generate_latest(snapshot)
