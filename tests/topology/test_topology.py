"""The deployment across hosts: Linux network namespaces on a bridge, each one a host.

One host runs PostgreSQL on its own address, two run ``cockpit-web``, three run
``cockpit-worker``, and a proxy host runs Debian's nginx with the site of ``deploy/nginx`` and a
certificate of a throwaway CA. Every host's environment is ``deploy/cockpit.env.example`` filled
in; every process is its systemd unit's ``ExecStart``. The test itself, its browser and a real
endpoint (the receiver) sit in the root namespace on the bridge.

The smoke suite runs in Chromium through the proxy's https URL. Then runs are started through the
proxy, in waves, while faults hit the hosts — a worker host cut off from everything while it holds
runs and healed after twice the lease, a web host killed, PostgreSQL restarted, 50 ms of latency
on a worker host's link (``tc netem``, where the kernel offers it) — each fault's figure printed.
At the end nothing is lost (each run started through the proxy exists once and succeeded), no
internal effect happened twice, and the endpoint heard from every run, only ever under the run's
one Idempotency-Key for the step.

Needs root (namespaces), ``ip``, ``nginx``, ``openssl``, Debian's PostgreSQL 15 and Chromium;
without them the test skips saying why, and under ``CI=true`` it fails instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory import webhooks
from engine.platform.db import make_engine, make_sessionmaker
from testing.browser import must_have_browser, system_chromium
from testing.chaos import Directory, build_directory, leases_by_pid, publish
from testing.processes import wait_http
from testing.receiver import Receiver
from testing.servers import server_folder
from testing.topology import (
    PG_BIN,
    Host,
    Network,
    Postgres,
    add_hosts,
    chromium_trusting,
    host_env,
    read_env,
    start_proxy,
    throwaway_ca,
    unit_command,
    why_no_namespaces,
)

LEASE_SECONDS = 5
WAVE = 12  # runs started through the proxy per fault
GRANTS = ("granted-1", "granted-2")
STEP_IDS = ("grant-1", "join-1", "grant-2", "join-2", "drop", "sync", "done")
AUDIT_PER_RUN = Counter(
    {
        "workflow.run.started": 1,
        "role.assigned": len(GRANTS),
        "group.member_added": 2,
        "role.revoked": 1,
        "workflow.step.succeeded": len(STEP_IDS),
        "workflow.run.succeeded": 1,
    }
)
FINISHED = ("succeeded", "failed", "compensated", "compensation_failed", "cancelled")
# Deadlines only bound a test that went wrong; they never decide a result.
READY_SECONDS = 180
DRAIN_SECONDS = 180
SMOKE_SECONDS = 420


def unavailable() -> str | None:
    reason = why_no_namespaces()
    if reason:
        return reason
    for program in ("nginx", "openssl", "tc"):
        if shutil.which(program) is None and not Path(f"/usr/sbin/{program}").exists():
            return f"{program} is not installed (apt-get install nginx openssl iproute2)"
    if not (PG_BIN / "postgres").exists():
        return f"PostgreSQL 15 is not installed at {PG_BIN} (apt-get install postgresql-15)"
    if system_chromium() is None and not os.environ.get("COCKPIT_CHROMIUM"):
        return "Chromium is not installed (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    reason = unavailable()
    if reason:
        if must_have_browser():  # CI=true
            pytest.fail(f"the topology test cannot run: {reason} (CI=true: this is a failure)", pytrace=False)
        pytest.skip(f"the topology test needs hosts as network namespaces: {reason}")
    made = Network()
    try:
        yield made.open()
    finally:
        problems = made.close()
        assert not problems, f"could not clean up: {problems}"


@dataclass
class Service:
    """A unit on a host, restarted when it fails the way ``Restart=on-failure`` does."""

    host: Host
    name: str
    command: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: list[int] = field(default_factory=list)  # exit codes of the failures it was restarted after
    stopped: bool = False

    def start(self) -> None:
        self.process = self.host.start(self.command, self.env, self.log)

    def kill(self) -> None:
        """SIGKILL the unit's processes (the host is gone: nothing restarts them)."""
        assert self.process is not None
        self.stopped = True
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def supervise(self) -> None:
        if self.stopped or self.process is None or self.process.poll() is None:
            return
        if self.process.returncode != 0:
            self.restarts += 1
            self.exits.append(self.process.returncode)
            self.start()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@dataclass
