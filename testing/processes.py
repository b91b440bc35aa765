"""Run the product's own processes for acceptance and browser tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from engine.platform.config import PROJECT_ROOT


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cockpit_env(database_url: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COCKPIT_")}
    env.update(
        {
            "COCKPIT_DATABASE_URL": database_url,
            "COCKPIT_HOME": str(home),
            "COCKPIT_SECRET_KEY": "test-secret-key-0123456789abcdef0123456789",
            "COCKPIT_LOG_LEVEL": "INFO",
        }
    )
    env.update(extra)
    return env


def start(args: list[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=dict(env),
        cwd=PROJECT_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_http(url: str, *, timeout: float = 30.0, status: int = 200) -> float:
    """Poll until ``url`` answers ``status``; return the seconds it took."""
    started = time.monotonic()
    last: object = None
    while time.monotonic() - started < timeout:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == status:
                return time.monotonic() - started
            last = response.status_code
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer {status} within {timeout}s (last: {last})")


def stop(process: subprocess.Popen[bytes], *, timeout: float = 20.0) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def descendants_alive(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True) if p.is_running()]
    except psutil.NoSuchProcess:
        return []


def server_cpu(postmaster: int | None) -> float | None:
    """User + system CPU of a PostgreSQL server on this machine: the postmaster, its live children,
    and the children it reaped (benchmarks' database CPU per transition or per request)."""
    if postmaster is None:
        return None
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            if pid == postmaster:
                ticks += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
            elif int(fields[1]) == postmaster:  # ppid
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def postmaster_pid(data_directory: str | Path) -> int | None:
    """The postmaster's pid from its data directory (None when it cannot be read)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((Path(data_directory) / "postmaster.pid").read_text().split()[0])
    return None


async def wait_for(condition: object, what: str, timeout: float = 120) -> object:  # noqa: ASYNC109
    """The first true value of ``await condition()``, asked every 0.2 s; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await condition()  # type: ignore[operator]
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")
