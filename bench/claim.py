"""Claim latency at 10, 10 K and 1 M due runs, over 1 and over 50 realms, with EXPLAIN plans.

    uv run python bench/claim.py [--sizes 10,10000,1000000] [--realms 1,50] [--repeats 30]

Uses the embedded PostgreSQL server (under COCKPIT_HOME, default .cockpit) unless
COCKPIT_DATABASE_URL names a server (only the server is used, never the database in the URL).
Creates a scratch database, migrates it, seeds due runs with one ``INSERT … SELECT FROM
generate_series`` per size (not through the API), measures ``leases.claim_due_runs`` exactly
as a worker calls it (batch 50, 10 runs per realm) in a transaction that is rolled back so every
repetition sees the same backlog, and drops the database at the end whatever happens. For
comparison it also times the previous claim query (a window over every due run) a few times.
Method and figures: docs/performance.md, "Claiming due runs".
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import platform  # noqa: E402
import secrets  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker  # noqa: E402

from engine.directory.audit import Actor  # noqa: E402
from engine.directory.realms import create_realm  # noqa: E402
from engine.platform.config import load_settings  # noqa: E402
from engine.platform.database import libpq_conninfo, server_url, with_database  # noqa: E402
from engine.platform.db import make_engine, make_sessionmaker  # noqa: E402
from engine.platform.migrate import upgrade  # noqa: E402
from engine.runs.runstore import leases  # noqa: E402
from engine.workflows.catalog import create_workflow  # noqa: E402
from engine.workflows.publication import publish_revision  # noqa: E402

BATCH, SHARE, LEASE = 50, 10, timedelta(seconds=60)
OLD_REPEATS = 3  # the previous query is slow at 1 M: a few timings say enough
UNUSED_BY_THE_CLAIM = ("uq_workflow_runs_trigger", "ix_workflow_runs_subject_id", "ix_workflow_runs_workflow_id_id")
SEED_TIMEOUT_S = 600  # per INSERT; the whole 1 M seeding takes a minute or two on two cores

# The claim before this change: every due run ranked on every pass.
OLD_CLAIM_SQL = text(
    """
    WITH ranked AS (
        SELECT r.id, r.due_at,
               row_number() OVER (PARTITION BY r.realm_id ORDER BY r.due_at) AS place
          FROM workflow_runs r JOIN workflows w ON w.id = r.workflow_id
         WHERE r.due_at IS NOT NULL AND r.due_at <= :now
           AND (r.lease_owner IS NULL OR r.lease_expires_at <= :now)
           AND (w.state <> 'disabled' OR r.state = 'compensating' OR r.cancel_requested_at IS NOT NULL)
    )
    SELECT r.id, r.realm_id
      FROM workflow_runs r JOIN ranked k ON k.id = r.id
     WHERE k.place <= :share
       AND r.due_at IS NOT NULL AND r.due_at <= :now
       AND (r.lease_owner IS NULL OR r.lease_expires_at <= :now)
     ORDER BY k.due_at
     LIMIT :limit
       FOR UPDATE OF r SKIP LOCKED
    """
)

SEED_SQL = """
INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, trigger_type, trigger_key,
                           input, input_version, publisher_id, depth, state, step_index, context, due_at,
                           created_at, updated_at)
SELECT 'wrn_bench' || lpad(g::text, 20, '0'), t.realm_id, t.workflow_id, 1, t.revision_id,
       'usr_bench' || lpad((g %% 100000)::text, 20, '0'), 'manual', 'bench-' || g, '{}'::jsonb, 1, t.publisher_id,
       0, CASE WHEN g %% 3 = 0 THEN 'running' ELSE 'pending' END, 0, '{}'::jsonb,
       now() - interval '1 day' + ((g::bigint * 7919) %% 86400000) * interval '1 millisecond', now(), now()
  FROM generate_series(%(first)s::bigint, %(last)s::bigint) g
  JOIN bench_targets t ON t.k = g %% %(realms)s
"""


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


async def prepare_realms(sessions: async_sessionmaker[AsyncSession], count: int) -> None:
    """``count`` realms, each with a published workflow, listed in bench_targets (k = 0 … count-1)."""
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    async with sessions() as session, session.begin():
        await session.execute(text("DROP TABLE IF EXISTS bench_targets"))
        await session.execute(
            text(
                "CREATE TABLE bench_targets (k int PRIMARY KEY, realm_id text, workflow_id text, "
                "revision_id text, publisher_id text)"
            )
        )
    for k in range(count):
        slug = f"bench{count}x{k}"
        async with sessions() as session, session.begin():
            realm, admin = await create_realm(session, slug, admin_email=f"admin@{slug}.example")
        actor = Actor(type="user", id=admin.id, realm_id=realm.id)
        async with sessions() as session, session.begin():
            workflow, revision = await create_workflow(
                session, actor, name="Bench", definition=definition, has_definition=True, requires_approval=False
            )
        async with sessions() as session, session.begin():
            await publish_revision(session, actor, workflow.id, 1)
            assert revision is not None
            await session.execute(
                text("INSERT INTO bench_targets VALUES (:k, :r, :w, :v, :p)"),
                {"k": k, "r": realm.id, "w": workflow.id, "v": revision.id, "p": admin.id},
            )


def seed(url: str, first: int, last: int, realms: int) -> float:
    started = time.monotonic()
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute(f"SET statement_timeout = '{SEED_TIMEOUT_S}s'")
        conn.execute("SET synchronous_commit = off")
        conn.execute(SEED_SQL, {"first": first, "last": last, "realms": realms})
        conn.execute("ANALYZE workflow_runs")
    return time.monotonic() - started


async def time_claims(sessions: async_sessionmaker[AsyncSession], repeats: int) -> tuple[list[float], int]:
    timings: list[float] = []
    claimed = 0
    after: str | None = None
    for n in range(repeats):
        async with sessions() as session:
            await session.begin()
            started = time.perf_counter()
            taken = await leases.claim_due_runs(
                session,
                f"worker-bench-{n}-aaaa",
                now=datetime.now(UTC),
                lease=LEASE,
                batch_size=BATCH,
                tenant_share=SHARE,
                after_realm=after,
            )
            timings.append(time.perf_counter() - started)
            await session.rollback()
        claimed = len(taken)
        after = taken[-1].realm_id if taken else None
    return timings, claimed


async def time_query(
    sessions: async_sessionmaker[AsyncSession], query: object, repeats: int, *, after: str = ""
) -> list[float]:
    """The claim's SELECT … FOR UPDATE SKIP LOCKED alone (no lease update), rolled back each time."""
    timings: list[float] = []
    for _ in range(repeats):
        params = {"now": datetime.now(UTC), "share": SHARE, "limit": BATCH, "after": after}
        async with sessions() as session:
            await session.begin()
            started = time.perf_counter()
            (await session.execute(query, params)).all()  # type: ignore[call-overload]
            timings.append(time.perf_counter() - started)
            await session.rollback()
    return timings