class Deployment:
    network: Network
    folder: Path
    postgres: Postgres
    proxy: Host
    base_url: str
    ca: Path
    chromium: Path
    web: list[Service] = field(default_factory=list)
    workers: list[Service] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    holders_seen: Counter[str] = field(default_factory=Counter)  # worker host -> times seen holding runs

    def tls(self) -> ssl.SSLContext:
        """What a client that trusts the throwaway CA verifies the proxy with."""
        return ssl.create_default_context(cafile=self.ca)

    def supervise(self) -> None:
        for service in self.web + self.workers:
            service.supervise()

    def worker_host_of(self, pid: int) -> str | None:
        return next((w.host.role for w in self.workers if w.process is not None and w.pid == pid), None)

    def print_logs(self, lines: int = 25) -> None:
        """The last lines of every host's logs (for a failure)."""
        for path in sorted(self.folder.glob("*/*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            print(f"--- {path.relative_to(self.folder)} (last lines)\n" + "\n".join(tail))

    def figure(self, line: str) -> None:
        self.figures.append(line)
        print(line, flush=True)

    def env(self, host: Host, **extra: str) -> dict[str, str]:
        return dict(os.environ) | read_env((self.folder / host.role / "cockpit.env").read_text()) | extra


@pytest.fixture(scope="module")
def deployment(network: Network) -> Iterator[Deployment]:
    with server_folder("cockpit-topology-") as folder:
        started = time.monotonic()
        layout = add_hosts(network, folder, web=2, workers=3, proxy=True)
        proxy, postgres, web_hosts, worker_hosts = layout.proxy, layout.postgres, layout.web, layout.workers
        assert proxy is not None
        db = postgres.host
        certificates = throwaway_ca(folder / "tls", proxy.address)
        chromium = chromium_trusting(
            certificates, folder, os.environ.get("COCKPIT_CHROMIUM") or system_chromium() or ""
        )
        deployment = Deployment(network, folder, postgres, proxy, f"https://{proxy.address}", certificates.ca, chromium)
        secret_key = uuid.uuid4().hex + uuid.uuid4().hex
        # The endpoint is on the private bridge.
        settings = {"COCKPIT_WORKER_LEASE_SECONDS": str(LEASE_SECONDS), "COCKPIT_ALLOW_PRIVATE_EGRESS": "true"}
        try:
            envs = {
                h.role: host_env(folder, h, postgres, proxy, secret_key, **settings)
                for h in [*web_hosts, *worker_hosts]
            }
            # cockpit-migrate on the first worker host (idempotent, under a lock: any host may).
            migrated = worker_hosts[0].run(*unit_command("cockpit-migrate.service"), env=envs["worker1"], timeout=300)
            assert migrated.returncode == 0, migrated.stdout + migrated.stderr
            for host in web_hosts:
                # `--processes 1` in ExecStart, as docs/deployment.md says to choose fewer: seven hosts share two cores.
                command = [*unit_command("cockpit-web.service"), "--processes", "1"]
                service = Service(host, "cockpit-web", command, envs[host.role], folder / host.role / "web.log")
                service.start()
                deployment.web.append(service)
            for host in worker_hosts:
                command = unit_command("cockpit-worker@.service")
                service = Service(host, "cockpit-worker@1", command, envs[host.role], folder / host.role / "worker.log")
                service.start()
                deployment.workers.append(service)
            for host in web_hosts:
                wait_http(f"http://{host.address}:8000/readyz", timeout=READY_SECONDS)
            start_proxy(proxy, folder / "nginx", [f"{h.address}:8000" for h in web_hosts], certificates)
            deployment.figure(
                f"topology: proxy {proxy.address}, PostgreSQL {db.address}, web {[h.address for h in web_hosts]}, "
                f"workers {[h.address for h in worker_hosts]}; up in {time.monotonic() - started:.1f} s"
            )
            yield deployment
        except BaseException:
            for path in sorted(folder.glob("*/*.log")):
                print(
                    f"--- {path.relative_to(folder)} (last lines)\n"
                    + "\n".join(path.read_text(errors="replace").splitlines()[-25:])
                )
            raise
        finally:
            postgres.stop()


# --- The scenario -------------------------------------------------------------------------------------


@dataclass
class Scenario:
    directory: Directory
    slug: str
    workflow_id: str
    receiver: Receiver
    api: httpx.Client
    free_subjects: list[str]
    run_ids: list[str] = field(default_factory=list)


def definition(directory: Directory, hook: str) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "retry": {"max_attempts": 3, "backoff": "1s"},
        "steps": [
            {"id": "grant-1", "type": "assign_role", "role_id": directory.role_ids["granted-1"], "scope": "realm"},
            {"id": "join-1", "type": "add_to_group", "group_id": directory.group_ids[0]},
            {"id": "grant-2", "type": "assign_role", "role_id": directory.role_ids["granted-2"], "scope": "realm"},
            {"id": "join-2", "type": "add_to_group", "group_id": directory.group_ids[1]},
            {"id": "drop", "type": "remove_role", "role_id": directory.role_ids["legacy"]},
            # A call cut off from its record by a fault is made again (interrupted): room for several.
            {
                "id": "sync",
                "type": "call_webhook",
                "subscription_id": hook,
                "retry": {"max_attempts": 10, "backoff": "1s"},
            },
            {"id": "done", "type": "end"},
        ],
    }


async def realm_slug(sessions: async_sessionmaker[AsyncSession], realm_id: str) -> str:
    async with sessions() as session:
        return str(await session.scalar(text("SELECT slug FROM realms WHERE id = :id"), {"id": realm_id}))


def admin_token(deployment: Deployment, slug: str) -> str:
    host = deployment.workers[0].host
    made = host.run(
        sys.executable, "-m", "cockpit.cli", "admin", "token", "--realm", slug, "--email", f"admin@{slug}.example",
        "--audience", "admin", env=deployment.env(host),
    )  # fmt: skip
    return made.stdout.strip().splitlines()[-1]


async def observe_holders(deployment: Deployment, sessions: async_sessionmaker[AsyncSession]) -> dict[int, int]:
    held = await leases_by_pid(sessions)
    for pid, count in held.items():
        role = deployment.worker_host_of(pid)
        if role and count:
            deployment.holders_seen[role] += 1
    return held


async def unfinished(sessions: async_sessionmaker[AsyncSession], run_ids: list[str]) -> int:
    async with sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND state <> ALL(:done)"),
            {"ids": run_ids, "done": list(FINISHED)},
        )
    return int(count or 0)


