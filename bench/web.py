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
least with whatever else the machine is doing. Database CPU per request (column `database CPU ms`) is the
same for the PostgreSQL server's processes, when it runs on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.platform.config import PROJECT_ROOT
from engine.platform.database import libpq_conninfo
from testing.databases import clone_database, drop_database, ensure_template, server_maintenance_url
from testing.processes import cockpit_env, free_port, postmaster_pid, server_cpu, start, stop, wait_http
from testing.servers import server_folder
from testing.topology import (
    Network,
    add_hosts,
    host_env,
    start_proxy,
    throwaway_ca,
    unit_command,
    why_no_namespaces,
)

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
    base: str,
    token: str,
    requests: list[tuple[str, str, dict[str, Any] | None]],
    concurrency: int,
    verify: ssl.SSLContext | bool = True,
) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    failures = 0
    queue = iter(requests)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60, limits=limits, verify=verify) as client:

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


def web_cpu(*pids: int) -> float:
    """CPU seconds (user + system) of the servers and their web processes so far."""
    import psutil

    total = 0.0
    for pid in pids:
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


def data_directory_postmaster(url: str) -> int | None:
    """The postmaster's pid of the server at ``url`` when it runs on this machine."""
    with psycopg.connect(libpq_conninfo(url)) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    return postmaster_pid(row[0]) if row else None


def seed_users(base: str, token: str, count: int, verify: ssl.SSLContext | bool = True) -> list[str]:
    made_ids: list[str] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, verify=verify) as client:
        for n in range(count):
            made = client.post(
                f"/api/v1/realms/{REALM}/users", json={"email": f"seed{n}@bench.example", "display_name": f"Seed {n}"}
            )
            made.raise_for_status()
            made_ids.append(made.json()["id"])
    return made_ids


def measure(
    setup: str,
    base: str,
    token: str,
    user_ids: list[str],
    pids: list[int],
    seed: int,
    args: argparse.Namespace,
    verify: ssl.SSLContext | bool = True,
    postmaster: int | None = None,
) -> tuple[Any, ...]:
    """200 warm-up requests, then ``--requests`` of the mix; one row of the table."""
    warm = plan(200, user_ids, seed=args.seed + 1000 + seed)
    asyncio.run(load(base, token, warm, args.concurrency, verify))
    requests = plan(args.requests, user_ids, seed=args.seed + seed)
    cpu, db_cpu = web_cpu(*pids), server_cpu(postmaster)
    elapsed, latencies, failures = asyncio.run(load(base, token, requests, args.concurrency, verify))
    cpu, db_after = web_cpu(*pids) - cpu, server_cpu(postmaster)
    db_ms = None if db_cpu is None or db_after is None else (db_after - db_cpu) / max(1, len(latencies)) * 1000
    row = (
        setup,
        len(latencies),
        failures,
        elapsed,
        len(latencies) / elapsed,
        pct(latencies, 0.50),
        pct(latencies, 0.95),
        pct(latencies, 0.99),
        statistics.mean(latencies) * 1000,
        cpu / max(1, len(latencies)) * 1000,
        db_ms,
    )
    print(f"{setup}: done; {format_row(row)}", flush=True)
    return row


def format_row(row: tuple[Any, ...]) -> str:
    p, n, f, s, rps, p50, p95, p99, mean, cpu_ms, db_ms = row
    db = "" if db_ms is None else f"{db_ms:.1f}"
    return (
        f"| {p} | {n} | {f} | {s:.1f} | {rps:.0f} | {p50:.0f} | {p95:.0f} | {p99:.0f} | {mean:.0f} | {cpu_ms:.1f} "
        f"| {db} |"
    )


def local_rows(args: argparse.Namespace) -> list[tuple[Any, ...]]:
    """``cockpit serve --processes N`` on this machine, on a clone of the embedded test server's template."""
    maintenance = server_maintenance_url()
    url = clone_database(maintenance, ensure_template(maintenance))
    postmaster = data_directory_postmaster(maintenance)
    home = Path(tempfile.mkdtemp(prefix="cockpit-bench-web-"))
    env = cockpit_env(url, home, COCKPIT_LOG_LEVEL="INFO")
    rows = []
    try:
        cli(env, "admin", "create-realm", REALM, "--admin-email", "admin@bench.example")
        token = cli(env, "admin", "token", "--realm", REALM, "--email", "admin@bench.example", "--audience", "admin")
        user_ids: list[str] = []
        for processes in [int(n) for n in args.processes.split(",")]:
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
                user_ids = user_ids or seed_users(base, token, args.users)
                setup = f"{processes} process{'es' if processes > 1 else ''}, this machine, http"
                rows.append(measure(setup, base, token, user_ids, [server.pid], processes, args, postmaster=postmaster))
            finally:
                stop(server, timeout=60)
    finally:
        drop_database(maintenance, url)
        shutil.rmtree(home, ignore_errors=True)
    return rows


