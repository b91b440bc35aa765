"""Factories for rows the tests need, written through the same SQL the product uses."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.workers import new_worker_id, record_heartbeat


async def make_worker_heartbeat(session: AsyncSession, *, age_seconds: float = 0.0) -> str:
    """A worker that was last seen ``age_seconds`` ago."""
    worker_id = new_worker_id()
    await record_heartbeat(session, worker_id)
    if age_seconds:
        await session.execute(
            text("UPDATE worker_heartbeats SET last_seen_at = now() - make_interval(secs => :s) WHERE worker_id = :w"),
            {"s": age_seconds, "w": worker_id},
        )
    await session.commit()
    return worker_id
