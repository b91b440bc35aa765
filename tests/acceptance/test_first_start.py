"""First start as a newcomer sees it: `cockpit up` prints a link, the link opens the demo realm."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from engine.platform.config import PROJECT_ROOT
from testing.processes import cockpit_env, free_port, wait_http

HTML = {"Accept": "text/html"}
DEADLINE_S = 180  # bounds a start that went wrong; generous so a loaded machine never fails it


def hidden(html: str, name: str) -> str:
    found = re.search(rf'<input[^>]*name="{name}"[^>]*value="([^"]*)"', html)
    assert found, f"no {name} field on the page"
    return found.group(1)


def wait_for_line(log: Path, pattern: str, timeout: float = DEADLINE_S) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text())
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"`cockpit up` printed no line matching {pattern!r}:\n{log.read_text()}")


def run_up(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit.cli", "up"],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )


def stop_up(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_first_start_link_opens_the_demo_realm(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = cockpit_env(database_url, tmp_path / "home", COCKPIT_PORT=str(port))
    log = tmp_path / "up.log"
    proc = run_up(env, log)
    try:
        link = wait_for_line(log, r"(http://localhost:\d+/realms/demo/sign-in/link\?token=\S+)").group(1)
        assert f"http://localhost:{port}/realms/demo/" in log.read_text()
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout=DEADLINE_S)
        with httpx.Client(base_url=base, headers=HTML, timeout=10) as browser:
            path = link.split(f":{port}", 1)[1]
            page = browser.get(path)
            assert page.status_code == 200, page.text
            assert "Continue" in page.text
            signed_in = browser.post(
                "/realms/demo/sign-in/link",
                data={"token": hidden(page.text, "token"), "_csrf": hidden(page.text, "_csrf")},
                follow_redirects=True,
            )
            assert signed_in.status_code == 200, signed_in.text
            assert str(signed_in.url).endswith("/realms/demo/")
            assert "Demo" in signed_in.text and "Recent activity" in signed_in.text
            users = browser.get("/realms/demo/users")
            assert users.status_code == 200 and "approver@demo.example" in users.text
            # The link was spent.
            assert browser.get(path).status_code == 400
    finally:
        stop_up(proc)
    output = log.read_text()
    assert "Traceback" not in output

    # A later start seeds nothing and says how to get a new link.
    log2 = tmp_path / "up2.log"
    proc = run_up(env, log2)
    try:
        wait_for_line(log2, r"cockpit admin sign-in-link --realm demo --email admin@demo\.example")
        assert "sign-in/link?token=" not in log2.read_text()
    finally:
        stop_up(proc)
