"""The Procrastinate app owned by the engine, and its tasks.

The engine's own tables are the source of truth; Procrastinate drives the passes (periodic
tasks, and jobs deferred to wake a worker at once). The app is built without a connection;
the worker process gives it one with ``replace_connector``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from procrastinate import App, JobContext, PsycopgConnector
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory.roles import expire_due_assignments
from engine.platform.db import transaction
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
    # One periodic pass at a time in a process: Procrastinate may hand this process the next
    # second's job while the previous one still runs, and both would lease under one owner.
    pass_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


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
        count = await expire_due_assignments(session, datetime.now(UTC))
    if count:
        log.info("role assignments expired", extra={"count": count})


@app.periodic(cron="* * * * * *", periodic_id="workflows_run")
@app.task(name="workflows.run", queue="workflows", pass_context=True, queueing_lock="workflows.run")
async def workflows_run(context: JobContext, timestamp: int) -> None:
    """The 1-second pass: claim due runs and advance them (LISTEN/NOTIFY wakes workers sooner)."""
    runtime = runtime_of(context)
    if runtime.runner is None or runtime.pass_lock.locked():
        return  # this process's previous pass is still going and covers this second too
    async with runtime.pass_lock:
        await runtime.runner.run_pass()


@app.periodic(cron="* * * * * *", periodic_id="outbox_dispatch")
@app.task(name="outbox.dispatch", queue="workflows", pass_context=True, queueing_lock="outbox.dispatch")
async def outbox_dispatch(context: JobContext, timestamp: int) -> None:
    """Start runs for new domain events (the transaction covers the whole batch)."""
    from engine.runs.service import dispatch_outbox

    runtime = runtime_of(context)
    async with transaction(runtime.sessions) as session:
        await dispatch_outbox(session)