async def drained(deployment: Deployment, sessions: async_sessionmaker[AsyncSession], run_ids: list[str]) -> float:
    """Wait until every run of ``run_ids`` has finished (restarting failed units meanwhile); the seconds it took."""
    started = time.monotonic()
    while await unfinished(sessions, run_ids):
        assert time.monotonic() - started < DRAIN_SECONDS, f"{await unfinished(sessions, run_ids)} runs never finished"
        deployment.supervise()
        await observe_holders(deployment, sessions)
        await asyncio.sleep(0.2)
    return time.monotonic() - started


def start_run(scenario: Scenario, subject_id: str, on_retry: Callable[[int | str], None] | None = None) -> str:
    """POST a run through the proxy with an Idempotency-Key; the same request again on a 5xx or a cut connection."""
    key = f"start-{subject_id}"
    last: object = None
    for _ in range(20):
        try:
            answer = scenario.api.post(
                f"/workflows/{scenario.workflow_id}/runs",
                json={"subject_id": subject_id},
                headers={"Idempotency-Key": key},
            )
        except httpx.TransportError as exc:
            last = type(exc).__name__
        else:
            if answer.status_code in (201, 202):
                run_id = str(answer.json()["id"])
                scenario.run_ids.append(run_id)
                return run_id
            if answer.status_code < 500 and answer.status_code != 409:
                raise AssertionError(f"starting a run answered {answer.status_code}: {answer.text}")
            last = answer.status_code
        if on_retry is not None:
            on_retry(last if isinstance(last, int) else str(last))
        time.sleep(0.5)
    raise AssertionError(f"a run could not be started through the proxy (last: {last})")


