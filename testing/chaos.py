"""Worker processes under fire, and the directory a durable-run scenario needs.

The chaos acceptance test and the engine benchmark run real ``cockpit worker`` processes.
:class:`WorkerPool` starts them, kills one with SIGKILL at a random moment (no handler runs, no
lease is handed back, an open transaction is cut off) and starts its replacement.
:func:`build_directory`, :func:`publish` and :func:`start_manual_runs` set up what the runs act
on through the engine's own services.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory import organizations
from engine.directory.accounts import create_user
from engine.directory.audit import Actor
from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import Membership, Role, RoleAssignment
from engine.directory.realms import create_realm
from engine.platform.ids import new_id
from engine.runs import service as runs
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.processes import start as start_process
from testing.topology import Host

WORKER = ["worker", "--no-migrate"]


# --- Worker processes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    """One SIGKILL: which process, when (seconds into the pool's life), what it held."""

    pid: int
    at: float
    leased_runs: int


@dataclass
class WorkerPool:
    """``cockpit worker --no-migrate`` processes on one database.

    Each process logs to its own file under ``log_dir``; :meth:`stop` ends every process the
    pool started (SIGTERM, then SIGKILL for one that does not stop in time). With ``hosts``
    (namespace hosts of :mod:`testing.topology`), the n-th process starts on the n-th host, by turns.
    """

    env: Mapping[str, str]
    log_dir: Path
    rng: random.Random = field(default_factory=random.Random)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    hosts: Sequence[Host] = field(default=(), kw_only=True)

    def spawn(self) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"worker-{len(self.processes) + 1}.log"
        if self.hosts:
            host = self.hosts[len(self.processes) % len(self.hosts)]
            process = host.start([sys.executable, "-m", "cockpit.cli", *WORKER], self.env, log)
        else:
            process = start_process(WORKER, self.env, log)
        self.processes.append(process)
        return process

    @property
    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.processes if p.poll() is None]

    def kill_random(self, among: Collection[int] | None = None) -> int | None:
        """SIGKILL one live worker (whose pid is in ``among``, when given) chosen at random, and reap it.

        Returns its pid, or None when no worker qualifies.
        """
        alive = [p for p in self.alive if among is None or p.pid in among]
        if not alive:
            return None
        victim = self.rng.choice(alive)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        return victim.pid

    def record_kill(self, pid: int, leased_runs: int) -> Kill:
        kill = Kill(pid=pid, at=round(time.monotonic() - self.started_at, 2), leased_runs=leased_runs)
        self.kills.append(kill)
        return kill

    def stop(self, timeout: float = 20.0) -> None:
        for process in self.alive:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process.poll() is not None:
                continue
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def unexpected_exits(self) -> list[tuple[int, int]]:
        """Workers that ended on their own (not killed by us, not stopped by :meth:`stop`)."""
        killed = {k.pid for k in self.kills}
        return [
            (p.pid, p.returncode)
            for p in self.processes
            if p.returncode is not None and p.pid not in killed and p.returncode not in (0, -signal.SIGTERM)
        ]

    def log_excerpt(self, pattern: str = "Traceback", limit: int = 20) -> list[str]:
        """Log lines of every worker that contain ``pattern`` (for failure messages)."""
        found: list[str] = []
        for path in sorted(self.log_dir.glob("worker-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if pattern in line:
                    found.append(f"{path.name}: {line[:300]}")
        return found[:limit]


async def leases_by_pid(sessions: async_sessionmaker[AsyncSession]) -> dict[int, int]:
    """Runs leased per worker process (a lease owner is ``worker-<host>-<pid>-<suffix>``)."""
    async with sessions() as session:
        rows = await session.execute(
            text("SELECT lease_owner, count(*) FROM workflow_runs WHERE lease_owner IS NOT NULL GROUP BY lease_owner")
        )
        held: dict[int, int] = {}
        for owner, count in rows:
            pid = str(owner).rsplit("-", 2)[-2]
            if pid.isdigit():
                held[int(pid)] = held.get(int(pid), 0) + int(count)
        return held


async def working_pids(sessions: async_sessionmaker[AsyncSession]) -> set[int]:
    """Process ids of workers that have started work (they record a heartbeat before they take jobs)."""
    async with sessions() as session:
        rows = await session.execute(text("SELECT pid FROM worker_heartbeats WHERE stopped_at IS NULL"))
        return {int(pid) for pid in rows.scalars()}


async def listening_workers(sessions: async_sessionmaker[AsyncSession]) -> int:
    """Worker connections that LISTEN for wake-ups (a worker is ready once it has one).

    The listening connection's last statement is its last ``LISTEN`` (it listens on several
    channels: due runs, new outbox events, due deliveries), so any ``LISTEN`` counts.
    """
    async with sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'")
        )
    return int(count or 0)


# --- The directory runs act on --------------------------------------------------------------------


@dataclass
class Directory:
    """A realm with one organization, its groups, some roles and the subjects the runs are about."""

    realm_id: str
    admin_id: str
    organization_id: str
    group_ids: list[str]
    role_ids: dict[str, str]
    subject_ids: list[str]

    @property
    def actor(self) -> Actor:
        return Actor(type="user", id=self.admin_id, realm_id=self.realm_id)


async def build_directory(
    sessions: async_sessionmaker[AsyncSession],
    *,
    subjects: int,
    roles: Sequence[str],
    groups: int,
    held_by_subjects: Sequence[str] = (),
    organization: str = "Engineering",
) -> Directory:
    """A fresh realm; ``subjects`` users who are members of its organization and hold ``held_by_subjects``."""
    slug = "r" + new_id("rlm")[-10:]
    async with sessions() as session, session.begin():
        realm, admin = await create_realm(session, slug, admin_email=f"admin@{slug}.example")
    actor = Actor(type="user", id=admin.id, realm_id=realm.id)
    async with sessions() as session, session.begin():
        org = await organizations.create_organization(session, actor, name=organization)
        role_ids: dict[str, str] = {}
        for name in roles:
            role = Role(
                id=new_id("rol"), realm_id=realm.id, name=name, permissions=["realm.workflows.read"], boundary="realm"
            )
            session.add(role)
            role_ids[name] = role.id
        await session.flush()
        authority = await load_authority(session, realm.id, "user", admin.id)
        group_ids = []
        for number in range(groups):
            group, _ = await create_group(session, actor, authority, org.id, name=f"Team {number + 1}")
            group_ids.append(group.id)
    subject_ids: list[str] = []
    async with sessions() as session, session.begin():
        for number in range(subjects):
            user = await create_user(
                session,
                actor,
                email=f"subject{number + 1}@{slug}.example",
                display_name=f"Subject {number + 1}",
                authority=None,
            )
            subject_ids.append(user.id)
            session.add(Membership(id=new_id("mem"), realm_id=realm.id, organization_id=org.id, user_id=user.id))
            for name in held_by_subjects:
                session.add(
                    RoleAssignment(
                        id=new_id("ras"),
                        realm_id=realm.id,
                        role_id=role_ids[name],
                        user_id=user.id,
                        granted_by=admin.id,
                    )
                )
    return Directory(
        realm_id=realm.id,
        admin_id=admin.id,
        organization_id=org.id,
        group_ids=group_ids,
        role_ids=role_ids,
        subject_ids=subject_ids,
    )


async def add_subjects(
    sessions: async_sessionmaker[AsyncSession], directory: Directory, count: int, *, held: Sequence[str] = ()
) -> list[str]:
    """More users of the realm who are members of no organization yet (they may hold roles)."""
    ids: list[str] = []
    async with sessions() as session, session.begin():
        for _ in range(count):
            suffix = new_id("usr")[-8:]
            user = await create_user(
                session,
                directory.actor,
                email=f"newcomer-{suffix}@example.com",
                display_name=f"Newcomer {suffix}",
                authority=None,
            )
            ids.append(user.id)
            for name in held:
                session.add(
                    RoleAssignment(
                        id=new_id("ras"),
                        realm_id=directory.realm_id,
                        role_id=directory.role_ids[name],
                        user_id=user.id,
                        granted_by=directory.admin_id,
                    )
                )
    return ids


async def publish(
    sessions: async_sessionmaker[AsyncSession], actor: Actor, name: str, definition: dict[str, Any]
) -> str:
    """Create the workflow with revision 1 and publish it (the actor is the accountable publisher)."""
    async with sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, actor, name=name, definition=definition, has_definition=True, requires_approval=False
        )
    async with sessions() as session, session.begin():
        await publish_revision(session, actor, workflow.id, 1)
    return workflow.id


async def start_manual_runs(
    sessions: async_sessionmaker[AsyncSession],
    actor: Actor,
    workflow_id: str,
    subject_ids: Sequence[str],
    *,
    organization_id: str | None = None,
) -> list[str]:
    """Start one manual run per subject, all in one transaction (one wake-up for the workers)."""
    async with sessions() as session, session.begin():
        started = [
            await runs.start_manual_run(
                session, actor, workflow_id, subject_id=subject_id, organization_id=organization_id
            )
            for subject_id in subject_ids
        ]
    return [run.id for run in started]


async def add_members(
    sessions: async_sessionmaker[AsyncSession], actor: Actor, organization_id: str, user_ids: Sequence[str]
) -> None:
    """Make users members, one transaction each (each writes an ``organization.membership.added`` event)."""
    for user_id in user_ids:
        async with sessions() as session, session.begin():
            await organizations.add_member(session, actor, organization_id, user_id, authority=None)
