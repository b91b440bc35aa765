"""The worker process: Procrastinate worker plus the engine's own housekeeping.

Stops cleanly on SIGINT or SIGTERM: Procrastinate stops fetching jobs and waits for the ones
running, then the worker marks itself stopped (and hands back what it holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from datetime import timedelta

import asyncpg
from procrastinate import App, PsycopgConnector
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.endpoints import deliveries
from engine.endpoints.calls import EndpointSettings
from engine.platform.config import Settings
from engine.platform.database import asyncpg_connect_args, libpq_conninfo
from engine.platform.db import make_engine, make_sessionmaker, transaction
from engine.runs import metrics
from engine.runs.runner import Runner, RunnerSettings
from engine.runs.runstore.scheduling import NOTIFY_CHANNEL
from engine.runs.triggers import dispatch_outbox
from engine.worker import queue
from engine.worker.drain import Drained, drain
from engine.worker.heartbeats import new_worker_id, record_heartbeat, record_stopped

log = logging.getLogger("cockpit.worker")
# How long the job queue waits before starting again after it stopped by itself (the database went away).
QUEUE_RESTART_S = 2.0


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Stop when the process that started us is gone (no orphans after a hard kill of `up`)."""
    while not stop.is_set():
        if os.getppid() != parent_pid:
            log.warning("parent process gone; stopping", extra={"parent_pid": parent_pid})
            stop.set()
            return
        await asyncio.sleep(1)


async def _beat(sessions: async_sessionmaker[AsyncSession], worker_id: str, interval_s: int) -> None:
    """This worker's own heartbeat (the periodic task beats for whichever worker runs it)."""
    while True:
        await asyncio.sleep(max(1, interval_s))
        try:
            async with transaction(sessions) as session:
                await record_heartbeat(session, worker_id)
        except Exception:
            log.warning("heartbeat failed", exc_info=True)


LISTEN_OWNER_SUFFIX = ".listen"


def make_runners(
    sessions: async_sessionmaker[AsyncSession], worker_id: str, settings: RunnerSettings
) -> tuple[Runner, Runner]:
    """The periodic task's runner and the LISTEN loop's runner of one worker process.

    They run passes concurrently, so each leases under its own owner (``<worker id>`` and
    ``<worker id>.listen``): one can never renew, advance or hand back a run the other holds.
    """
    return (
        Runner(sessions, worker_id, settings=settings),
        Runner(sessions, worker_id + LISTEN_OWNER_SUFFIX, settings=settings),
    )


async def wake_pass(runner: Runner, sessions: async_sessionmaker[AsyncSession]) -> Drained:
    """What a notification triggers: dispatch the outbox, then drain the due runs (:func:`drain`):
    the transitions made, and whether due runs are left.

    A failing dispatch is logged and the run pass still happens (the periodic dispatch retries).
    """
    try:
        async with transaction(sessions) as session:
            await dispatch_outbox(session)
    except Exception:
        log.warning("outbox dispatch after a notification failed; running the pass anyway", exc_info=True)
    return await drain(runner)


async def _listen(
    database_url: str,
    runner: Runner,
    sessions: async_sessionmaker[AsyncSession],
    stop: asyncio.Event,
    deliveries_due: asyncio.Event | None = None,
) -> None:
    """React at once when a run becomes due or an event is written (NOTIFY at commit).

    The periodic ``workflows.run`` and ``outbox.dispatch`` tasks remain the safety net.
    """
    wake = asyncio.Event()

    def on_notify(*_args: object) -> None:
        wake.set()

    def on_delivery(*_args: object) -> None:
        if deliveries_due is not None:
            deliveries_due.set()

    while not stop.is_set():
        try:
            conn = await asyncpg.connect(**asyncpg_connect_args(database_url))
        except Exception:
            log.warning("cannot listen for due runs; retrying", exc_info=True)
            await asyncio.sleep(2)
            continue
        try:
            await conn.add_listener(NOTIFY_CHANNEL, on_notify)
            await conn.add_listener("cockpit_outbox", on_notify)
            await conn.add_listener(deliveries.NOTIFY_CHANNEL, on_delivery)
            while not stop.is_set():
                try:
                    await asyncio.wait_for(wake.wait(), timeout=5)
                except TimeoutError:
                    if conn.is_closed():
                        break
                    continue
                wake.clear()
                try:
                    _, more = await wake_pass(runner, sessions)
                except Exception:
                    log.warning("pass after a notification failed", exc_info=True)
                else:
                    if more:
                        wake.set()  # work is left: go on at once (the outbox gets a look in between)
        finally:
            if not conn.is_closed():
                await conn.close()


