"""X-Forwarded-For through the real web server: believed only from the proxies the operator names."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from engine.directory.throttle import THROTTLE_PER_ADDRESS
from testing.processes import cockpit_env, free_port, start, stop, wait_http


def _fail_sign_in(client: httpx.Client, forwarded_for: str, attempt: int) -> int:
    page = client.get("/realms/no-such-realm/sign-in", headers={"Accept": "text/html"})
    csrf = re.search(r'name="_csrf" value="([^"]*)"', page.text)
    assert csrf, page.text[:500]
    response = client.post(
        "/realms/no-such-realm/sign-in",
        data={"email": f"guess{attempt}@example.com", "password": "wrong", "_csrf": csrf.group(1), "next": ""},
        headers={"Accept": "text/html", "X-Forwarded-For": forwarded_for},
        follow_redirects=False,
    )
    return response.status_code


def _serve(database_url: str, tmp_path: Path, name: str, **extra: str) -> tuple[str, object]:
    port = free_port()
    env = cockpit_env(database_url, tmp_path / name, **extra)
    process = start(["serve", "--port", str(port)], env, tmp_path / f"{name}.log")
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz", timeout=60)
    return base, process


def test_a_spoofed_forwarded_for_does_not_escape_the_address_throttle(database_url: str, tmp_path: Path) -> None:
    base, process = _serve(database_url, tmp_path, "default")
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            statuses = [_fail_sign_in(client, f"203.0.113.{i}", i) for i in range(THROTTLE_PER_ADDRESS + 1)]
    finally:
        stop(process)  # type: ignore[arg-type]
    assert statuses[:THROTTLE_PER_ADDRESS] == [401] * THROTTLE_PER_ADDRESS
    assert statuses[-1] == 429, statuses


def test_a_named_proxy_is_believed(database_url: str, tmp_path: Path) -> None:
    base, process = _serve(database_url, tmp_path, "proxied", COCKPIT_TRUSTED_PROXIES="127.0.0.1/32, ::1")
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            statuses = [
                _fail_sign_in(client, f"198.51.100.7, 203.0.113.{i}", i) for i in range(THROTTLE_PER_ADDRESS + 1)
            ]
            # The same client behind the proxy is throttled as one address.
            same = [_fail_sign_in(client, "203.0.113.250", 100 + i) for i in range(THROTTLE_PER_ADDRESS + 1)]
    finally:
        stop(process)  # type: ignore[arg-type]
    assert statuses == [401] * (THROTTLE_PER_ADDRESS + 1), statuses
    assert same[-1] == 429, same
