"""The Procrastinate app owned by the engine, and its tasks.

The engine's own tables are the source of truth; Procrastinate drives the passes (periodic
tasks, and jobs deferred to wake a worker at once). The app is built without a connection;
the worker process gives it one with ``replace_connector``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from procrastinate import App, JobContext, PsycopgConnector
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory.role_assignments import expire_due_assignments
from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.platform.db import transaction
from engine.worker.drain import drain
from engine.worker.heartbeats import record_heartbeat

log = logging.getLogger("cockpit.worker")

app = App(connector=PsycopgConnector(), import_paths=["engine.worker.queue"])


@dataclass
class WorkerRuntime:
    """What a task needs from the worker process that runs it."""

    worker_id: str
    sessions: async_sessionmaker[AsyncSession]
    settings: Any
    runner: Any = None  # engine.runs.runner.Runner of this worker process
    clock: Clock = SYSTEM_CLOCK  # "now" for the periodic tasks (the runner has its own)
    # One periodic pass at a time in a process: Procrastinate may hand this process the next
    # second's job while the previous one still runs, and both would lease under one owner.
    pass_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    schedule_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    retention_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def runtime_of(context: JobContext) -> WorkerRuntime:
    runtime = context.additional_context.get("runtime")
    if not isinstance(runtime, WorkerRuntime):
        raise RuntimeError("task run outside a cockpit worker")
    return runtime


@app.periodic(cron="*/5 * * * * *", periodic_id="heartbeat")
@app.task(name="workers.heartbeat", queue="maintenance", pass_context=True)
async def heartbeat(context: JobContext, timestamp: int) -> None:
    """Record that this worker is alive (readiness wants one within 30 s)."""
    runtime = runtime_of(context)
    async with transaction(runtime.sessions) as session:
        await record_heartbeat(session, runtime.worker_id)


@app.periodic(cron="*/10 * * * * *", periodic_id="expire_assignments")
@app.task(name="directory.expire_assignments", queue="maintenance", pass_context=True)
async def expire_assignments(context: JobContext, timestamp: int) -> None:
    """Remove role assignments whose time is up (each one audited and announced to the outbox)."""
    runtime = runtime_of(context)
    async with transaction(runtime.sessions) as session:
        count = await expire_due_assignments(session, runtime.clock.now())
    if count:
        log.info("role assignments expired", extra={"count": count})
    from engine.runs.role_requests import expire_role_requests

    async with transaction(runtime.sessions) as session:
        requests = await expire_role_requests(session, runtime.clock.now())
    if requests:
        log.info("role assignment requests expired", extra={"count": requests})


@app.periodic(cron="* * * * * *", periodic_id="workflows_run")
@app.task(name="workflows.run", queue="workflows", pass_context=True, queueing_lock="workflows.run")
async def workflows_run(context: JobContext, timestamp: int) -> None:
    """The 1-second pass: claim due runs and advance them, pass after pass while work is due.

    LISTEN/NOTIFY wakes workers sooner; this is the safety net, and it drains a backlog by itself
    too (when notifications are lost or the listening connection is down).
    """
    runtime = runtime_of(context)
    if runtime.runner is None or runtime.pass_lock.locked():
        return  # this process's previous pass is still going and covers this second too
    async with runtime.pass_lock:
        await drain(runtime.runner)


@app.periodic(cron="* * * * * *", periodic_id="outbox_dispatch")
@app.task(name="outbox.dispatch", queue="workflows", pass_context=True, queueing_lock="outbox.dispatch")
async def outbox_dispatch(context: JobContext, timestamp: int) -> None:
    """Start runs for new domain events (the transaction covers the whole batch)."""
    from engine.runs.triggers import dispatch_outbox

    runtime = runtime_of(context)
    async with transaction(runtime.sessions) as session:
        await dispatch_outbox(session)


@app.periodic(cron="* * * * *", periodic_id="workflows_schedule")
@app.task(name="workflows.schedule", queue="workflows", pass_context=True, queueing_lock="workflows.schedule")
async def workflows_schedule(context: JobContext, timestamp: int) -> None:
    """Every minute: fire the due slot of every schedule trigger of an active workflow.

    Each slot fires in its own transaction and at most once, even with several schedulers at once.
    """
    from engine.runs.schedules import schedule_pass

    runtime = runtime_of(context)
    if runtime.schedule_lock.locked():
        return  # one scheduler pass at a time per process; the next minute's pass catches up the slot
    async with runtime.schedule_lock:
        await schedule_pass(runtime.sessions, runtime.clock)


@app.periodic(cron="*/10 * * * *", periodic_id="retention_cleanup")
@app.task(name="retention.cleanup", queue="maintenance", pass_context=True, queueing_lock="retention.cleanup")
async def retention_cleanup(context: JobContext, timestamp: int) -> None:
    """Every 10 minutes: delete runs that finished more than COCKPIT_RUN_RETENTION_DAYS ago, in batches."""
    from engine.runs.retention import cleanup_finished_runs

    runtime = runtime_of(context)
    if runtime.retention_lock.locked():
        return
    async with runtime.retention_lock:
        await cleanup_finished_runs(
            runtime.sessions, retention_days=runtime.settings.run_retention_days, clock=runtime.clock
        )


@app.periodic(cron="* * * * * *", periodic_id="notices_deliver")
@app.task(name="notices.deliver", queue="maintenance", pass_context=True, queueing_lock="notices.deliver")
async def notices_deliver(context: JobContext, timestamp: int) -> None:
    """Mail the notices whose runs committed (at least once, with backoff; engine/notices.py)."""
    from engine.runs.notices import deliver_due_notices

    runtime = runtime_of(context)
    while await deliver_due_notices(runtime.sessions, runtime.settings.mail, clock=runtime.clock):
        pass  # a full batch went out: there may be more
