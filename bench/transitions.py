"""Statements, round trips and worker CPU per engine transition, measured in one process.

    uv run python bench/transitions.py [--runs 50] [--steps 8] [--batch 50]

A ``Runner`` runs in this process (no Procrastinate, no LISTEN) on a scratch database of the
server named by COCKPIT_DATABASE_URL (or the embedded one), over ``--runs`` manual runs of
``--steps`` internal steps (the workload of ``bench/engine.py``). Two passes over two sets of runs:

1. **counted**: every statement asyncpg sends is logged (transaction control included), and the
   prepares it makes (a statement not yet in its cache costs one round trip more);
2. **timed**: no logging; the process CPU time (user + system) over the transitions made.

A transition is one committed step of one run (its succeeded attempt). Under ``--profile FILE``
the timed pass also writes a py-spy flame graph (needs py-spy: ``uv run --with py-spy …``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import collections  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from sqlalchemy import event, text  # noqa: E402

from bench.engine import Options, prepare  # noqa: E402
from engine.platform.config import load_settings  # noqa: E402
from engine.platform.database import libpq_conninfo, server_url, with_database  # noqa: E402
from engine.platform.db import make_engine, make_sessionmaker  # noqa: E402
from engine.platform.migrate import upgrade  # noqa: E402
from engine.runs.runner import Runner, RunnerSettings  # noqa: E402
from testing.chaos import start_manual_runs  # noqa: E402

PASS_LIMIT = 2000  # passes per phase, whatever happens


class Counter:
    def __init__(self) -> None:
        self.on = False
        self.statements: collections.Counter[str] = collections.Counter()
        self.elapsed: collections.Counter[str] = collections.Counter()

    def log(self, record: Any) -> None:
        self.log_text(record.query)
        if self.on and record.elapsed is not None:
            self.elapsed[re.sub(r"\s+", " ", record.query).strip()[:110]] += record.elapsed

    def log_text(self, query: str) -> None:
        if self.on:
            self.statements[re.sub(r"\s+", " ", query).strip()[:110]] += 1


async def phase(
    runner: Runner, sessions: Any, setup: Any, subjects: list[str], counter: Counter | None = None
) -> tuple[int, float, float]:
    run_ids = await start_manual_runs(sessions, setup.directory.actor, setup.manual_workflow_id, subjects)
    if counter is not None:
        counter.on = True  # the runs' start is not counted
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(PASS_LIMIT):
        if not await runner.run_pass():
            async with sessions() as session:
                open_runs = await session.scalar(
                    text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND finished_at IS NULL"),
                    {"ids": run_ids},
                )
            if not open_runs:
                break
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    async with sessions() as session:
        transitions = await session.scalar(
            text("SELECT count(*) FROM step_attempts WHERE run_id = ANY(:ids) AND state = 'succeeded'"),
            {"ids": run_ids},
        )
    return int(transitions or 0), cpu, wall


async def measure(url: str, args: argparse.Namespace) -> None:
    db = make_engine(url, pool_size=4)
    counter = Counter()

    @event.listens_for(db.sync_engine, "connect")
    def _attach(dbapi_connection: Any, _record: Any) -> None:
        raw = dbapi_connection.driver_connection
        raw.add_query_logger(counter.log)  # what asyncpg sends as simple queries: transaction control

    @event.listens_for(db.sync_engine, "before_cursor_execute")
    def _statement(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        counter.log_text(statement)  # what SQLAlchemy sends (prepared statements)

    sessions = make_sessionmaker(db)
    options = Options(runs=args.runs, steps=args.steps, pgbench_seconds=0, samples=2, keep=False)
    setup = await prepare(sessions, options)
    settings = RunnerSettings(batch_size=args.batch, group_commit=args.group)
    runner = Runner(sessions, "worker-bench-1-local", settings=settings)
    warm = setup.batches[0][: max(2, args.runs // 10)]
    await phase(runner, sessions, setup, warm)  # warm the statement caches
    counted_subjects = setup.batches[0][len(warm) :]
    transitions, _, _ = await phase(runner, sessions, setup, counted_subjects, counter)
    counter.on = False
    total = sum(counter.statements.values())
    control = sum(n for q, n in counter.statements.items() if re.match(r"(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)", q))
    print(f"counted pass: {len(counted_subjects)} runs, {transitions} transitions")
    print(f"statements per transition: {total / transitions:.1f} (transaction control {control / transitions:.1f})")
    print("most frequent statements (count per transition, mean time when asyncpg logs it):")
    for query, count in counter.statements.most_common(args.top):
        took = counter.elapsed.get(query)
        print(f"  {count / transitions:5.2f}  {f'{took * 1000 / count:6.2f} ms' if took else '         '}  {query}")
    profiler = None
    if args.profile:
        profiler = subprocess.Popen(
            [
                *("py-spy", "record", "--pid", str(os.getpid()), "--output", args.profile, "--rate", "200"),
                *("--nonblocking", "--format", "raw" if args.profile.endswith(".txt") else "flamegraph"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await asyncio.sleep(1.0)
    transitions, cpu, wall = await phase(runner, sessions, setup, setup.batches[1])
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)  # py-spy writes its output on an interrupt
        profiler.wait(timeout=30)
    print(
        f"timed pass: {len(setup.batches[1])} runs, {transitions} transitions in {wall:.2f} s "
        f"= {transitions / wall:.1f}/s; CPU {cpu * 1000 / transitions:.2f} ms per transition"
    )
    await db.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Statements and CPU per engine transition, in one process.")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=50, help="runs claimed per pass")
    parser.add_argument("--group", type=int, default=50, help="runs per commit (1: each run commits alone)")
    parser.add_argument("--top", type=int, default=25, help="statements listed")
    parser.add_argument("--profile", help="py-spy profile of the timed pass: flame graph (SVG) or *.txt stacks")
    parser.add_argument("--db-prefix", default="cockpit_bench")
    args = parser.parse_args(argv)
    maintenance = server_url(load_settings())
    name = f"{args.db_prefix}_{secrets.token_hex(4)}"
    url = with_database(maintenance, name)
    with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        upgrade(url)
        asyncio.run(measure(url, args))
    finally:
        with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
