"""Web processes: a mix of API reads and writes against ``cockpit serve --processes N``.

Starts the real web server on a scratch database (cloned from the migrated test template on the
embedded server under ``.cockpit/test``), makes a realm, an administrator's API token and
``--users`` users (not timed), then for each process count sends ``--requests`` requests with
``--concurrency`` in flight over one keep-alive client and reports throughput and latency:

    uv run python bench/web.py [--processes 1,2] [--requests 3000] [--concurrency 30] [--users 200]

The mix, drawn from a seeded random source so every run sends the same requests:
40 % ``GET /users?limit=50``, 20 % ``GET /users/{id}``, 10 % ``GET /audit-events?limit=20``,
15 % ``POST /users`` (a new user: a row, its audit event, its outbox event) and
15 % ``PATCH /users/{id}`` (a new display name, audited). Reads run under the realm guard like any
automation's. The client runs on the same machine as the server, so on two cores it competes
with the web processes for them; every request must answer 2xx (a failure or a dropped
connection is counted and named on stderr). Server CPU per request is the user + system time of
the server's processes over the timed part, divided by the requests (column `CPU ms`): the figure that moves
least with whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.platform.config import PROJECT_ROOT
from testing.databases import clone_database, drop_database, ensure_template, server_maintenance_url
from testing.processes import cockpit_env, free_port, start, stop, wait_http

REALM = "bench"


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"cockpit {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


def plan(requests: int, user_ids: list[str], seed: int) -> list[tuple[str, str, dict[str, Any] | None]]:
    rng = random.Random(seed)
    api = f"/api/v1/realms/{REALM}"
    made: list[tuple[str, str, dict[str, Any] | None]] = []
    for n in range(requests):
        draw = rng.random()
        if draw < 0.40:
            made.append(("GET", f"{api}/users?limit=50", None))
        elif draw < 0.60:
            made.append(("GET", f"{api}/users/{rng.choice(user_ids)}", None))
        elif draw < 0.70:
            made.append(("GET", f"{api}/audit-events?limit=20", None))
        elif draw < 0.85:
            tag = f"{seed}-{n}-{rng.randrange(10**9)}"
            made.append(("POST", f"{api}/users", {"email": f"u{tag}@bench.example", "display_name": f"User {tag}"}))
        else:
            made.append(("PATCH", f"{api}/users/{rng.choice(user_ids)}", {"display_name": f"Renamed {n}"}))
    return made


async def load(
    base: str, token: str, requests: list[tuple[str, str, dict[str, Any] | None]], concurrency: int
) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    failures = 0
    queue = iter(requests)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, limits=limits) as client:

        async def one_client() -> None:
            nonlocal failures
            for method, path, body in queue:
                started = time.perf_counter()
                try:
                    response = await client.request(method, path, json=body)
                except httpx.TransportError as exc:  # counted, and said, not hidden
                    print(f"{method} {path}: {exc.__class__.__name__}", file=sys.stderr, flush=True)
                    failures += 1
                    continue
                latencies.append(time.perf_counter() - started)
                if not response.is_success:
                    failures += 1

        began = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return elapsed, latencies, failures


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) of the server and its web processes so far."""
    import psutil

    total = 0.0
    for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2", help="process counts to measure, comma-separated")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=30)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]

    maintenance = server_maintenance_url()
    url = clone_database(maintenance, ensure_template(maintenance))
    home = Path(tempfile.mkdtemp(prefix="cockpit-bench-web-"))
    env = cockpit_env(url, home, COCKPIT_LOG_LEVEL="INFO")
    rows = []
    try:
        cli(env, "admin", "create-realm", REALM, "--admin-email", "admin@bench.example")
        token = cli(env, "admin", "token", "--realm", REALM, "--email", "admin@bench.example", "--audience", "admin")
        user_ids: list[str] = []
        for processes in counts:
            port = free_port()
            server = start(
                ["serve", "--no-migrate", "--port", str(port), "--processes", str(processes)],
                env,
                home / f"serve-{processes}.log",
            )
            base = f"http://127.0.0.1:{port}"
            try:
                wait_http(base + "/healthz", timeout=120)
                time.sleep(3 * processes)  # every process up and its pools warm
                if not user_ids:
                    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
                        for n in range(args.users):
                            made = client.post(
                                f"/api/v1/realms/{REALM}/users",
                                json={"email": f"seed{n}@bench.example", "display_name": f"Seed {n}"},
                            )
                            made.raise_for_status()
                            user_ids.append(made.json()["id"])
                warm = plan(200, user_ids, seed=args.seed + 1000 + processes)
                asyncio.run(load(base, token, warm, args.concurrency))
                requests = plan(args.requests, user_ids, seed=args.seed + processes)
                cpu = server_cpu(server.pid)
                elapsed, latencies, failures = asyncio.run(load(base, token, requests, args.concurrency))
                cpu = server_cpu(server.pid) - cpu
            finally:
                stop(server, timeout=60)
            rows.append(
                (
                    processes,
                    len(latencies),
                    failures,
                    elapsed,
                    len(latencies) / elapsed,
                    pct(latencies, 0.50),
                    pct(latencies, 0.95),
                    pct(latencies, 0.99),
                    statistics.mean(latencies) * 1000,
                    cpu / max(1, len(latencies)) * 1000,
                )
            )
            print(f"{processes} process(es): done", flush=True)
    finally:
        drop_database(maintenance, url)
        shutil.rmtree(home, ignore_errors=True)

    print(
        f"\n{args.requests} requests (40 % list, 20 % one user, 10 % audit, 15 % create, 15 % rename), "
        f"concurrency {args.concurrency}\n"
    )
    print("| processes | requests | failed | seconds | requests/s | p50 ms | p95 ms | p99 ms | mean ms | CPU ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p, n, f, s, rps, p50, p95, p99, mean, cpu_ms in rows:
        print(
            f"| {p} | {n} | {f} | {s:.1f} | {rps:.0f} | {p50:.0f} | {p95:.0f} | {p99:.0f} | {mean:.0f} | {cpu_ms:.1f} |"
        )
    print(f"\nload average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
