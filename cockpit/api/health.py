"""Liveness and readiness, for process managers and load balancers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Controller, Response, get
from litestar.datastructures import State
from sqlalchemy import text

from cockpit.state import context_of
from engine.workers import READY_HEARTBEAT_SECONDS, newest_heartbeat


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", operation_id="healthz", summary="The process is up")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @get("/readyz", operation_id="readyz", summary="Database reachable, migrations at head, a worker alive")
    async def readyz(self, state: State) -> Response[dict[str, Any]]:
        ready, checks = await readiness(state)
        return Response(
            {"status": "ready" if ready else "not_ready", "checks": checks}, status_code=200 if ready else 503
        )


async def readiness(state: State) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Each check with its verdict; ready only when all pass."""
    ctx = context_of(state)
    checks: dict[str, dict[str, Any]] = {}
    try:
        async with ctx.sessions() as session:
            await session.execute(text("SELECT 1"))
            checks["database"] = {"ok": True}
            current = (await session.execute(text("SELECT version_num FROM alembic_version LIMIT 1"))).scalar()
            checks["migrations"] = {"ok": current == ctx.head_revision, "current": current, "head": ctx.head_revision}
            newest = await newest_heartbeat(session)
    except Exception as exc:
        checks.setdefault("database", {"ok": False, "error": exc.__class__.__name__})
        checks.setdefault("migrations", {"ok": False})
        newest = None
    age = (datetime.now(UTC) - newest).total_seconds() if newest else None
    checks["worker"] = {
        "ok": age is not None and age <= READY_HEARTBEAT_SECONDS,
        "last_heartbeat_age_s": round(age, 1) if age is not None else None,
    }
    return all(c["ok"] for c in checks.values()), checks
