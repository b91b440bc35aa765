"""A rolling upgrade: the previous release's workers beside this release's, across a migration,
with runs in flight (docs/operations.md, "Upgrading with the service running: expand, then contract").

The previous release is a recorded commit of this repository, checked out as a ``git worktree``
in a temporary folder and run with this checkout's interpreter (its dependencies are the same;
``PYTHONPATH`` puts its code first). The upgrade goes as the operations guide says:

1. the database is at the previous release's head, and two of its workers run;
2. runs are started and are in flight (each one waits on a slow endpoint call);
3. this release's ``cockpit migrate`` runs while the old workers keep working;
4. this release's workers start beside them, more runs start, and the old workers are stopped one
   at a time (SIGTERM), with runs in flight each time.

Afterwards every run succeeded, each step has exactly one succeeded attempt, every internal effect
happened once, and the endpoint heard from each run under its one Idempotency-Key for the step.
Both releases are seen holding runs after the migration. The test skips where the recorded commit
is not in the repository (a shallow clone) and fails instead under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory import webhooks
from engine.platform.config import PROJECT_ROOT
from engine.platform.database import libpq_conninfo, with_database
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.migrate import current_revision, head_revision
from testing.browser import must_have_browser
from testing.chaos import Directory, build_directory, leases_by_pid, publish, start_manual_runs
from testing.factories import TEST_SECRET_KEY
from testing.processes import cockpit_env, start, stop
from testing.receiver import Receiver

# The release before revision 0019 (its head is 0018): main as it was before that migration.
PREVIOUS_RELEASE = "59bc042f6196202e764d1f0b2239845cdfc6ecec"
PREVIOUS_HEAD = "0018"
LEASE_SECONDS = 3
WAVES = (8, 8, 8)  # runs started: before the migration, after it with both releases, after the old workers stop
CALL_SECONDS = 0.4  # each endpoint call takes this long, so runs are in flight while the releases change
STEP_IDS = ("grant", "join", "drop", "sync", "done")
AUDIT_PER_RUN = Counter(
    {
        "workflow.run.started": 1,
        "role.assigned": 1,
        "group.member_added": 1,
        "role.revoked": 1,
        "workflow.step.succeeded": len(STEP_IDS),
        "workflow.run.succeeded": 1,
    }
)
DRAIN_SECONDS = 300  # bounds a test that went wrong; never decides a result


@pytest.fixture
def previous_release() -> Iterator[Path]:
    """The previous release's code: a worktree of the recorded commit, removed afterwards."""
    known = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"], capture_output=True
    )
    if known.returncode != 0:
        reason = f"the previous release {PREVIOUS_RELEASE[:12]} is not in this repository (a shallow clone?)"
        if must_have_browser():  # CI=true
            pytest.fail(reason + " (CI=true: this is a failure)", pytrace=False)
        pytest.skip(reason)
    folder = Path(tempfile.mkdtemp(prefix="cockpit-previous-")) / "release"
    subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "worktree", "add", "--detach", str(folder), PREVIOUS_RELEASE],
        check=True,
        capture_output=True,
    )
    try:
        yield folder
    finally:
        subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "worktree", "remove", "--force", str(folder)], capture_output=True
        )
        shutil.rmtree(folder.parent, ignore_errors=True)


