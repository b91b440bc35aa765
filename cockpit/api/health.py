"""Liveness and readiness, for process managers and load balancers."""

from __future__ import annotations

from datetime import UTC, datetime

from litestar import Controller, Response, get
from litestar.datastructures import State
from msgspec import UNSET, UnsetType
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.state import context_of
from engine.platform.config import VERSION
from engine.platform.read_models import Shape
from engine.worker.heartbeats import READY_HEARTBEAT_SECONDS, newest_heartbeat


class Liveness(Shape):
    status: str
    version: str  # the installed release of the product


class DatabaseCheck(Shape):
    ok: bool
    error: str | UnsetType = UNSET


class MigrationsCheck(Shape):
    ok: bool
    current: str | UnsetType | None = UNSET
    head: str | UnsetType | None = UNSET


class WorkerCheck(Shape):
    ok: bool
    last_heartbeat_age_s: float | None


class ReadinessChecks(Shape):
    database: DatabaseCheck
    migrations: MigrationsCheck
    worker: WorkerCheck


class Readiness(Shape):
    """``ready`` only when every check passes (200); otherwise ``not_ready`` with the same document (503)."""

    status: str
    checks: ReadinessChecks


class HealthController(Controller):
    tags = ["health"]

    @get("/healthz", operation_id="healthz", opt={"public": True})
    async def healthz(self) -> Liveness:
        """The process is up and answers; it checks nothing else (for a liveness probe). No credential."""
        return Liveness(status="ok", version=VERSION)

    @get("/readyz", operation_id="readyz", opt={"public": True})
    async def readyz(self, state: State) -> Response[Readiness]:
        """Ready to serve: the database reachable, its migrations at head and a worker alive (each check
        with its verdict); 503 with the same document when one fails. No credential."""
        ready, checks = await readiness(state)
        answer = Readiness(status="ready" if ready else "not_ready", checks=checks)
        return Response(answer, status_code=200 if ready else 503)


_STATUS_SQL = text(
    "SELECT (SELECT version_num FROM alembic_version LIMIT 1),"
    " (SELECT max(last_seen_at) FROM worker_heartbeats WHERE stopped_at IS NULL)"
)


async def readiness(state: State, session: AsyncSession | None = None) -> tuple[bool, ReadinessChecks]:
    """Each check with its verdict; ready only when all pass.

    With ``session`` (a page that holds the request's session already) the checks are one query
    in that transaction; the database answered the page's own queries, so it is reachable.
    """
    ctx = context_of(state)
    if session is not None:
        current, newest = (await session.execute(_STATUS_SQL)).one()
        at_head = MigrationsCheck(ok=current == ctx.head_revision, current=current, head=ctx.head_revision)
        return _with_worker(DatabaseCheck(ok=True), at_head, newest)
    database: DatabaseCheck | None = None
    migrations: MigrationsCheck | None = None
    try:
        async with ctx.sessions() as own:
            await own.execute(text("SELECT 1"))
            database = DatabaseCheck(ok=True)
            current = (await own.execute(text("SELECT version_num FROM alembic_version LIMIT 1"))).scalar()
            migrations = MigrationsCheck(ok=current == ctx.head_revision, current=current, head=ctx.head_revision)
            newest = await newest_heartbeat(own)
    except Exception as exc:
        if database is None:
            database = DatabaseCheck(ok=False, error=exc.__class__.__name__)
        if migrations is None:
            migrations = MigrationsCheck(ok=False)
        newest = None
    return _with_worker(database, migrations, newest)


def _with_worker(
    database: DatabaseCheck, migrations: MigrationsCheck, newest: datetime | None
) -> tuple[bool, ReadinessChecks]:
    age = (datetime.now(UTC) - newest).total_seconds() if newest else None
    worker = WorkerCheck(
        ok=age is not None and age <= READY_HEARTBEAT_SECONDS,
        last_heartbeat_age_s=round(age, 1) if age is not None else None,
    )
    return database.ok and migrations.ok and worker.ok, ReadinessChecks(
        database=database, migrations=migrations, worker=worker
    )


def check_list(checks: ReadinessChecks) -> dict[str, DatabaseCheck | MigrationsCheck | WorkerCheck]:
    """The checks by name, in their order (as the status widget lists them)."""
    return {"database": checks.database, "migrations": checks.migrations, "worker": checks.worker}
