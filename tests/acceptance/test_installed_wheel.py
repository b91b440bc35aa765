"""The product as an operator installs it: the wheel `uv build` makes, installed into a fresh
virtual environment, runs `cockpit up` from an empty folder with no checkout in sight."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from engine.platform.config import PROJECT_ROOT
from testing.processes import free_port
from testing.servers import server_folder, stop_server

DEADLINE_S = 240  # a first start makes a database cluster; generous so a loaded machine never fails it


def uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.skip("uv is not on PATH")
    return found


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


def install(wheel: Path, venv: Path) -> None:
    """Into a fresh environment: from uv's cache when it holds every dependency, else the index."""
    run([uv(), "venv", "--quiet", "--python", sys.executable, str(venv)])
    command = [uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)]
    if subprocess.run([*command, "--offline"], capture_output=True, timeout=600).returncode != 0:
        run(command)


def ready(base: str) -> bool:
    try:
        return httpx.get(base + "/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_built_wheel_installed_in_a_fresh_environment_runs_cockpit_up_from_any_folder() -> None:
    with server_folder("cockpit-wheel-") as folder:
        installed_and_started(folder)


def installed_and_started(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([uv(), "build", "--quiet", "--out-dir", str(dist)], cwd=PROJECT_ROOT)
    (wheel,) = dist.glob("lifecycle_cockpit-*.whl")
    version = wheel.name.split("-")[1]
    venv = tmp_path / "venv"
    install(wheel, venv)

    site = tmp_path / "anywhere"
    site.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COCKPIT_", "PYTHON", "VIRTUAL_ENV"))}
    port = free_port()
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", COCKPIT_PORT=str(port))
    # What runs is the installed code, not this checkout.
    where = run(
        [str(venv / "bin" / "python"), "-c", "import cockpit, engine; print(cockpit.__file__, engine.__file__)"],
        cwd=site,
        env=env,
    )
    assert str(PROJECT_ROOT) not in where.stdout and str(venv) in where.stdout

    log = tmp_path / "up.log"
    proc = subprocess.Popen(
        [str(venv / "bin" / "cockpit"), "up"], cwd=site, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not ready(base):
            assert proc.poll() is None, f"`cockpit up` stopped (exit {proc.returncode}):\n{log.read_text()}"
            assert time.monotonic() < deadline, f"not ready within {DEADLINE_S} s:\n{log.read_text()}"
            time.sleep(0.5)
        health = httpx.get(base + "/healthz", timeout=10)
        assert health.json() == {"status": "ok", "version": version}
        page = httpx.get(base + "/realms/demo/sign-in", headers={"Accept": "text/html"}, timeout=10)
        assert page.status_code == 200
        assert re.search(rf"<footer[^>]*>Lifecycle Cockpit {re.escape(version)} ·", page.text), page.text[-500:]
        assert httpx.get(base + "/static/css/app.css", timeout=10).status_code == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            # Its home defaults to ./.cockpit of the folder it started in; the embedded server outlives `up`.
            stop_server(site / ".cockpit" / "pgdata")
    output = log.read_text()
    assert code == 0, output
    assert "Lifecycle Cockpit stopped." in output
    assert "Traceback" not in output
    assert (site / ".cockpit" / "secret_key").exists()