@pytest.fixture
def empty_database(pg_server: str) -> Iterator[str]:
    """A database with nothing in it (the previous release migrates it)."""
    name = f"cockpit_upgrade_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_conninfo(pg_server), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(pg_server, name)
    finally:
        with psycopg.connect(libpq_conninfo(pg_server), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def release_command(release: Path, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``cockpit <args>`` of the previous release (its code first on the path, run from its folder)."""
    out = log.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=env | {"PYTHONPATH": str(release)},
        cwd=release,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def definition(directory: Directory, hook: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "retry": {"max_attempts": 3, "backoff": "1s"},
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": directory.role_ids["granted"], "scope": "realm"},
            {"id": "join", "type": "add_to_group", "group_id": directory.group_ids[0]},
            {"id": "drop", "type": "remove_role", "role_id": directory.role_ids["legacy"]},
            {
                "id": "sync",
                "type": "call_webhook",
                "subscription_id": hook,
                "retry": {"max_attempts": 10, "backoff": "1s"},
            },
            {"id": "done", "type": "end"},
        ],
    }


async def unfinished(sessions: async_sessionmaker[AsyncSession], run_ids: list[str]) -> int:
    async with sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND state NOT IN ('succeeded', 'failed')"),
            {"ids": run_ids},
        )
    return int(count or 0)


async def started_since(sessions: async_sessionmaker[AsyncSession], since: Any) -> int:
    """Workers that started (their first heartbeat) since ``since`` and have not stopped."""
    async with sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM worker_heartbeats WHERE started_at >= :since AND stopped_at IS NULL"),
            {"since": since},
        )
    return int(count or 0)


def test_the_previous_release_s_workers_run_beside_the_new_ones_across_a_migration(
    previous_release: Path, empty_database: str, tmp_path: Path
) -> None:
    url = empty_database
    env = cockpit_env(
        url, tmp_path / "home", COCKPIT_WORKER_LEASE_SECONDS=str(LEASE_SECONDS), COCKPIT_ALLOW_PRIVATE_EGRESS="true"
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    migrated = release_command(previous_release, ["migrate"], env, logs / "old-migrate.log")
    assert migrated.wait(timeout=300) == 0, (logs / "old-migrate.log").read_text()
    assert current_revision(url) == PREVIOUS_HEAD
    assert head_revision() != PREVIOUS_HEAD, "this release adds no migration after the recorded one"

    receiver = Receiver(respond=lambda _r: (200, CALL_SECONDS)).start()
    old = [release_command(previous_release, ["worker", "--no-migrate"], env, logs / f"old-{n}.log") for n in (1, 2)]
    new: list[subprocess.Popen[bytes]] = []
    seen: dict[str, set[int]] = {"old after the migration": set(), "new": set()}
    phase = {"migrated": False}

    async def scenario() -> tuple[Directory, list[str], dict[str, Any]]:
        db = make_engine(url, pool_size=2)
        sessions = make_sessionmaker(db)
        try:
            directory = await build_directory(
                sessions, subjects=sum(WAVES), roles=["granted", "legacy"], groups=1, held_by_subjects=["legacy"]
            )
            async with sessions() as session, session.begin():
                subscription, secret = await webhooks.create_subscription(
                    session,
                    directory.actor,
                    TEST_SECRET_KEY,
                    destination=receiver.url,
                    allow_private_network=True,
                    event_types=["role.assignment.expired"],
                )
            receiver.secrets.append(secret)
            workflow_id = await publish(sessions, directory.actor, "Upgrade", definition(directory, subscription.id))
            subjects = list(directory.subject_ids)
            run_ids: list[str] = []

            async def wave(count: int) -> list[str]:
                nonlocal subjects
                chosen, subjects = subjects[:count], subjects[count:]
                started = await start_manual_runs(sessions, directory.actor, workflow_id, chosen)
                run_ids.extend(started)
                return started

            async def watch(seconds: float) -> None:
                """Note which release's workers hold runs, for ``seconds``."""
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    held = await leases_by_pid(sessions)
                    for process in old:
                        if phase["migrated"] and held.get(process.pid) and process.poll() is None:
                            seen["old after the migration"].add(process.pid)
                    for process in new:
                        if held.get(process.pid):
                            seen["new"].add(process.pid)
                    await asyncio.sleep(0.05)

            # 1–2. The previous release works on the first wave.
            await wave(WAVES[0])
            await watch(1.0)
            # 3. This release's migration, while the old workers are busy.
            migrate = start(["migrate"], env, logs / "new-migrate.log")
            while migrate.poll() is None:
                await watch(0.2)
            assert migrate.returncode == 0, (logs / "new-migrate.log").read_text()
            assert current_revision(url) == head_revision()
            phase["migrated"] = True
            # 4. This release's workers beside the old ones; more runs; the old ones stopped one at a time.
            await wave(WAVES[1] // 2)
            await watch(1.0)
            async with sessions() as session:
                since = await session.scalar(text("SELECT now()"))
            new.extend(start(["worker", "--no-migrate"], env, logs / f"new-{n}.log") for n in (1, 2))
            # The next waves only once both have started (their first heartbeat), however loaded the
            # machine: otherwise the old workers could finish everything before they begin.
            deadline = time.monotonic() + DRAIN_SECONDS
            while await started_since(sessions, since) < 2:
                assert time.monotonic() < deadline, "this release's workers never started"
                await watch(0.5)
            await wave(WAVES[1] - WAVES[1] // 2)
            await watch(2.0)
            await asyncio.to_thread(stop, old[0])
            await wave(WAVES[2] - WAVES[2] // 2)
            await watch(1.0)
            await asyncio.to_thread(stop, old[1])
            # The last runs come once no old worker is left: only this release's workers can take them.
            await wave(WAVES[2] // 2)
            deadline = time.monotonic() + DRAIN_SECONDS
            while await unfinished(sessions, run_ids):
                assert time.monotonic() < deadline, f"{await unfinished(sessions, run_ids)} runs never finished"
                await watch(0.5)
            return directory, run_ids, await observe(sessions, directory, workflow_id, run_ids)
        finally:
            await db.dispose()

    try:
        directory, run_ids, found = asyncio.run(scenario())
    except BaseException:
        for path in sorted(logs.glob("*.log")):
            print(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-20:]))
        raise
    finally:
        for process in [*old, *new]:
            stop(process)
        receiver.stop()
    print(
        f"\nprevious release {PREVIOUS_RELEASE[:12]} (head {PREVIOUS_HEAD}) → {head_revision()}: "
        f"{len(run_ids)} runs; workers seen holding runs: { ({k: len(v) for k, v in seen.items()}) }"
    )
    old_exits = [p.returncode for p in old]
    assert set(old_exits) <= {0, -15}, f"the old workers did not stop cleanly: {old_exits}"
    assert seen["old after the migration"], "no worker of the previous release held a run after the migration"
    assert seen["new"], "no worker of this release held a run"
    check(directory, run_ids, found, receiver)


async def observe(
    sessions: async_sessionmaker[AsyncSession], directory: Directory, workflow_id: str, run_ids: list[str]
) -> dict[str, Any]:
    ids = {"ids": run_ids}
    async with sessions() as session:
        return {
            "runs": (
                await session.execute(
                    text(
                        "SELECT id, subject_id, state, lease_owner, last_error FROM workflow_runs WHERE workflow_id = :w"
                    ),
                    {"w": workflow_id},
                )
            ).all(),
            "attempts": (
                await session.execute(
                    text(
                        "SELECT run_id, step_id, state, id, error_category FROM step_attempts WHERE run_id = ANY(:ids)"
                    ),
                    ids,
                )
            ).all(),
            "audit": (
                await session.execute(
                    text(
                        "SELECT correlation_id, type, count(*) AS n FROM audit_events "
                        "WHERE correlation_id = ANY(:ids) GROUP BY 1, 2"
                    ),
                    ids,
                )
            ).all(),
            "granted": (
                await session.execute(
                    text("SELECT user_id, source_run_id FROM role_assignments WHERE role_id = :r"),
                    {"r": directory.role_ids["granted"]},
                )
            ).all(),
            "legacy_left": await session.scalar(
                text("SELECT count(*) FROM role_assignments WHERE role_id = :r"), {"r": directory.role_ids["legacy"]}
            ),
            "members": (
                await session.execute(
                    text("SELECT user_id, source_run_id FROM group_members WHERE group_id = :g"),
                    {"g": directory.group_ids[0]},
                )
            ).all(),
        }


def check(directory: Directory, run_ids: list[str], found: dict[str, Any], receiver: Receiver) -> None:
    runs = found["runs"]
    # Nothing lost: every run started exists once, for its own subject, and succeeded.
    assert sorted(r.id for r in runs) == sorted(run_ids)
    assert sorted(r.subject_id for r in runs) == sorted(directory.subject_ids)
    assert [(r.id, r.state, r.last_error) for r in runs if r.state != "succeeded"] == []
    assert [r.id for r in runs if r.lease_owner] == []
    # Nothing twice: one succeeded attempt per step, each effect once, made by its run.
    succeeded = Counter((a.run_id, a.step_id) for a in found["attempts"] if a.state == "succeeded")
    assert succeeded == Counter({(r.id, step): 1 for r in runs for step in STEP_IDS})
    failed = [a for a in found["attempts"] if a.state != "succeeded"]
    assert {(a.step_id, a.state, a.error_category) for a in failed} <= {("sync", "failed", "interrupted")}, failed
    expected = sorted((r.subject_id, r.id) for r in runs)
    assert sorted(map(tuple, found["granted"])) == expected
    assert sorted(map(tuple, found["members"])) == expected
    assert found["legacy_left"] == 0
    audit: dict[str, Counter[str]] = {r.id: Counter() for r in runs}
    for row in found["audit"]:
        audit[row.correlation_id][row.type] += row.n
    interrupted = Counter(a.run_id for a in failed)
    assert {
        r.id: dict(audit[r.id])
        for r in runs
        if audit[r.id] != AUDIT_PER_RUN + Counter({"workflow.step.failed": interrupted[r.id]})
    } == {}
    # The endpoint: each run called it under its one key for the step, every request signed.
    keys = Counter(request.header("Idempotency-Key") for request in receiver.requests())
    assert all(request.verified_by == [0] for request in receiver.requests())
    assert set(keys) == {f"{r.id}.sync" for r in runs}
