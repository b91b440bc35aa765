"""``cockpit serve --processes N``: several web processes on one port, their counters summed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from engine.platform.config import PROJECT_ROOT
from testing.processes import cockpit_env, descendants_alive, free_port, start, stop, wait_http

DEADLINE_S = 120  # generous: a loaded machine starts Python and PostgreSQL connections slowly
REQUESTS = 300


def healthz_count(base: str) -> float:
    text = httpx.get(base + "/metrics", timeout=30).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "cockpit_http_requests_total" and s.labels.get("route") == "/healthz"
    )


def healthz_count_by_process(folder: Path) -> dict[int, float]:
    """Each process's own file: which processes answered, and how many."""
    counts: dict[int, float] = {}
    for path in folder.glob("counter_*.db"):
        pid = int(path.stem.split("_")[1])
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(path)):
            _, name, labels, _ = json.loads(key)
            if name == "cockpit_http_requests_total" and labels.get("route") == "/healthz":
                counts[pid] = counts.get(pid, 0.0) + value
    return counts


def web_processes(parent: int) -> set[int]:
    """The supervisor's live web processes (not a multiprocessing helper)."""
    found = set()
    for child in psutil.Process(parent).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and not any("resource_tracker" in p for p in child.cmdline()):
                found.add(child.pid)
        except psutil.Error:  # gone, or dead and not reaped yet
            continue
    return found


def fresh_connection_get(url: str) -> int:
    with httpx.Client(timeout=30) as client:  # one connection per request, so the kernel spreads them
        return client.get(url).status_code


def test_two_web_processes_share_the_port_and_their_counters_add_up(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    home = tmp_path / "home"
    env = cockpit_env(database_url, home, COCKPIT_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    web = start(["serve", "--no-migrate", "--processes", "2"], env, tmp_path / "web.log")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while (tmp_path / "web.log").read_text().count("Application startup complete") < 2:
            assert time.monotonic() < deadline, "two web processes did not start"
            time.sleep(0.2)
        servers = web_processes(web.pid)
        assert len(servers) == 2
        before = healthz_count(base)
        with ThreadPoolExecutor(max_workers=20) as pool:
            statuses = list(pool.map(fresh_connection_get, [base + "/healthz"] * REQUESTS))
        assert statuses == [200] * REQUESTS

        # One scrape (any process answers it) sums every process's counts: exactly what was sent.
        deadline = time.monotonic() + 10
        while (seen := healthz_count(base) - before) < REQUESTS and time.monotonic() < deadline:
            time.sleep(0.2)
        assert seen == REQUESTS
        by_process = healthz_count_by_process(home / "metrics")
        answering = {pid for pid, count in by_process.items() if count > 0}
        assert answering <= servers and len(answering) == 2, (by_process, servers)
        assert sum(by_process.values()) == before + REQUESTS

        # A process that dies is replaced; the port keeps answering.
        os.kill(min(servers), signal.SIGKILL)
        deadline = time.monotonic() + DEADLINE_S
        while len(now := web_processes(web.pid) - {min(servers)}) < 2:
            assert time.monotonic() < deadline, "the dead web process was not replaced"
            time.sleep(0.2)
        wait_http(base + "/healthz", timeout=DEADLINE_S)
        assert max(servers) in now
    finally:
        code = stop(web, timeout=60)
    assert code == 0
    assert descendants_alive(web.pid) == []
    assert "Traceback" not in (tmp_path / "web.log").read_text()


def test_processes_below_one_are_refused(tmp_path: Path) -> None:
    env = cockpit_env("postgresql://127.0.0.1:1/none", tmp_path / "home")
    for given in ("0", "-1"):
        done = subprocess.run(
            [sys.executable, "-m", "cockpit.cli", "serve", "--processes", given],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 1
        assert done.stderr.strip() == f"cockpit: --processes must be at least 1, got {given}"