async def start_wave(scenario: Scenario, count: int, on_retry: Callable[[int | str], None] | None = None) -> list[str]:
    subjects, scenario.free_subjects = scenario.free_subjects[:count], scenario.free_subjects[count:]
    return [await asyncio.to_thread(start_run, scenario, subject, on_retry) for subject in subjects]


# --- The faults -------------------------------------------------------------------------------------------


async def cut_off_a_worker_host(
    deployment: Deployment, scenario: Scenario, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """A worker host loses its link while it holds runs (it is inside a slow endpoint call); another
    host takes them once the lease ends; the link comes back after twice the lease."""
    scenario.receiver.respond = lambda _r: (200, 1.5)
    wave = await start_wave(scenario, WAVE)
    victim = None
    deadline = time.monotonic() + 60
    while victim is None:
        assert time.monotonic() < deadline, "no worker host was seen holding runs"
        held = await observe_holders(deployment, sessions)
        victim = next((w for w in deployment.workers if held.get(w.pid)), None)
        await asyncio.sleep(0.02)
    deployment.network.cut(victim.host)
    cut_at = time.monotonic()
    async with sessions() as session:
        owner_prefix = f"%-{victim.pid}-%"
        lost = list(
            (
                await session.execute(
                    text("SELECT id, lease_owner FROM workflow_runs WHERE lease_owner LIKE :p"), {"p": owner_prefix}
                )
            ).all()
        )
    lost_ids = [row.id for row in lost]
    picked: dict[str, float] = {}
    healed_at = None
    while len(picked) < len(lost_ids) or healed_at is None:
        now = time.monotonic()
        if healed_at is None and now - cut_at >= 2 * LEASE_SECONDS:
            deployment.network.heal(victim.host)
            healed_at = now
        assert now - cut_at < 120, f"runs of the cut-off host never picked up: {set(lost_ids) - set(picked)}"
        async with sessions() as session:
            rows = (
                await session.execute(
                    text("SELECT id, lease_owner, state FROM workflow_runs WHERE id = ANY(:ids)"), {"ids": lost_ids}
                )
            ).all()
        for row in rows:
            taken = row.lease_owner is not None and f"-{victim.pid}-" not in row.lease_owner
            if row.id not in picked and (taken or row.state in FINISHED):
                picked[row.id] = now - cut_at
        await observe_holders(deployment, sessions)
        await asyncio.sleep(0.05)
    took = await drained(deployment, sessions, wave)
    times = sorted(picked.values())
    deployment.figure(
        f"fault: {victim.host.role} ({victim.host.address}) cut off holding {len(lost_ids)} runs; another host picked "
        f"up the first after {times[0]:.1f} s, the last after {times[-1]:.1f} s (lease {LEASE_SECONDS} s); link healed "
        f"after {2 * LEASE_SECONDS} s; the wave of {len(wave)} finished {took:.1f} s after the last was picked up"
    )
    scenario.receiver.respond = lambda _r: 200


async def kill_a_web_host(
    deployment: Deployment, scenario: Scenario, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """One web host is killed (SIGKILL, nothing restarts it) while runs are being started through the proxy."""
    retries: list[int | str] = []
    victim = deployment.web[0]
    first = await start_wave(scenario, WAVE // 3)
    victim.kill()
    killed_at = time.monotonic()
    rest = await start_wave(scenario, WAVE - len(first), on_retry=retries.append)
    answered_in = time.monotonic() - killed_at
    reads = [
        (await asyncio.to_thread(scenario.api.get, f"/workflows/{scenario.workflow_id}")).status_code for _ in range(20)
    ]
    took = await drained(deployment, sessions, first + rest)
    deployment.figure(
        f"fault: {victim.host.role} ({victim.host.address}) killed after {len(first)} of {WAVE} run starts; the other "
        f"{len(rest)} answered through the proxy within {answered_in:.1f} s, {len(retries)} repeated with the same key "
        f"({Counter(retries) or 'none'}); 20 reads after it: {Counter(reads)}; the wave finished in {took:.1f} s"
    )
    assert Counter(reads) == Counter({200: 20})


async def restart_postgres(
    deployment: Deployment, scenario: Scenario, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """PostgreSQL restarts (fast shutdown: every session ended) while runs are in flight."""
    scenario.receiver.respond = lambda _r: (200, 0.5)
    wave = await start_wave(scenario, WAVE)
    restarts_before = sum(w.restarts for w in deployment.workers)
    took_restart = await asyncio.to_thread(deployment.postgres.restart)
    restarted_at = time.monotonic()
    await sessions.kw["bind"].dispose()  # the test's own connections died with the server
    # The web tier is back when a read through the proxy answers again (readiness would also wait
    # for a worker's next heartbeat).
    ready_in = None
    last: object = None
    while ready_in is None:
        try:
            answer = await asyncio.to_thread(scenario.api.get, f"/workflows/{scenario.workflow_id}")
            if answer.status_code == 200:
                ready_in = time.monotonic() - restarted_at
            last = (answer.status_code, answer.text[:300])
        except httpx.HTTPError as exc:
            last = repr(exc)
        assert time.monotonic() - restarted_at < 180, f"reads through the proxy never came back: {last}"
        await asyncio.sleep(0.2)
    took = await drained(deployment, sessions, wave)
    restarted = sum(w.restarts for w in deployment.workers) - restarts_before
    exits = [code for w in deployment.workers for code in w.exits]
    deployment.figure(
        f"fault: PostgreSQL restarted in {took_restart:.1f} s with {len(wave)} runs in flight; reads through the proxy "
        f"answered again {ready_in:.1f} s later; the wave finished {took:.1f} s after the restart; worker processes restarted by "
        f"their unit: {restarted} (exit codes so far {exits})"
    )
    scenario.receiver.respond = lambda _r: 200


async def slow_link(deployment: Deployment, scenario: Scenario, sessions: async_sessionmaker[AsyncSession]) -> None:
    """50 ms of latency on a worker host's link (tc netem), the others as they are."""
    victim = deployment.workers[2]
    added = victim.host.run("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "50ms", check=False)
    if added.returncode != 0:
        deployment.figure(
            f"fault: 50 ms latency on {victim.host.role} not applied — this kernel does not offer tc netem "
            f"({added.stderr.strip()})"
        )
        return
    try:
        pinged = victim.host.run("ping", "-c", "3", "-i", "0.2", deployment.postgres.host.address, check=False)
        wave = await start_wave(scenario, WAVE)
        holders_before = deployment.holders_seen[victim.host.role]
        took = await drained(deployment, sessions, wave)
        deployment.figure(
            f"fault: 50 ms latency on {victim.host.role}'s link ({pinged.stdout.strip().splitlines()[-1] if pinged.stdout else 'no ping'}); "
            f"the wave of {len(wave)} finished in {took:.1f} s; {victim.host.role} seen holding runs "
            f"{deployment.holders_seen[victim.host.role] - holders_before} times"
        )
    finally:
        victim.host.run("tc", "qdisc", "del", "dev", "eth0", "root", check=False)


# --- The test ---------------------------------------------------------------------------------------------------


def run_smoke_suite(deployment: Deployment, slug: str, token: str) -> None:
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COCKPIT_")} | {
        "COCKPIT_E2E_TOKEN": token,
        "COCKPIT_E2E_REALM": slug,
        "COCKPIT_CHROMIUM": str(deployment.chromium),
        "SSL_CERT_FILE": str(deployment.ca),  # the suite's API client (httpx)
        "NODE_EXTRA_CA_CERTS": str(deployment.ca),  # Playwright's request context
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "e2e/smoke", "-m", "smoke", "--base-url", deployment.base_url, "-q",
            "-p", "no:cacheprovider", "--output", str(deployment.folder / "smoke-results"),
        ],
        env=env, capture_output=True, text=True, timeout=SMOKE_SECONDS, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    deployment.figure(
        f"smoke suite in Chromium through {deployment.base_url}: {summary} ({time.monotonic() - started:.0f} s)"
    )


async def prepare(deployment: Deployment, sessions: async_sessionmaker[AsyncSession], receiver: Receiver) -> Scenario:
    directory = await build_directory(
        sessions, subjects=4 * WAVE, roles=[*GRANTS, "legacy"], groups=2, held_by_subjects=["legacy"]
    )
    async with sessions() as session, session.begin():
        subscription, secret = await webhooks.create_subscription(
            session,
            directory.actor,
            deployment.env(deployment.workers[0].host)["COCKPIT_SECRET_KEY"],
            destination=receiver.url,
            allow_private_network=True,
            event_types=["role.assignment.expired"],
        )
    receiver.secrets.append(secret)
    workflow_id = await publish(sessions, directory.actor, "Across hosts", definition(directory, subscription.id))
    slug = await realm_slug(sessions, directory.realm_id)
    token = await asyncio.to_thread(admin_token, deployment, slug)
    api = httpx.Client(
        base_url=f"{deployment.base_url}/api/v1/realms/{slug}",
        headers={"Authorization": f"Bearer {token}"},
        verify=deployment.tls(),
        timeout=30,
    )
    return Scenario(directory, slug, workflow_id, receiver, api, list(directory.subject_ids))


def test_runs_through_the_proxy_survive_faults_of_every_host(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver = Receiver(host=deployment.network.gateway).start()

    async def scenario() -> tuple[Scenario, dict[str, Any]]:
        db = make_engine(deployment.postgres.url, pool_size=2)
        sessions = make_sessionmaker(db)
        try:
            # The smoke suite in a realm of its own, through the proxy, in Chromium.
            smoke = await build_directory(sessions, subjects=0, roles=[], groups=0, organization="Smoke")
            smoke_slug = await realm_slug(sessions, smoke.realm_id)
            smoke_token = await asyncio.to_thread(admin_token, deployment, smoke_slug)
            await asyncio.to_thread(run_smoke_suite, deployment, smoke_slug, smoke_token)

            chosen = await prepare(deployment, sessions, receiver)
            try:
                await cut_off_a_worker_host(deployment, chosen, sessions)
                await kill_a_web_host(deployment, chosen, sessions)
                await restart_postgres(deployment, chosen, sessions)
                await slow_link(deployment, chosen, sessions)
                await drained(deployment, sessions, chosen.run_ids)
                return chosen, await observe(sessions, chosen)
            finally:
                chosen.api.close()
        finally:
            await db.dispose()

    try:
        chosen, seen = asyncio.run(scenario())
    except BaseException:
        deployment.print_logs()
        raise
    finally:
        receiver.stop()
    deployment.figure(f"worker hosts seen holding runs (samples): {dict(deployment.holders_seen)}")
    result = check_nothing_lost_or_repeated(chosen, seen)
    with capsys.disabled():  # the figures show in the output whether or not pytest captures it
        print("\n".join(["", "topology figures:", *deployment.figures, result]), flush=True)


async def observe(sessions: async_sessionmaker[AsyncSession], scenario: Scenario) -> dict[str, Any]:
    ids = {"ids": scenario.run_ids}
    async with sessions() as session:
        runs = (
            await session.execute(
                text(
                    "SELECT id, subject_id, state, lease_owner, error_category, last_error FROM workflow_runs "
                    "WHERE workflow_id = :wf"
                ),
                {"wf": scenario.workflow_id},
            )
        ).all()
        attempts = (
            await session.execute(
                text("SELECT run_id, step_id, state, id, error_category FROM step_attempts WHERE run_id = ANY(:ids)"),
                ids,
            )
        ).all()
        audit = (
            await session.execute(
                text(
                    "SELECT correlation_id, type, count(*) AS n FROM audit_events WHERE correlation_id = ANY(:ids) GROUP BY 1, 2"
                ),
                ids,
            )
        ).all()
        granted = (
            await session.execute(
                text("SELECT role_id, user_id, source_run_id FROM role_assignments WHERE role_id = ANY(:roles)"),
                {"roles": [scenario.directory.role_ids[name] for name in GRANTS]},
            )
        ).all()
        legacy_left = await session.scalar(
            text("SELECT count(*) FROM role_assignments WHERE role_id = :role AND user_id = ANY(:users)"),
            {"role": scenario.directory.role_ids["legacy"], "users": [r.subject_id for r in runs]},
        )
        members = (
            await session.execute(
                text("SELECT group_id, user_id, source_run_id FROM group_members WHERE group_id = ANY(:groups)"),
                {"groups": scenario.directory.group_ids},
            )
        ).all()
    return {
        "runs": runs,
        "attempts": attempts,
        "audit": audit,
        "granted": granted,
        "legacy_left": legacy_left,
        "members": members,
    }


def check_nothing_lost_or_repeated(scenario: Scenario, seen: dict[str, Any]) -> str:
    runs = seen["runs"]
    # Nothing lost: every run the proxy answered for exists, once per subject, and succeeded.
    assert sorted(r.id for r in runs) == sorted(set(scenario.run_ids)), "runs lost or made twice"
    assert len(scenario.run_ids) == len(set(scenario.run_ids)) == 4 * WAVE - len(scenario.free_subjects)
    assert Counter(r.subject_id for r in runs).most_common(1)[0][1] == 1
    assert [(r.id, r.state, r.error_category, r.last_error) for r in runs if r.state != "succeeded"] == []
    assert [r.id for r in runs if r.lease_owner] == []
    # Each step exactly one succeeded attempt; no attempt left started.
    succeeded = Counter((a.run_id, a.step_id) for a in seen["attempts"] if a.state == "succeeded")
    assert succeeded == Counter({(r.id, step): 1 for r in runs for step in STEP_IDS})
    assert [a for a in seen["attempts"] if a.state == "started"] == []
    failed = [a for a in seen["attempts"] if a.state == "failed"]
    assert {(a.step_id, a.error_category) for a in failed} <= {("sync", "interrupted")}, failed
    # Each internal effect exactly once, made by its run.
    run_of = {r.subject_id: r.id for r in runs}
    roles = [scenario.directory.role_ids[name] for name in GRANTS]
    assert sorted(map(tuple, seen["granted"])) == sorted((role, s, run) for s, run in run_of.items() for role in roles)
    assert sorted(map(tuple, seen["members"])) == sorted(
        (group, s, run) for s, run in run_of.items() for group in scenario.directory.group_ids
    )
    assert seen["legacy_left"] == 0
    audit: dict[str, Counter[str]] = {r.id: Counter() for r in runs}
    for row in seen["audit"]:
        audit[row.correlation_id][row.type] += row.n
    interrupted = Counter(a.run_id for a in failed)
    wrong = {
        r.id: dict(audit[r.id])
        for r in runs
        if audit[r.id] != AUDIT_PER_RUN + Counter({"workflow.step.failed": interrupted[r.id]})
    }
    assert wrong == {}
    # The endpoint: at least once per run, only under the run's one key for the step, every request signed.
    calls: dict[str, list[Any]] = {}
    for request in scenario.receiver.requests():
        assert request.verified_by == [0], request.headers
        calls.setdefault(request.header("Idempotency-Key") or "", []).append(request)
    assert set(calls) == {f"{r.id}.sync" for r in runs}
    attempt_ids = {(a.run_id, a.id) for a in seen["attempts"] if a.step_id == "sync"}
    for run in runs:
        assert {(run.id, c.header("Webhook-Id")) for c in calls[f"{run.id}.sync"]} <= attempt_ids
    repeated = sum(len(c) - 1 for c in calls.values())
    return (
        f"result: {len(runs)} runs started through the proxy, 0 lost, 0 internal effects twice; the endpoint heard "
        f"{sum(len(c) for c in calls.values())} calls under {len(calls)} keys ({repeated} repeated with the same key, "
        f"{len(failed)} attempts interrupted)"
    )