async def explain(sessions: async_sessionmaker[AsyncSession], query: str, params: dict[str, object]) -> str:
    async with sessions() as session:
        await session.begin()
        rows = await session.execute(text("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + query), params)
        plan = "\n".join(r[0] for r in rows)
        await session.rollback()
    return plan


async def measure(url: str, sizes: list[int], realm_counts: list[int], repeats: int, old: bool) -> list[str]:
    db = make_engine(url, pool_size=2)
    sessions = make_sessionmaker(db)
    lines = [
        "| due runs | realms | seeding s | claim p50 ms | claim p95 ms | runs claimed "
        "| claim SELECT p50 ms | previous SELECT p50 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    plans: list[str] = []
    try:
        for realms in realm_counts:
            async with sessions() as session, session.begin():
                await session.execute(text("TRUNCATE workflow_runs CASCADE"))
            await prepare_realms(sessions, realms)
            seeded = 0
            for size in sizes:
                took = seed(url, seeded + 1, size, realms) if size > seeded else 0.0
                seeded = max(seeded, size)
                await time_claims(sessions, 3)  # warm the cache and the statement cache
                timings, claimed = await time_claims(sessions, repeats)
                p50 = statistics.median(timings)
                p95 = statistics.quantiles(timings, n=20)[-1] if len(timings) >= 2 else timings[0]
                select_p50 = statistics.median(await time_query(sessions, leases.CLAIM_SQL, repeats))
                old_p50 = statistics.median(await time_query(sessions, OLD_CLAIM_SQL, OLD_REPEATS)) if old else None
                row = (
                    f"| {size:,} | {realms} | {took:.1f} | {ms(p50)} | {ms(p95)} | {claimed} | {ms(select_p50)} | "
                    f"{ms(old_p50) if old_p50 is not None else '—'} |"
                )
                print(row, flush=True)
                lines.append(row)
                if size == max(sizes):
                    params = {"now": datetime.now(UTC), "share": SHARE, "limit": BATCH, "after": ""}
                    plans.append(
                        f"claim, {size:,} due runs over {realms} realm(s):\n"
                        + await explain(sessions, leases.CLAIM_SQL.text, params)
                    )
                    if old:
                        plans.append(
                            f"previous query, {size:,} due runs over {realms} realm(s):\n"
                            + await explain(sessions, OLD_CLAIM_SQL.text, params)
                        )
    finally:
        await db.dispose()
    return [*lines, "", *plans]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10,10000,1000000", help="due-run counts (ascending)")
    parser.add_argument("--realms", default="1,50", help="realm counts (default 1,50)")
    parser.add_argument("--repeats", type=int, default=30, help="timed claims per point (default 30)")
    parser.add_argument("--no-previous", action="store_true", help="do not time the previous query")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    realm_counts = [int(r) for r in args.realms.split(",")]
    if not sizes or sizes[0] < 1 or sizes[-1] > 2_000_000 or not 1 <= args.repeats <= 1000:
        parser.error("sizes must be 1 … 2,000,000 and repeats 1 … 1000")
    if not realm_counts or min(realm_counts) < 1 or max(realm_counts) > 200:
        parser.error("realm counts must be 1 … 200")
    maintenance = server_url(load_settings())
    name = f"wt17_claim_bench_{secrets.token_hex(4)}"
    url = with_database(maintenance, name)
    with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        version = conn.execute("SHOW server_version").fetchone()
    started = time.monotonic()
    try:
        print(f"scratch database {name}: migrating …", flush=True)
        upgrade(url)
        with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
            # Indexes the claim never reads only slow the seeding down (this database is scratch).
            for index in UNUSED_BY_THE_CLAIM:
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index)))
        report = asyncio.run(measure(url, sizes, realm_counts, args.repeats, not args.no_previous))
        print()
        print(f"PostgreSQL {version[0] if version else '?'}, {platform.machine()}, {len(report)} lines")
        print("\n".join(report))
        print(f"\ntotal {time.monotonic() - started:.0f} s")
        return 0
    finally:
        with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    sys.exit(main())
