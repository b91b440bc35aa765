"""Validation throughput: a 20-step definition through ``POST /workflows/validate``.

Starts the real web server (``cockpit serve``) on a scratch database, creates a realm with the
roles, groups, approvers, organizations and webhooks a 20-step definition names, then measures
requests per second with a few concurrent clients for a fixed time. Baselines measured in the
same run against the same server: ``GET /healthz`` (the framework's floor) and the validation
function called in-process (no HTTP, no database). Prints a table with the ratios.

    uv run python bench/validation.py [--seconds 10] [--clients 4]
    uv run python bench/validation.py --profile validate.svg   # py-spy of the server while validating

It also reports the server's own CPU per request (from ``/proc``), the figure that does not move
with whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.directory import organizations
from engine.directory.accounts import create_user
from engine.directory.audit import Actor
from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import Role, WebhookSubscription
from engine.directory.realms import create_realm
from engine.directory.tokens import mint_token
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.ids import new_id
from engine.workflows.definitions.validation import validate_definition
from testing.databases import clone_database, drop_database, ensure_template, server_maintenance_url
from testing.processes import cockpit_env, free_port, start, stop, wait_http


async def prepare(database_url: str) -> tuple[str, str, dict[str, Any]]:
    engine = make_engine(database_url, pool_size=2)
    sessions = make_sessionmaker(engine)
    async with sessions() as session, session.begin():
        realm, admin = await create_realm(session, "bench", admin_email="admin@bench.example")
        actor = Actor(type="user", id=admin.id, realm_id=realm.id)
        token, _ = await mint_token(session, actor, audience="admin", user=admin)
        org = await organizations.create_organization(session, actor, name="Engineering")
        approver = await create_user(
            session, actor, email="approver@bench.example", display_name="Approver", authority=None
        )
        roles = []
        for i in range(5):
            role = Role(id=new_id("rol"), realm_id=realm.id, name=f"role-{i}", permissions=["realm.workflows.read"])
            session.add(role)
            roles.append(role)
        webhook = WebhookSubscription(
            id=new_id("whk"), realm_id=realm.id, destination="https://hooks.example/step", secret_enc="unused"
        )
        session.add(webhook)
        await session.flush()
        authority = await load_authority(session, realm.id, "user", admin.id)
        group, _ = await create_group(session, actor, authority, org.id, name="Team")
    await engine.dispose()
    steps: list[dict[str, Any]] = [
        {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "72h"},
    ]
    for i in range(8):
        steps.append(
            {
                "id": f"grant-{i}",
                "type": "assign_role",
                "role_id": roles[i % 5].id,
                "scope": "realm",
                "expires_in": "720h",
                "retry": {"max_attempts": 5, "backoff": "30s"},
            }
        )
    for i in range(4):
        steps.append({"id": f"team-{i}", "type": "add_to_group", "group_id": group.id})
    for i in range(3):
        steps.append({"id": f"tell-{i}", "type": "notify", "notice": "access_granted"})
    steps.append({"id": "wait", "type": "wait", "duration": "1h"})
    steps.append({"id": "sync", "type": "call_webhook", "subscription_id": webhook.id, "compensate": True})
    steps.append({"id": "expire", "type": "remove_role", "role_id": roles[0].id})
    steps.append({"id": "done", "type": "end"})
    definition = {
        "schema_version": 1,
        "triggers": [
            {"type": "event", "event_types": ["organization.membership.added"], "organization_id": org.id},
            {"type": "manual"},
        ],
        "steps": steps,
        "retry": {"max_attempts": 3, "backoff": "30s"},
    }
    assert len(steps) == 20
    return realm.slug, token, definition


async def hammer(
    url: str,
    *,
    seconds: float,
    clients: int,
    method: str = "GET",
    json: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client_loop(client: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            response = await client.request(method, url, json=json, headers=headers)
            response.raise_for_status()
            latencies.append(time.perf_counter() - started)

    async with httpx.AsyncClient(timeout=30) as client:
        began = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return len(latencies) / elapsed, latencies


def in_process(definition: dict[str, Any], seconds: float) -> float:
    count = 0
    deadline = time.perf_counter() + seconds
    began = time.perf_counter()
    while time.perf_counter() < deadline:
        assert validate_definition(definition) == []
        count += 1
    return count / (time.perf_counter() - began)


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--port", type=int, default=0, help="port of the server (default: a free one)")
    parser.add_argument(
        "--profile", type=Path, help="record the server with py-spy while it validates (SVG, or collapsed stacks)"
    )
    args = parser.parse_args()
    maintenance = server_maintenance_url()
    url = clone_database(maintenance, ensure_template(maintenance))
    home = Path(tempfile.mkdtemp(prefix="cockpit-bench-"))
    server = None
    try:
        slug, token, definition = asyncio.run(prepare(url))
        port = args.port or free_port()
        env = cockpit_env(url, home, COCKPIT_LOG_LEVEL="WARNING")
        server = start(["serve", "--no-migrate", "--port", str(port)], env, home / "server.log")
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout=60)
        headers = {"Authorization": f"Bearer {token}"}
        validate_url = f"{base}/api/v1/realms/{slug}/workflows/validate"
        check = httpx.post(validate_url, json={"definition": definition}, headers=headers).json()
        assert check == {"valid": True, "errors": []}, check
        asyncio.run(
            hammer(
                validate_url,
                seconds=2,
                clients=args.clients,
                method="POST",
                json={"definition": definition},
                headers=headers,
            )
        )  # warm-up
        cpu = process_cpu(server.pid)
        health_rps, health_latencies = asyncio.run(
            hammer(base + "/healthz", seconds=args.seconds, clients=args.clients)
        )
        health_cpu = (process_cpu(server.pid) - cpu) / max(1, len(health_latencies)) * 1000
        profiler = None
        if args.profile:
            profiler = subprocess.Popen(
                [
                    "uvx",
                    "py-spy",
                    "record",
                    "-p",
                    str(server.pid),
                    "-o",
                    str(args.profile),
                    "-d",
                    str(int(args.seconds)),
                ]
                # Collapsed stacks (one line per stack and its count) unless an SVG is asked for.
                + ([] if args.profile.suffix == ".svg" else ["-f", "raw"])
            )
            time.sleep(1)
        cpu = process_cpu(server.pid)
        validate_rps, latencies = asyncio.run(
            hammer(
                validate_url,
                seconds=args.seconds,
                clients=args.clients,
                method="POST",
                json={"definition": definition},
                headers=headers,
            )
        )
        validate_cpu = (process_cpu(server.pid) - cpu) / max(1, len(latencies)) * 1000
        if profiler is not None:
            profiler.wait(timeout=args.seconds + 60)
        local_rps = in_process(definition, args.seconds / 2)
    finally:
        if server is not None:
            stop(server)
        drop_database(maintenance, url)
    print(f"machine: {os.cpu_count()} cores; {args.clients} concurrent clients; {args.seconds:.0f} s per measurement")
    print(f"{'measurement':<48}{'per second':>12}{'ratio':>10}")
    print(f"{'GET /healthz (baseline, same server)':<48}{health_rps:>12.0f}{1.0:>10.2f}")
    print(f"{'POST /workflows/validate, 20 steps':<48}{validate_rps:>12.0f}{validate_rps / health_rps:>10.2f}")
    print(f"{'validate_definition in-process (no HTTP, no DB)':<48}{local_rps:>12.0f}{local_rps / health_rps:>10.2f}")
    print(f"server CPU per request: healthz {health_cpu:.2f} ms, validate {validate_cpu:.2f} ms")
    print(
        f"validate latency: p50 {pct(latencies, 0.5):.1f} ms, p95 {pct(latencies, 0.95):.1f} ms, "
        f"mean {statistics.mean(latencies) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