async def _run_queue(
    app: App, worker_id: str, settings: Settings, runtime: queue.WorkerRuntime, stop: asyncio.Event
) -> None:
    """Run Procrastinate's worker until ``stop`` is set (a signal, or the parent gone).

    Procrastinate stops its worker by itself when its listener loses the database (a restart of
    PostgreSQL): that is not a reason for this process to end — it would end with status 0, which
    a supervisor restarting on failure leaves stopped — so the job queue is started again once the
    database answers. Asked to stop, the worker finishes its running jobs (up to 15 s) first.
    """
    while not stop.is_set():
        worker_task = asyncio.create_task(
            app.run_worker_async(
                name=worker_id,
                concurrency=settings.workers.concurrency,
                wait=True,
                install_signal_handlers=False,
                delete_jobs="successful",
                shutdown_graceful_timeout=15,
                additional_context={"runtime": runtime},
            )
        )
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({worker_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper not in done:
            stopper.cancel()
            failure = None if worker_task.cancelled() else worker_task.exception()
            log.warning(
                "the job queue stopped without being asked (its database went away?); starting it again",
                exc_info=failure,
                extra={"worker_id": worker_id},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=QUEUE_RESTART_S)
            continue
        if not worker_task.done():
            worker_task.cancel()  # Procrastinate's graceful stop: no new jobs, running ones finish
            with contextlib.suppress(asyncio.CancelledError):
                await worker_task
        elif not worker_task.cancelled() and worker_task.exception() is not None:
            log.warning("the job queue ended with an error", exc_info=worker_task.exception())


async def run_worker(settings: Settings, database_url: str, *, parent_pid: int | None = None) -> None:
    worker_id = new_worker_id()
    db = make_engine(database_url, pool_size=5)
    sessions = make_sessionmaker(db)
    runner, listen_runner = make_runners(
        sessions,
        worker_id,
        RunnerSettings(
            lease=timedelta(seconds=settings.workers.lease_duration_s),
            batch_size=settings.workers.batch_size,
            tenant_share=settings.workers.tenant_batch_share,
            group_commit=settings.workers.group_commit,
            fast_path=settings.workers.fast_path,
            endpoints=EndpointSettings(
                operator_key=settings.secret_key,
                allow_private_egress=settings.allow_private_egress,
                timeout_ms=settings.deliveries.timeout_ms,
                ca_bundle=settings.deliveries.ca_bundle,
            ),
            mail_configured=settings.mail is not None,
        ),
    )
    dispatcher = deliveries.DeliveryDispatcher(
        sessions,
        deliveries.DeliveryPolicy(
            operator_key=settings.secret_key,
            allow_private_egress=settings.allow_private_egress,
            timeout_ms=settings.deliveries.timeout_ms,
            max_attempts=settings.deliveries.max_attempts,
            backoff_ms=settings.deliveries.backoff_ms,
            concurrency=settings.deliveries.concurrency,
            ca_bundle=settings.deliveries.ca_bundle,
        ),
    )
    metrics.count_tasks(queue.app.tasks.values())  # cockpit_worker_runs_total{task}
    runtime = queue.WorkerRuntime(worker_id=worker_id, sessions=sessions, settings=settings, runner=runner)
    connector = PsycopgConnector(conninfo=libpq_conninfo(database_url), min_size=1, max_size=10)
    async with transaction(sessions) as session:
        await record_heartbeat(session, worker_id)
    log.info("worker started", extra={"worker_id": worker_id})
    stop = asyncio.Event()
    watchers: list[asyncio.Task[None]] = []
    try:
        with queue.app.replace_connector(connector) as app:
            async with app.open_async():
                loop = asyncio.get_running_loop()
                for signum in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(signum, stop.set)
                if parent_pid:
                    watchers.append(asyncio.create_task(_watch_parent(parent_pid, stop)))
                watchers.append(
                    asyncio.create_task(_listen(database_url, listen_runner, sessions, stop, dispatcher.wake))
                )
                watchers.append(asyncio.create_task(dispatcher.run(stop)))
                watchers.append(asyncio.create_task(_beat(sessions, worker_id, settings.workers.heartbeat_interval_s)))
                await _run_queue(app, worker_id, settings, runtime, stop)
    finally:
        for watcher in watchers:
            watcher.cancel()
        try:
            released = await runner.release_all() + await listen_runner.release_all()
            if released:
                log.info("leases handed back", extra={"worker_id": worker_id, "runs": released})
        except Exception:
            log.warning("could not hand back leases", exc_info=True)
        try:
            async with transaction(sessions) as session:
                await record_stopped(session, worker_id)
        except Exception:  # the database may be the reason we stop
            log.warning("could not mark worker stopped", exc_info=True)
        await db.dispose()
        log.info("worker stopped", extra={"worker_id": worker_id})