def topology_rows(args: argparse.Namespace) -> list[tuple[Any, ...]]:
    """Namespace hosts (testing/topology.py): PostgreSQL, two web hosts, nginx with a throwaway CA.

    The same mix against web1 alone (http, its private address), then through the proxy (https) to
    web1 and web2. Each web host runs its unit's ``ExecStart`` with ``--processes 1`` and the
    environment of ``deploy/cockpit.env.example``; the client runs in the root namespace.
    """
    reason = why_no_namespaces()
    if reason or shutil.which("nginx") is None:
        raise SystemExit(f"--topology: {reason or 'nginx is not installed (apt-get install nginx)'}")
    rows = []
    with server_folder("cockpit-bench-web-hosts-") as folder:
        network = Network().open()
        layout = None
        try:
            layout = add_hosts(network, folder, web=2, workers=0, proxy=True, durable=True)
            assert layout.proxy is not None
            print(
                f"hosts: PostgreSQL {layout.postgres.host.address}, web {[h.address for h in layout.web]}, "
                f"proxy {layout.proxy.address}",
                flush=True,
            )
            secret = secrets.token_hex(32)
            envs = {h.role: host_env(folder, h, layout.postgres, layout.proxy, secret) for h in layout.web}
            migrated = layout.web[0].run(*unit_command("cockpit-migrate.service"), env=envs["web1"], timeout=300)
            if migrated.returncode != 0:
                raise SystemExit(f"cockpit-migrate failed: {migrated.stdout}{migrated.stderr}")
            env = envs["web1"]
            cli(env, "admin", "create-realm", REALM, "--admin-email", "admin@bench.example")
            token = cli(
                env, "admin", "token", "--realm", REALM, "--email", "admin@bench.example", "--audience", "admin"
            )
            servers = {}
            for host in layout.web:
                command = [*unit_command("cockpit-web.service"), "--processes", "1"]
                servers[host.role] = host.start(command, envs[host.role], folder / host.role / "web.log")
            for host in layout.web:  # /healthz: /readyz also waits for a worker's heartbeat, and none runs here
                wait_http(f"http://{host.address}:8000/healthz", timeout=180)
            time.sleep(3)
            web1 = f"http://{layout.web[0].address}:8000"
            user_ids = seed_users(web1, token, args.users)
            postmaster = postmaster_pid(layout.postgres.data)
            setup = "1 web host, 1 process, http"
            rows.append(measure(setup, web1, token, user_ids, [servers["web1"].pid], 11, args, postmaster=postmaster))
            certificates = throwaway_ca(folder / "tls", layout.proxy.address)
            web = [f"{h.address}:8000" for h in layout.web]
            base = start_proxy(layout.proxy, folder / "nginx", web, certificates, ready="/healthz")
            verify = ssl.create_default_context(cafile=certificates.ca)
            pids = [p.pid for p in servers.values()]
            setup = "2 web hosts × 1 process behind nginx, https"
            rows.append(measure(setup, base, token, user_ids, pids, 12, args, verify, postmaster))
        finally:
            if layout is not None:
                layout.postgres.stop()
            problems = network.close()
            if problems:
                print(f"could not remove every host: {problems}", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2", help="process counts to measure, comma-separated")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=30)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--topology",
        action="store_true",
        help="then the same mix on namespace hosts (needs root and nginx): one web host over http, and two "
        "behind the proxy over https",
    )
    args = parser.parse_args()
    load_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    rows = local_rows(args)
    if args.topology:
        rows += topology_rows(args)

    print(
        f"\n{args.requests} requests (40 % list, 20 % one user, 10 % audit, 15 % create, 15 % rename), "
        f"concurrency {args.concurrency}\n"
    )
    print(
        "| setup | requests | failed | seconds | requests/s | p50 ms | p95 ms | p99 ms | mean ms | CPU ms "
        "| database CPU ms |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(format_row(row))
    print(f"\nload average at the start: {load_start}; at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
