"""Pages and API at a million runs: seed in SQL, then measure request latency and show the plans.

    uv run python bench/pages.py                          # 1,000,000 runs × 20 attempts (≈ 20 M rows)
    uv run python bench/pages.py --runs 1000000 --attempts 4
    uv run python bench/pages.py --keep                   # leave the database for a look
    uv run python bench/pages.py --reuse                  # measure a database seeded and kept before

Uses the PostgreSQL server of ``--server`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``),
creates database ``--database`` (default ``cockpit_pages_bench``; dropped first if it exists), migrates it,
and seeds it:

- through the product's own functions: a realm, its administrator (an admin token and a browser
  session with MFA), 5 roles, and 20 published workflows of 20 steps (19 ``assign_role``, ``end``);
- in SQL (``generate_series``, one ``INSERT … SELECT`` each): 10,000 users, ``--runs`` runs spread
  over the last ``--runs`` × 30 s (a year at a million) across the 20 workflows and the users —
  1 % failed, 0.2 % compensated, 0.1 % compensation_failed, 0.5 % in flight (pending, running,
  waiting, awaiting approval), the rest succeeded — and ``--attempts`` attempts per run (one per
  step from the first), then ``VACUUM ANALYZE``.

Then it starts ``cockpit serve`` on ``--port`` against that database, and for each read makes
``--warm`` requests, then ``--requests`` more one after another (one client), and reports p50,
p95 and the maximum; ``GET /healthz`` is measured the same way, as the floor of the server.
The reads vary their arguments request by request: list pages with and without filters and
deeper pages (cursors), timelines of runs drawn at random from the whole table (so mostly not
in cache), the diagnostics of each of the 20 workflows in turn, the workflows list (a health
badge per row), Needs attention and ``/metrics``. Last, the plans of the queries behind the
list, the timeline, the home, the diagnostics and the metrics' gauges
(``EXPLAIN (ANALYZE, BUFFERS)``).
Every loop is bounded by count and by ``--max-seconds`` per read.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.directory.models import Role
from engine.directory.realms import create_realm, realm_by_slug
from engine.directory.sessions import create_session, resolve_session
from engine.directory.tokens import mint_token
from engine.platform.database import libpq_conninfo, with_database
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.ids import new_id
from engine.platform.migrate import upgrade
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.processes import cockpit_env, start, stop, wait_http

WORKFLOWS = 20
USERS = 10_000
STEPS = 20

# --- Seeding --------------------------------------------------------------------------------------


def create_database(server: str, name: str) -> str:
    with psycopg.connect(libpq_conninfo(server), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_database(server, name)
    upgrade(url)
    return url


def drop(server: str, name: str) -> None:
    with psycopg.connect(libpq_conninfo(server), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def seed_product(url: str) -> dict[str, Any]:
    """What the product's functions make: realm, administrator, credentials, roles, workflows."""
    engine = make_engine(url, pool_size=2)
    sessions = make_sessionmaker(engine)
    async with sessions() as session, session.begin():
        realm, admin = await create_realm(session, "bench", admin_email="admin@bench.example")
        actor = Actor(type="user", id=admin.id, realm_id=realm.id)
        token, _ = await mint_token(session, actor, audience="admin", user=admin)
        cookie, _ = await create_session(session, admin, mfa=True)
        roles = []
        for i in range(5):
            role = Role(id=new_id("rol"), realm_id=realm.id, name=f"role-{i}", permissions=["realm.workflows.read"])
            session.add(role)
            roles.append(role)
        await session.flush()
    workflow_ids = []
    for w in range(WORKFLOWS):
        steps: list[dict[str, Any]] = [
            {"id": f"grant-{i}", "type": "assign_role", "role_id": roles[i % 5].id, "scope": "realm"}
            for i in range(1, STEPS)
        ]
        steps.append({"id": "done", "type": "end"})
        definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps}
        async with sessions() as session, session.begin():
            workflow, _ = await create_workflow(
                session,
                actor,
                name=f"Workflow {w:02d}",
                definition=definition,
                has_definition=True,
                requires_approval=False,
            )
        async with sessions() as session, session.begin():
            await publish_revision(session, actor, workflow.id, 1)
        workflow_ids.append(workflow.id)
    await engine.dispose()
    return {"realm_id": realm.id, "slug": realm.slug, "admin_id": admin.id, "token": token, "cookie": cookie}


