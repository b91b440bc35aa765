"""Liveness and readiness, for process managers and load balancers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Controller, Response, get
from litestar.datastructures import State
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.api import schemas
from cockpit.api.schemas import typed
from cockpit.state import context_of
from engine.platform.config import VERSION
from engine.worker.heartbeats import READY_HEARTBEAT_SECONDS, newest_heartbeat


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", operation_id="healthz", opt={"public": True})
    async def healthz(self) -> schemas.Liveness:
        """The process is up and answers; it checks nothing else (for a liveness probe). No credential."""
        return schemas.Liveness(status="ok", version=VERSION)

    @get("/readyz", operation_id="readyz", opt={"public": True})
    async def readyz(self, state: State) -> Response[schemas.Readiness]:
        """Ready to serve: the database reachable, its migrations at head and a worker alive (each check
        with its verdict); 503 with the same document when one fails. No credential."""
        ready, checks = await readiness(state)
        answer = typed(schemas.Readiness, {"status": "ready" if ready else "not_ready", "checks": checks})
        return Response(answer, status_code=200 if ready else 503)


_STATUS_SQL = text(
    "SELECT (SELECT version_num FROM alembic_version LIMIT 1),"
    " (SELECT max(last_seen_at) FROM worker_heartbeats WHERE stopped_at IS NULL)"
)


async def readiness(state: State, session: AsyncSession | None = None) -> tuple[bool, dict[str, dict[str, Any]]]:
    """Each check with its verdict; ready only when all pass.

    With ``session`` (a page that holds the request's session already) the checks are one query
    in that transaction; the database answered the page's own queries, so it is reachable.
    """
    ctx = context_of(state)
    checks: dict[str, dict[str, Any]] = {}
    if session is not None:
        current, newest = (await session.execute(_STATUS_SQL)).one()
        checks["database"] = {"ok": True}
        checks["migrations"] = {"ok": current == ctx.head_revision, "current": current, "head": ctx.head_revision}
        return _with_worker(checks, newest)
    try:
        async with ctx.sessions() as own:
            await own.execute(text("SELECT 1"))
            checks["database"] = {"ok": True}
            current = (await own.execute(text("SELECT version_num FROM alembic_version LIMIT 1"))).scalar()
            checks["migrations"] = {"ok": current == ctx.head_revision, "current": current, "head": ctx.head_revision}
            newest = await newest_heartbeat(own)
    except Exception as exc:
        checks.setdefault("database", {"ok": False, "error": exc.__class__.__name__})
        checks.setdefault("migrations", {"ok": False})
        newest = None
    return _with_worker(checks, newest)


def _with_worker(checks: dict[str, dict[str, Any]], newest: datetime | None) -> tuple[bool, dict[str, dict[str, Any]]]:
    age = (datetime.now(UTC) - newest).total_seconds() if newest else None
    checks["worker"] = {
        "ok": age is not None and age <= READY_HEARTBEAT_SECONDS,
        "last_heartbeat_age_s": round(age, 1) if age is not None else None,
    }
    return all(c["ok"] for c in checks.values()), checks
