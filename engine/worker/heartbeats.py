"""Worker identity and heartbeats.

A worker id is ``worker-<host name>-<process id>-<random suffix>``: unique per worker
process, so two workers on one host (or containers sharing a host name) never share lease
ownership (seed 000, "Execution and idempotency").
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

READY_HEARTBEAT_SECONDS = 30


def new_worker_id() -> str:
    host = socket.gethostname().split(".")[0] or "host"
    return f"worker-{host}-{os.getpid()}-{secrets.token_hex(4)}"


async def record_heartbeat(session: AsyncSession, worker_id: str) -> None:
    host = socket.gethostname()
    await session.execute(
        text(
            """
            INSERT INTO worker_heartbeats (worker_id, host, pid, started_at, last_seen_at)
            VALUES (:worker_id, :host, :pid, now(), now())
            ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now(), stopped_at = NULL
            """
        ),
        {"worker_id": worker_id, "host": host, "pid": os.getpid()},
    )


async def record_stopped(session: AsyncSession, worker_id: str) -> None:
    await session.execute(
        text("UPDATE worker_heartbeats SET stopped_at = now() WHERE worker_id = :w"), {"w": worker_id}
    )


async def newest_heartbeat(session: AsyncSession) -> datetime | None:
    result = await session.execute(text("SELECT max(last_seen_at) FROM worker_heartbeats WHERE stopped_at IS NULL"))
    value: datetime | None = result.scalar()
    return value


async def live_workers(session: AsyncSession, within_s: int = READY_HEARTBEAT_SECONDS) -> int:
    result = await session.execute(
        text(
            "SELECT count(*) FROM worker_heartbeats WHERE stopped_at IS NULL "
            "AND last_seen_at > now() - make_interval(secs => :s)"
        ),
        {"s": within_s},
    )
    return int(result.scalar() or 0)