SEED_USERS = """
INSERT INTO users (id, realm_id, email, display_name, status, guest, created_at, updated_at)
SELECT 'usr_' || lpad(to_hex(g), 10, '0') || substr(md5('u' || g), 1, 16), %(realm)s,
       'user' || g || '@bench.example', 'User ' || g, 'active', false, now(), now()
  FROM generate_series(1, %(users)s) g
"""

# Runs: ids sort in creation order like the product's (a growing prefix, then random-looking).
# Workflow k of the 20 runs revision 1; states by residue; created 30 s apart up to now.
SEED_RUNS = """
WITH wf AS (
  SELECT row_number() OVER (ORDER BY w.id) - 1 AS k, w.id AS workflow_id, r.id AS revision_id
    FROM workflows w JOIN workflow_revisions r ON r.workflow_id = w.id AND r.number = 1
   WHERE w.realm_id = %(realm)s
), subjects AS (
  SELECT row_number() OVER (ORDER BY id) - 1 AS k, id FROM users WHERE realm_id = %(realm)s AND id <> %(admin)s
), shaped AS (
  SELECT g,
         'wrn_' || lpad(to_hex(g), 10, '0') || substr(md5('r' || g), 1, 16) AS id,
         now() - (%(runs)s - g) * interval '30 seconds' AS created_at,
         CASE WHEN g %% 200 = 0 THEN (ARRAY['pending', 'running', 'waiting', 'awaiting_approval'])[1 + (g / 200) %% 4]
              WHEN g %% 100 = 1 THEN 'failed'
              WHEN g %% 500 = 2 THEN 'compensated'
              WHEN g %% 1000 = 3 THEN 'compensation_failed'
              ELSE 'succeeded' END AS state
    FROM generate_series(1, %(runs)s) g
)
INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, trigger_type, trigger_key,
                           input, input_version, publisher_id, starter_id, depth, state, step_index, due_at,
                           context, created_at, updated_at, finished_at)
SELECT s.id, %(realm)s, wf.workflow_id, 1, wf.revision_id, subjects.id, 'manual', s.id,
       '{}'::jsonb, 1, %(admin)s, %(admin)s, 0, s.state,
       CASE WHEN s.state IN ('pending', 'running', 'waiting', 'awaiting_approval') THEN (s.g / 200) %% %(steps)s
            ELSE %(steps)s - 1 END,
       CASE WHEN s.state IN ('pending', 'running') THEN s.created_at + interval '1 minute' END,
       '{}'::jsonb, s.created_at, s.created_at + interval '5 seconds',
       CASE WHEN s.state IN ('pending', 'running', 'waiting', 'awaiting_approval') THEN NULL
            ELSE s.created_at + interval '5 seconds' END
  FROM shaped s
  JOIN wf ON wf.k = s.g %% %(workflows)s
  JOIN subjects ON subjects.k = s.g %% %(users)s
"""

SEED_ATTEMPTS = """
INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number, idempotency_key, state,
                           input, input_version, result, max_attempts, backoff_ms, compensation_strategy,
                           compensation_state, compensation_attempts, started_at, finished_at)
SELECT 'wsa_' || substr(r.id, 5, 10) || lpad(to_hex(a), 4, '0') || substr(md5(r.id || a), 1, 12),
       r.id, r.realm_id,
       CASE WHEN a = %(steps)s THEN 'done' ELSE 'grant-' || a END,
       a - 1,
       CASE WHEN a = %(steps)s THEN 'end' ELSE 'assign_role' END,
       1,
       r.id || '.' || CASE WHEN a = %(steps)s THEN 'done' ELSE 'grant-' || a END,
       'succeeded', '{}'::jsonb, '1', '{"assignment_id": "ras_bench"}'::jsonb, 3, 30000,
       CASE WHEN a = %(steps)s THEN 'none' ELSE 'undo' END,
       CASE WHEN a = %(steps)s THEN 'not_needed' ELSE 'pending' END,
       0, r.created_at + a * interval '200 milliseconds', r.created_at + a * interval '200 milliseconds'
  FROM workflow_runs r CROSS JOIN generate_series(1, %(attempts)s) a
 WHERE r.realm_id = %(realm)s
"""


