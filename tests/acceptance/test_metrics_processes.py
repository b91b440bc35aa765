"""The worker's counters reach the web server's ``/metrics`` and survive a worker's restart.

``cockpit serve`` and ``cockpit worker`` run as separate processes sharing one home folder, so
one metrics folder (prometheus-client's multiprocess mode). Runs are made by the real worker.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from testing.diagnostics import Team
from testing.factories import RealmHandle
from testing.processes import cockpit_env, free_port, start, stop, wait_http
from testing.runs import start as start_run

DEADLINE_S = 120  # generous: a loaded machine starts Python and PostgreSQL connections slowly


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(base + "/metrics", timeout=30)
    assert response.status_code == 200, response.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def worker_runs(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], task: str) -> float:
    return found.get(("cockpit_worker_runs_total", (("task", task),)), 0.0)


def failed_jobs(found: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return found.get(("cockpit_jobs_failed_total", (("type", "workflow"),)), 0.0)


async def finished(realm: RealmHandle, run_id: str) -> bool:
    async with realm.sessions() as session:
        state = await session.scalar(text("SELECT state FROM workflow_runs WHERE id = :r"), {"r": run_id})
    return state in {"succeeded", "failed", "compensated", "compensation_failed", "cancelled"}


async def wait_until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if await condition():
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what}: not within {DEADLINE_S} s")


async def test_worker_counters_reach_metrics_and_survive_a_restart(
    realm: RealmHandle, database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = cockpit_env(database_url, tmp_path / "home", COCKPIT_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    web = start(["serve", "--no-migrate"], env, tmp_path / "web.log")
    worker = start(["worker", "--no-migrate"], env, tmp_path / "worker-1.log")
    try:
        wait_http(base + "/healthz", timeout=DEADLINE_S)
        team = await Team.make(realm)
        ok = await start_run(realm, team.workflow_id, (await team.subject(True)).id)
        bad = await start_run(realm, team.workflow_id, (await team.subject(False)).id)
        await wait_until(lambda: finished(realm, ok), "the succeeding run finishes")
        await wait_until(lambda: finished(realm, bad), "the failing run finishes")

        async def counted() -> bool:
            found = scrape(base)
            return failed_jobs(found) == 1 and worker_runs(found, "workflows.run") >= 1

        await wait_until(counted, "the worker's counters show in the web server's /metrics")
        found = scrape(base)
        assert worker_runs(found, "outbox.dispatch") >= 1
        assert (tmp_path / "home" / "metrics").is_dir()

        # The worker stops; its counts stay. A new worker adds to them.
        assert stop(worker) == 0
        assert failed_jobs(scrape(base)) == 1
        worker = start(["worker", "--no-migrate"], env, tmp_path / "worker-2.log")
        again = await start_run(realm, team.workflow_id, (await team.subject(False)).id)
        await wait_until(lambda: finished(realm, again), "the second failing run finishes")

        async def added() -> bool:
            return failed_jobs(scrape(base)) == 2

        await wait_until(added, "the new worker's count adds to the old one's")
    finally:
        stop(worker)
        stop(web)
    for log in ("web.log", "worker-1.log", "worker-2.log"):
        path = tmp_path / log
        if path.exists():
            assert "Traceback" not in path.read_text(), log
