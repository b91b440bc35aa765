"""The worker process: Procrastinate worker plus the engine's own housekeeping.

Stops cleanly on SIGINT or SIGTERM: Procrastinate stops fetching jobs and waits for the ones
running, then the worker marks itself stopped (and hands back what it holds).
"""

from __future__ import annotations

import asyncio
import logging
import os

from procrastinate import PsycopgConnector

from engine import queue
from engine.config import Settings
from engine.database import libpq_conninfo
from engine.db import make_engine, make_sessionmaker, transaction
from engine.workers import new_worker_id, record_heartbeat, record_stopped

log = logging.getLogger("cockpit.worker")


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Stop when the process that started us is gone (no orphans after a hard kill of `up`)."""
    while not stop.is_set():
        if os.getppid() != parent_pid:
            log.warning("parent process gone; stopping", extra={"parent_pid": parent_pid})
            stop.set()
            return
        await asyncio.sleep(1)


async def run_worker(settings: Settings, database_url: str, *, parent_pid: int | None = None) -> None:
    worker_id = new_worker_id()
    db = make_engine(database_url, pool_size=5)
    sessions = make_sessionmaker(db)
    runtime = queue.WorkerRuntime(worker_id=worker_id, sessions=sessions, settings=settings)
    connector = PsycopgConnector(conninfo=libpq_conninfo(database_url), min_size=1, max_size=10)
    async with transaction(sessions) as session:
        await record_heartbeat(session, worker_id)
    log.info("worker started", extra={"worker_id": worker_id})
    stop = asyncio.Event()
    watchers: list[asyncio.Task[None]] = []
    try:
        with queue.app.replace_connector(connector) as app:
            async with app.open_async():
                worker_task = asyncio.create_task(
                    app.run_worker_async(
                        name=worker_id,
                        concurrency=settings.workers.concurrency,
                        wait=True,
                        install_signal_handlers=True,
                        delete_jobs="successful",
                        shutdown_graceful_timeout=15,
                        additional_context={"runtime": runtime},
                    )
                )
                if parent_pid:
                    watchers.append(asyncio.create_task(_watch_parent(parent_pid, stop)))
                stopper = asyncio.create_task(stop.wait())
                done, _ = await asyncio.wait({worker_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if stopper in done and not worker_task.done():
                    os.kill(os.getpid(), 15)  # the worker's own handler shuts it down gracefully
                    await worker_task
                stopper.cancel()
                worker_task.result()
    finally:
        for watcher in watchers:
            watcher.cancel()
        try:
            async with transaction(sessions) as session:
                await record_stopped(session, worker_id)
        except Exception:  # the database may be the reason we stop
            log.warning("could not mark worker stopped", exc_info=True)
        await db.dispose()
        log.info("worker stopped", extra={"worker_id": worker_id})