def seed_sql(url: str, facts: dict[str, Any], runs: int, attempts: int) -> dict[str, float]:
    params = {
        "realm": facts["realm_id"],
        "admin": facts["admin_id"],
        "runs": runs,
        "users": USERS,
        "workflows": WORKFLOWS,
        "steps": STEPS,
        "attempts": min(attempts, STEPS),
    }
    timings: dict[str, float] = {}
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        for name, statement in [("users", SEED_USERS), ("runs", SEED_RUNS), ("attempts", SEED_ATTEMPTS)]:
            began = time.perf_counter()
            conn.execute(statement, params)  # type: ignore[arg-type]
            timings[name] = time.perf_counter() - began
            print(f"  seeded {name} in {timings[name]:.0f} s", flush=True)
        began = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) workflow_runs")
        conn.execute("VACUUM (ANALYZE) step_attempts")
        conn.execute("VACUUM (ANALYZE) users")
        timings["vacuum"] = time.perf_counter() - began
        print(f"  vacuum analyze in {timings['vacuum']:.0f} s", flush=True)
    return timings


def facts_of(url: str) -> dict[str, Any]:
    """A kept database: fresh credentials for its administrator."""

    async def fresh() -> dict[str, Any]:
        engine = make_engine(url, pool_size=1)
        sessions = make_sessionmaker(engine)
        async with sessions() as session, session.begin():
            realm = await realm_by_slug(session, "bench")
            assert realm is not None, "no realm 'bench' in that database: seed it first"
            admin = await user_by_email(session, realm.id, "admin@bench.example")
            assert admin is not None
            actor = Actor(type="user", id=admin.id, realm_id=realm.id)
            token, _ = await mint_token(session, actor, audience="admin", user=admin)
            cookie, _ = await create_session(session, admin, mfa=True)
        await engine.dispose()
        return {"realm_id": realm.id, "slug": realm.slug, "admin_id": admin.id, "token": token, "cookie": cookie}

    return asyncio.run(fresh())


# --- Measuring ------------------------------------------------------------------------------------


