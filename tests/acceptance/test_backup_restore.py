"""Backup and restore with runs in flight: ``pg_dump`` of a live system (a worker advancing runs),
restored with ``pg_restore`` into a fresh server, then ``cockpit up`` against it. The runs resume
where the dump left them and finish; no effect, attempt or audit event is made twice.

The drill this follows is in docs/operations.md ("Backup and restore")."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.platform.config import PROJECT_ROOT
from engine.platform.database import ensure_database, libpq_conninfo, with_database
from engine.platform.db import make_engine, make_sessionmaker
from testing.chaos import build_directory, publish, start_manual_runs
from testing.processes import cockpit_env, free_port, start, stop, wait_http
from testing.servers import postgres_bin, server_folder, start_server, stop_server

RUNS = 30
DEADLINE_S = 180  # generous: a loaded machine starts Python and PostgreSQL slowly
LEASE = {"COCKPIT_WORKER_LEASE_SECONDS": "5"}  # the old system's leases run out soon after the restore
UNFINISHED = ("pending", "running", "waiting", "awaiting_approval", "compensating")


async def scalar(sessions: async_sessionmaker[AsyncSession], sql: str, **params: Any) -> int:
    async with sessions() as session:
        return int(await session.scalar(text(sql), params) or 0)


async def runs_by_state(sessions: async_sessionmaker[AsyncSession], realm_id: str) -> dict[str, int]:
    async with sessions() as session:
        rows = await session.execute(
            text("SELECT state, count(*) FROM workflow_runs WHERE realm_id = :r GROUP BY state"), {"r": realm_id}
        )
        return {str(state): int(n) for state, n in rows.all()}


async def repeated(sessions: async_sessionmaker[AsyncSession], realm_id: str, role_ids: list[str]) -> dict[str, int]:
    """Everything that would show an effect made twice; all zero when nothing was repeated."""
    return {
        "steps with several succeeded attempts": await scalar(
            sessions,
            "SELECT count(*) FROM (SELECT 1 FROM step_attempts WHERE realm_id = :r AND state = 'succeeded' "
            "GROUP BY run_id, step_id HAVING count(*) > 1) t",
            r=realm_id,
        ),
        "duplicated grants": await scalar(
            sessions,
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM role_assignments "
            "WHERE role_id = ANY(:g) GROUP BY role_id, user_id) t",
            g=role_ids,
        ),
        "duplicated memberships": await scalar(
            sessions,
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM group_members "
            "WHERE realm_id = :r GROUP BY group_id, user_id) t",
            r=realm_id,
        ),
        "duplicated effect audit events": await scalar(
            sessions,
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM audit_events WHERE realm_id = :r "
            "AND type IN ('role.assigned', 'group.member_added') AND correlation_id LIKE 'wrn%' "
            "GROUP BY correlation_id, type, subject_id, details->>'role_id', details->>'group_id') t",
            r=realm_id,
        ),
    }


async def until(condition: Any, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {DEADLINE_S} s" + (f"\n{log.read_text()}" if log else ""))
        await asyncio.sleep(0.3)


async def test_a_dump_taken_with_runs_in_flight_restores_and_the_runs_finish_once(
    database_url: str, tmp_path: Path
) -> None:
    # A live system: a worker advancing runs that grant a role, wait, join a group and grant another.
    source_engine = make_engine(database_url)
    source = make_sessionmaker(source_engine)
    directory = await build_directory(source, subjects=RUNS, roles=["first", "second"], groups=1)
    role_ids = [directory.role_ids["first"], directory.role_ids["second"]]
    workflow_id = await publish(
        source,
        directory.actor,
        "Onboarding",
        {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "steps": [
                {"id": "grant-first", "type": "assign_role", "role_id": role_ids[0], "scope": "realm"},
                {"id": "pause", "type": "wait", "duration": "6s"},
                {"id": "join", "type": "add_to_group", "group_id": directory.group_ids[0]},
                {"id": "grant-second", "type": "assign_role", "role_id": role_ids[1], "scope": "realm"},
                {"id": "done", "type": "end"},
            ],
        },
    )
    worker = start(
        ["worker", "--no-migrate"], cockpit_env(database_url, tmp_path / "source", **LEASE), tmp_path / "w.log"
    )
    dump = tmp_path / "cockpit.dump"
    try:
        await start_manual_runs(source, directory.actor, workflow_id, directory.subject_ids)

        async def under_way() -> bool:
            return (await runs_by_state(source, directory.realm_id)).get("waiting", 0) >= 1

        await until(under_way, "a run reaches its wait", tmp_path / "w.log")
        # The backup, while the worker keeps working: one consistent snapshot.
        subprocess.run(
            [str(postgres_bin("pg_dump")), "--format=custom", f"--file={dump}", libpq_conninfo(database_url)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    finally:
        assert stop(worker) == 0
        await source_engine.dispose()

    # A fresh server; the dump restored into a new database.
    with server_folder("cockpit-restore-") as folder:
        await restore_and_resume(folder / "pgdata", dump, directory.realm_id, role_ids, tmp_path)


async def restore_and_resume(pgdata: Path, dump: Path, realm_id: str, role_ids: list[str], tmp_path: Path) -> None:
    try:
        restored_url = with_database(start_server(pgdata), "cockpit")
        ensure_database(with_database(restored_url, "postgres"), "cockpit")
        subprocess.run(
            [
                str(postgres_bin("pg_restore")),
                "--no-owner",
                "--exit-on-error",
                "--dbname",
                libpq_conninfo(restored_url),
                str(dump),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        restored_engine = make_engine(restored_url)
        restored = make_sessionmaker(restored_engine)
        try:
            at_restore = await runs_by_state(restored, realm_id)
            assert sum(at_restore.values()) == RUNS
            in_flight = sum(at_restore.get(state, 0) for state in UNFINISHED)
            assert in_flight >= 1, at_restore  # the dump caught runs under way
            done_before = await scalar(
                restored,
                "SELECT count(*) FROM step_attempts WHERE realm_id = :r AND state = 'succeeded'",
                r=realm_id,
            )
            assert done_before >= 1
            assert await repeated(restored, realm_id, role_ids) == dict.fromkeys(
                await repeated(restored, realm_id, role_ids), 0
            )

            # `cockpit up` against the restored server: web and worker, the runs resume.
            port = free_port()
            env = cockpit_env(restored_url, tmp_path / "home", COCKPIT_PORT=str(port), **LEASE)
            log = tmp_path / "up.log"
            up = subprocess.Popen(
                [sys.executable, "-m", "cockpit.cli", "up"],
                env=env,
                cwd=PROJECT_ROOT,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
            )
            try:
                wait_http(f"http://127.0.0.1:{port}/readyz", timeout=DEADLINE_S)

                async def all_finished() -> bool:
                    states = await runs_by_state(restored, realm_id)
                    return not any(states.get(state) for state in UNFINISHED)

                await until(all_finished, "every restored run finishes", log)
            finally:
                if up.poll() is None:
                    up.send_signal(signal.SIGINT)
                assert up.wait(timeout=60) == 0, log.read_text()

            assert await runs_by_state(restored, realm_id) == {"succeeded": RUNS}
            # Five transitions a run (start, grant, wait, join, grant + end), each made once.
            assert (
                await scalar(
                    restored,
                    "SELECT count(*) FROM step_attempts WHERE realm_id = :r AND state = 'succeeded'",
                    r=realm_id,
                )
                == RUNS * 5
            )
            found = await repeated(restored, realm_id, role_ids)
            assert found == dict.fromkeys(found, 0)
            assert (
                await scalar(
                    restored,
                    "SELECT count(*) FROM role_assignments WHERE role_id = ANY(:g)",
                    g=role_ids,
                )
                == RUNS * 2
            )
            assert "Traceback" not in log.read_text()
        finally:
            await restored_engine.dispose()
    finally:
        stop_server(pgdata)