def sample_targets(url: str, realm_id: str, count: int) -> dict[str, list[str]]:
    with psycopg.connect(libpq_conninfo(url)) as conn:
        total = conn.execute("SELECT count(*) FROM workflow_runs WHERE realm_id = %s", (realm_id,)).fetchone()
        n = int(total[0]) if total else 0
        rng = random.Random(15)
        offsets = sorted(rng.randrange(n) for _ in range(count))
        run_ids = [
            row[0]
            for offset in offsets
            for row in conn.execute(
                "SELECT id FROM workflow_runs WHERE realm_id = %s ORDER BY id LIMIT 1 OFFSET %s", (realm_id, offset)
            ).fetchall()
        ]
        workflow_ids = [r[0] for r in conn.execute("SELECT id FROM workflows WHERE realm_id = %s", (realm_id,))]
    rng.shuffle(run_ids)
    return {"runs": run_ids, "workflows": workflow_ids}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def process_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def record(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy on the server from now until interrupted: collapsed stacks, one line per stack."""
    out.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(["uvx", "py-spy", "record", "-p", str(pid), "-o", str(out), "-f", "raw"])
    time.sleep(1.0)  # let it attach before the measured requests
    return process


async def measure(
    base: str,
    facts: dict[str, Any],
    targets: dict[str, list[str]],
    *,
    warm: int,
    requests: int,
    max_seconds: float,
    server_pid: int,
    only: list[str] | None = None,
    profile: Path | None = None,
) -> dict[str, list[float]]:
    slug = facts["slug"]
    api_headers = {"Authorization": f"Bearer {facts['token']}"}
    page_headers = {"Accept": "text/html", "Cookie": f"cockpit_session={facts['cookie']}"}
    rng = random.Random(7)
    cursors: list[str | None] = [None]

    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        # Cursors for deeper pages, by following the API's next links from the top.
        cursor: str | None = None
        for _ in range(20):
            params = {"cursor": cursor} if cursor else {}
            body = (await client.get(f"/api/v1/realms/{slug}/workflow-runs", params=params, headers=api_headers)).json()
            cursor = body.get("next_cursor")
            if not cursor:
                break
            cursors.append(cursor)
        states = ["failed", "compensated", "running", "succeeded"]

        def list_params(i: int) -> dict[str, str]:
            kind = i % 4
            if kind == 0:
                cursor_value = cursors[i % len(cursors)]
                return {"cursor": cursor_value} if cursor_value else {}
            if kind == 1:
                return {"state": states[i % len(states)]}
            if kind == 2:
                return {"workflow_id": targets["workflows"][i % len(targets["workflows"])]}
            return {}

        reads: dict[str, Any] = {
            # The floor: the same server answering without the database or a credential.
            "GET /healthz": lambda i: ("/healthz", {}, {}),
            "API run list": lambda i: (f"/api/v1/realms/{slug}/workflow-runs", list_params(i), api_headers),
            "run list page": lambda i: (f"/realms/{slug}/runs", list_params(i), page_headers),
            "run timeline page": lambda i: (
                f"/realms/{slug}/runs/{targets['runs'][i % len(targets['runs'])]}",
                {},
                page_headers,
            ),
            "realm home page": lambda i: (f"/realms/{slug}/", {}, page_headers),
            "workflows list page": lambda i: (f"/realms/{slug}/workflows", {}, page_headers),
            "API diagnostics": lambda i: (
                f"/api/v1/realms/{slug}/workflows/{targets['workflows'][i % len(targets['workflows'])]}/diagnostics",
                {},
                api_headers,
            ),
            "diagnostics page": lambda i: (
                f"/realms/{slug}/workflows/{targets['workflows'][i % len(targets['workflows'])]}/diagnostics",
                {},
                page_headers,
            ),
            "needs attention page": lambda i: (f"/realms/{slug}/attention", {}, page_headers),
            "GET /metrics": lambda i: ("/metrics", {}, {}),
        }
        results: dict[str, list[float]] = {}
        for name, make in reads.items():
            if only and not any(part.lower() in name.lower() for part in only):
                continue
            latencies: list[float] = []
            profiler = None
            cpu_before = 0.0
            deadline = time.perf_counter() + max_seconds
            for i in range(warm + requests):
                if i == warm:
                    if profile is not None:
                        profiler = record(server_pid, profile / (name.replace(" ", "_").replace("/", "") + ".txt"))
                    cpu_before = process_cpu(server_pid)
                if time.perf_counter() > deadline:
                    break
                path, params, headers = make(i + (rng.randrange(1000) if name == "run timeline page" else 0))
                began = time.perf_counter()
                response = await client.get(path, params=params, headers=headers)
                elapsed = time.perf_counter() - began
                if response.status_code != 200:
                    raise SystemExit(f"{name}: {path} {params} answered {response.status_code}: {response.text[:300]}")
                if i >= warm:
                    latencies.append(elapsed)
            results[name] = latencies
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)  # py-spy writes what it recorded so far
                profiler.wait(timeout=60)
            # The web server's own CPU per measured request: what the read costs whatever else the
            # machine is doing (latency on a busy machine is mostly waiting for a core).
            cpu_ms = (process_cpu(server_pid) - cpu_before) / max(1, len(latencies)) * 1000
            print(
                f"  {name:<20} n={len(latencies):<4} p50 {pct(latencies, 0.5):6.1f} ms  "
                f"p95 {pct(latencies, 0.95):6.1f} ms  max {max(latencies) * 1000:6.1f} ms  "
                f"server CPU {cpu_ms:5.2f} ms/request",
                flush=True,
            )
    return results


# --- Plans ----------------------------------------------------------------------------------------


async def plans(url: str, facts: dict[str, Any], targets: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    """Each read's queries as the product sends them, with their plans (``EXPLAIN (ANALYZE, BUFFERS)``)."""
    from sqlalchemy import event

    from cockpit.pages.runs.shared import people
    from engine.directory.authz import load_authority
    from engine.directory.overview import (
        latest_audit_events_with_names,
        realm_counts,
        workflow_kpis,
    )
    from engine.runs import attention, diagnostics, run_reads
    from engine.runs.metrics import database_gauges

    engine = make_engine(url, pool_size=1)
    sessions = make_sessionmaker(engine)
    captured: list[tuple[str, str, Any]] = []
    label = {"now": ""}

    def on_execute(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_args: Any) -> None:
        captured.append((label["now"], statement, parameters))

    realm_id = facts["realm_id"]
    run_id = targets["runs"][0]
    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    async with sessions() as session, session.begin():
        label["now"] = "authentication"
        await resolve_session(session, facts["cookie"])
        label["now"] = "authority"
        await load_authority(session, realm_id, "user", facts["admin_id"])
        label["now"] = "run list (first page)"
        await run_reads.list_run_lines(session, realm_id)
        label["now"] = "run list (state = failed)"
        await run_reads.list_run_lines(session, realm_id, state="failed")
        label["now"] = "run list (one workflow)"
        await run_reads.list_run_lines(session, realm_id, workflow_id=targets["workflows"][0])
        label["now"] = "timeline: run, workflow, steps"
        context = await run_reads.get_run_context(session, realm_id, run_id)
        label["now"] = "timeline: attempts"
        await run_reads.run_attempts(session, run_id)
        label["now"] = "timeline: people"
        await people(session, realm_id, [context.run.subject_id, context.run.publisher_id])
        label["now"] = "home: counts"
        await realm_counts(session, realm_id, {"users", "organizations", "roles", "groups", "webhooks"})
        label["now"] = "home: workflow strip"
        await workflow_kpis(session, realm_id)
        label["now"] = "home: audit"
        await latest_audit_events_with_names(session, realm_id)
        label["now"] = "home: health of the workflows, open compensation failures"
        await diagnostics.realm_attention(session, realm_id)
        label["now"] = "workflows list: health of the page's workflows"
        await diagnostics.health_of(session, realm_id, targets["workflows"])
        label["now"] = "diagnostics: workflow"
        await diagnostics.workflow_diagnostics(session, realm_id, targets["workflows"][0])
        label["now"] = "needs attention: first page"
        await attention.needs_attention(session, realm_id)
        label["now"] = "/metrics: gauges"
        await database_gauges(session)
    event.remove(engine.sync_engine, "before_cursor_execute", on_execute)
    out: list[tuple[str, str, str]] = []
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        assert raw is not None
        for name, statement, parameters in captured:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            args = list(parameters) if isinstance(parameters, list | tuple) else []
            rows = await raw.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, *args)
            out.append((name, " ".join(statement.split()), "\n".join(r[0] for r in rows)))
    await engine.dispose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="cockpit_pages_bench")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--attempts", type=int, default=20, help="attempts per run (at most 20)")
    parser.add_argument("--port", type=int, default=8630)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="per read")
    parser.add_argument("--keep", action="store_true", help="leave the database (drop it with --drop)")
    parser.add_argument("--reuse", action="store_true", help="measure the kept database, do not seed")
    parser.add_argument("--drop", action="store_true", help="only drop the database")
    parser.add_argument("--plans", type=Path, help="write the plans to this file")
    parser.add_argument("--only", nargs="+", help="measure only the reads whose names contain one of these words")
    parser.add_argument("--no-plans", action="store_true", help="skip the plans")
    parser.add_argument("--profile", type=Path, help="record the server with py-spy, one file per read, here")
    args = parser.parse_args()
    if args.drop:
        drop(args.server, args.database)
        return
    url = with_database(args.server, args.database)
    server = None
    home = Path(tempfile.mkdtemp(prefix="cockpit-bench-pages-"))
    try:
        if args.reuse:
            upgrade(url)  # a database kept from an older checkout gets this one's migrations
            facts = facts_of(url)
        else:
            began = time.perf_counter()
            print(f"seeding {args.runs} runs × {min(args.attempts, STEPS)} attempts into {args.database}", flush=True)
            url = create_database(args.server, args.database)
            facts = asyncio.run(seed_product(url))
            seed_sql(url, facts, args.runs, args.attempts)
            print(f"  seeded in {time.perf_counter() - began:.0f} s", flush=True)
        targets = sample_targets(url, facts["realm_id"], 200)
        env = cockpit_env(url, home, COCKPIT_LOG_LEVEL="WARNING", COCKPIT_PORT=str(args.port))
        server = start(["serve", "--no-migrate", "--port", str(args.port)], env, home / "server.log")
        base = f"http://127.0.0.1:{args.port}"
        wait_http(base + "/healthz", timeout=60)
        print(f"requests (one client, {args.warm} warm-up + {args.requests} measured per read):", flush=True)
        asyncio.run(
            measure(
                base,
                facts,
                targets,
                warm=args.warm,
                requests=args.requests,
                max_seconds=args.max_seconds,
                server_pid=server.pid,
                only=args.only,
                profile=args.profile,
            )
        )
        stop(server)
        server = None
        if args.no_plans:
            return
        found = asyncio.run(plans(url, facts, targets))
        text = "\n\n".join(f"-- {name}\n{statement}\n{plan}" for name, statement, plan in found)
        if args.plans:
            args.plans.write_text(text + "\n")
            print(f"plans written to {args.plans}")
        else:
            print(text)
    finally:
        if server is not None:
            stop(server)
        if not args.keep and not args.reuse:  # a database measured again is kept again
            drop(args.server, args.database)
            print(f"dropped {args.database}")


if __name__ == "__main__":
    main()
