"""Durable runs under kill -9 (seed 000 "Execution and idempotency").

Two real ``cockpit worker`` processes advance runs while one of them is killed with SIGKILL at
random moments and replaced, again and again. Afterwards every run has succeeded, each step has
exactly one succeeded attempt, each effect happened exactly once (role assignment, group
membership, role removal, audit events), and no run is left leased. Each run also calls an
endpoint (a real receiver on 127.0.0.1 that verifies every signature): the endpoint heard from
every run at least once, only ever under the run's Idempotency-Key and one of its attempts'
Webhook-Ids, and the only failed attempts are calls cut off by a kill (``interrupted``).

When to kill and whom is drawn from a seeded RNG; the seed is printed (``pytest -s``, and with
the output of a failed test) and named in every failure message. ``COCKPIT_CHAOS_SEED=<seed>``
replays the same draws (what they hit still depends on timing).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise, zip_longest
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory import organizations, webhooks
from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.platform.clock import FixedClock
from engine.platform.db import make_engine, make_sessionmaker
from engine.runs.runner import Runner, RunnerSettings
from engine.runs.runstore import leases
from engine.runs.runstore.leases import LeaseLost
from testing.chaos import (
    Directory,
    WorkerPool,
    add_members,
    add_subjects,
    build_directory,
    leases_by_pid,
    publish,
    start_manual_runs,
    working_pids,
)
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.processes import cockpit_env
from testing.receiver import Receiver
from testing.runs import advance, advance_once

LEASE_SECONDS = 3
MANUAL_WAVES = (8, 8, 8)  # manual runs, one wave per kill
EVENT_WAVES = (4, 4, 4)  # memberships added (each starts an event-triggered run)
MIN_KILLS = 8
MIN_KILLS_HOLDING_RUNS = 3  # kills that cut off a worker while it held runs
# Deadlines only bound a test that went wrong; they are generous so that a loaded machine (slow
# starts, slow steps) never fails it. The chaos phase ends on counts, not on time.
START_DEADLINE_SECONDS = 180  # the first worker picks up work
CHAOS_DEADLINE_SECONDS = 600  # all waves started and MIN_KILLS kills made
CALM_DEADLINE_SECONDS = 600  # after the last kill, the survivors finish every run
HOLDER_WAIT_SECONDS = 10  # after a wave starts, how long to look for a worker holding its runs
GRANTS = 4  # assign_role steps per run (one role each)
JOINS = 4  # add_to_group steps per run (one group each)
STEP_IDS = (
    *(f"grant-{n}" for n in range(1, GRANTS + 1)),
    *(f"join-{n}" for n in range(1, JOINS + 1)),
    "drop",
    "sync",
    "done",
)
# What one run leaves in the audit trail, counted by its correlation id (the run id).
AUDIT_PER_RUN = Counter(
    {
        "workflow.run.started": 1,
        "role.assigned": GRANTS,
        "group.member_added": JOINS,
        "role.revoked": 1,
        "workflow.step.succeeded": len(STEP_IDS),
        "workflow.run.succeeded": 1,
    }
)
GRANTED = [f"granted-{n}" for n in range(1, GRANTS + 1)]


def chaos_seed() -> int:
    given = os.environ.get("COCKPIT_CHAOS_SEED")
    return int(given) if given else random.SystemRandom().randrange(2**32)


def definition(directory: Directory, group_ids: list[str], trigger: dict[str, Any], hook: str) -> dict[str, Any]:
    """Grant four roles and join four groups one step at a time, drop ``legacy``, call an endpoint, end."""
    grants = [
        {"id": f"grant-{n}", "type": "assign_role", "role_id": directory.role_ids[name], "scope": "realm"}
        for n, name in enumerate(GRANTED, start=1)
    ]
    joins = [
        {"id": f"join-{n}", "type": "add_to_group", "group_id": group_id} for n, group_id in enumerate(group_ids, 1)
    ]
    steps = [step for pair in zip(grants, joins, strict=True) for step in pair]
    return {
        "schema_version": 1,
        "triggers": [trigger],
        "retry": {"max_attempts": 3, "backoff": "1s"},
        "steps": [
            *steps,
            {"id": "drop", "type": "remove_role", "role_id": directory.role_ids["legacy"]},
            # Kills between a call and its record are retried (interrupted): room for several.
            {
                "id": "sync",
                "type": "call_webhook",
                "subscription_id": hook,
                "retry": {"max_attempts": 10, "backoff": "1s"},
            },
            {"id": "done", "type": "end"},
        ],
    }


@dataclass
class Scenario:
    directory: Directory
    manual_workflow_id: str
    event_workflow_id: str
    newcomers_org_id: str
    newcomers_group_ids: list[str]
    newcomer_ids: list[str]
    receiver: Receiver
    run_ids: list[str] = field(default_factory=list)

    @property
    def subject_count(self) -> int:
        return len(self.directory.subject_ids) + len(self.newcomer_ids)


async def prepare(sessions: async_sessionmaker[AsyncSession], receiver: Receiver) -> Scenario:
    """Members who hold ``legacy``, with a manual workflow; newcomers, with an event-triggered one."""
    directory = await build_directory(
        sessions,
        subjects=sum(MANUAL_WAVES),
        roles=[*GRANTED, "legacy"],
        groups=JOINS,
        held_by_subjects=["legacy"],
    )
    newcomer_ids = await add_subjects(sessions, directory, sum(EVENT_WAVES), held=["legacy"])
    actor = directory.actor
    async with sessions() as session, session.begin():
        org = await organizations.create_organization(session, actor, name="Newcomers")
        authority = await load_authority(session, directory.realm_id, "user", directory.admin_id)
        group_ids = [
            (await create_group(session, actor, authority, org.id, name=f"Onboarding {n}"))[0].id
            for n in range(1, JOINS + 1)
        ]
        # Step calls only: the receiver is not subscribed to the events this scenario makes.
        subscription, secret = await webhooks.create_subscription(
            session,
            actor,
            TEST_SECRET_KEY,
            destination=receiver.url,
            allow_private_network=True,
            event_types=["role.assignment.expired"],
        )
    receiver.secrets.append(secret)
    hook = subscription.id
    manual = await publish(
        sessions, actor, "Reorganize", definition(directory, directory.group_ids, {"type": "manual"}, hook)
    )
    trigger = {"type": "event", "event_types": ["organization.membership.added"], "organization_id": org.id}
    event = await publish(sessions, actor, "Onboard", definition(directory, group_ids, trigger, hook))
    return Scenario(directory, manual, event, org.id, group_ids, newcomer_ids, receiver)


async def unfinished_work(sessions: async_sessionmaker[AsyncSession], realm_id: str) -> int:
    """Runs not yet finished plus events not yet dispatched (each of those starts a run)."""
    async with sessions() as session:
        count = await session.scalar(
            text(
                "SELECT (SELECT count(*) FROM workflow_runs WHERE realm_id = :realm AND state NOT IN "
                "('succeeded', 'failed', 'compensated', 'compensation_failed', 'cancelled')) + "
                "(SELECT count(*) FROM outbox_events WHERE realm_id = :realm AND dispatched_at IS NULL)"
            ),
            {"realm": realm_id},
        )
    return int(count or 0)


def in_waves(ids: list[str], sizes: tuple[int, ...]) -> list[list[str]]:
    bounds = [sum(sizes[:n]) for n in range(len(sizes) + 1)]
    return [ids[start:end] for start, end in pairwise(bounds)]


async def unleash(
    sessions: async_sessionmaker[AsyncSession], scenario: Scenario, pool: WorkerPool, rng: random.Random
) -> None:
    """Start work in waves while a worker is killed every 1–3 s; then let the survivors finish.

    The victim is mostly one that holds runs at that moment (so the kill lands in the middle of
    their steps), otherwise any worker that has started working; a replacement starts at once.
    Kills go on until every wave has started and MIN_KILLS kills were made, MIN_KILLS_HOLDING_RUNS
    of them on a worker holding runs (or no work is left for a kill to cut off).
    """
    directory = scenario.directory
    manual = [("manual", wave) for wave in in_waves(directory.subject_ids, MANUAL_WAVES)]
    event = [("event", wave) for wave in in_waves(scenario.newcomer_ids, EVENT_WAVES)]
    waves = [wave for pair in zip_longest(manual, event) for wave in pair if wave is not None]
    started = time.monotonic()
    pool.spawn()
    pool.spawn()
    while not {p.pid for p in pool.alive} & await working_pids(sessions):
        assert time.monotonic() - started < START_DEADLINE_SECONDS, "no worker started working"
        await asyncio.sleep(0.2)
    started = time.monotonic()
    while time.monotonic() - started < CHAOS_DEADLINE_SECONDS:
        held: dict[int, int] = {}
        if waves:
            kind, subjects = waves.pop(0)
            if kind == "manual":
                scenario.run_ids += await start_manual_runs(
                    sessions, directory.actor, scenario.manual_workflow_id, subjects
                )
            else:
                await add_members(sessions, directory.actor, scenario.newcomers_org_id, subjects)
            # A wave of internal steps may be done within a fraction of a second (several runs
            # commit together): look for a worker holding its runs at once, not after a pause.
            deadline = time.monotonic() + HOLDER_WAIT_SECONDS
            while time.monotonic() < deadline:
                held = await leases_by_pid(sessions)
                if any(held.get(p.pid) for p in pool.alive):
                    break
                await asyncio.sleep(0.02)
        else:
            held = await leases_by_pid(sessions)
        holders = [p.pid for p in pool.alive if held.get(p.pid)]
        victims = holders if holders and rng.random() < 0.8 else await working_pids(sessions)
        pid = pool.kill_random(among=victims)
        if pid is not None:
            pool.record_kill(pid, held.get(pid, 0))
            pool.spawn()
        await asyncio.sleep(rng.uniform(1.0, 3.0))  # the next kill a while later
        if not waves and len(pool.kills) >= MIN_KILLS:
            holding = sum(1 for k in pool.kills if k.leased_runs)
            if holding >= MIN_KILLS_HOLDING_RUNS or not await unfinished_work(sessions, directory.realm_id):
                break
    assert not waves, f"the chaos phase ended before all work was started ({len(waves)} waves left)"
    calm = time.monotonic()
    while time.monotonic() - calm < CALM_DEADLINE_SECONDS:
        if not await unfinished_work(sessions, directory.realm_id):
            return
        await asyncio.sleep(0.5)


@dataclass
class Observed:
    runs: list[Any]
    attempts: dict[str, Counter[tuple[str, str]]]
    audit: dict[str, Counter[str]]
    granted: list[Any]
    legacy_left: int
    group_rows: list[Any]
    undispatched: int
    sync_attempts: dict[str, list[Any]] = field(default_factory=dict)  # run id -> its sync attempts


async def observe(sessions: async_sessionmaker[AsyncSession], scenario: Scenario) -> Observed:
    realm = {"realm": scenario.directory.realm_id}
    async with sessions() as session:
        run_rows = (
            await session.execute(
                text(
                    "SELECT id, workflow_id, subject_id, state, trigger_type, trigger_key, lease_owner, "
                    "lease_expires_at, error_category, last_error FROM workflow_runs WHERE realm_id = :realm"
                ),
                realm,
            )
        ).all()
        attempts: dict[str, Counter[tuple[str, str]]] = {r.id: Counter() for r in run_rows}
        for run_id, step_id, state, count in await session.execute(
            text(
                "SELECT run_id, step_id, state, count(*) FROM step_attempts WHERE realm_id = :realm "
                "GROUP BY run_id, step_id, state"
            ),
            realm,
        ):
            attempts.setdefault(run_id, Counter())[(step_id, state)] += count
        audit: dict[str, Counter[str]] = {r.id: Counter() for r in run_rows}
        for correlation_id, event_type, count in await session.execute(
            text(
                "SELECT correlation_id, type, count(*) FROM audit_events "
                "WHERE realm_id = :realm AND correlation_id LIKE 'wrn\\_%' GROUP BY correlation_id, type"
            ),
            realm,
        ):
            audit.setdefault(correlation_id, Counter())[event_type] += count
        granted = (
            await session.execute(
                text("SELECT role_id, user_id, source_run_id FROM role_assignments WHERE role_id = ANY(:roles)"),
                {"roles": [scenario.directory.role_ids[name] for name in GRANTED]},
            )
        ).all()
        legacy_left = await session.scalar(
            text("SELECT count(*) FROM role_assignments WHERE role_id = :role"),
            {"role": scenario.directory.role_ids["legacy"]},
        )
        group_rows = (
            await session.execute(
                text("SELECT group_id, user_id, source_run_id FROM group_members WHERE realm_id = :realm"), realm
            )
        ).all()
        undispatched = await session.scalar(
            text("SELECT count(*) FROM outbox_events WHERE realm_id = :realm AND dispatched_at IS NULL"), realm
        )
        sync_attempts: dict[str, list[Any]] = {}
        for row in await session.execute(
            text(
                "SELECT run_id, id, state, error_category FROM step_attempts "
                "WHERE realm_id = :realm AND step_id = 'sync' ORDER BY number"
            ),
            realm,
        ):
            sync_attempts.setdefault(row.run_id, []).append(row)
    return Observed(
        runs=list(run_rows),
        attempts=attempts,
        audit=audit,
        granted=list(granted),
        legacy_left=int(legacy_left or 0),
        group_rows=list(group_rows),
        undispatched=int(undispatched or 0),
        sync_attempts=sync_attempts,
    )


def test_every_run_succeeds_with_each_effect_once_while_workers_are_killed(database_url: str, tmp_path: Path) -> None:
    seed = chaos_seed()
    print(f"\nchaos seed {seed} (replay: COCKPIT_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    env = cockpit_env(
        database_url,
        tmp_path / "home",
        COCKPIT_WORKER_LEASE_SECONDS=str(LEASE_SECONDS),
        COCKPIT_ALLOW_PRIVATE_EGRESS="true",  # the receiver is on loopback
    )
    pool = WorkerPool(env, tmp_path / "workers", rng)
    receiver = Receiver().start()

    async def scenario_under_fire() -> tuple[Scenario, Observed]:
        db = make_engine(database_url, pool_size=2)
        sessions = make_sessionmaker(db)
        try:
            scenario = await prepare(sessions, receiver)
            try:
                await unleash(sessions, scenario, pool, rng)
                # Observed before the workers stop: a graceful stop hands back leases, hiding any left.
                return scenario, await observe(sessions, scenario)
            finally:
                pool.stop()
        finally:
            await db.dispose()

    try:
        scenario, seen = asyncio.run(scenario_under_fire())
    finally:
        receiver.stop()
    context = (
        f"seed {seed}; kills {[(k.at, k.leased_runs) for k in pool.kills]}; "
        f"worker errors {pool.log_excerpt('Traceback') + pool.log_excerpt('level=error')}"
    )
    print(
        f"{len(pool.kills)} workers killed (seconds in, runs they held): {[(k.at, k.leased_runs) for k in pool.kills]}"
    )

    assert len(pool.kills) >= MIN_KILLS, context
    holding = sum(1 for k in pool.kills if k.leased_runs)
    assert holding >= MIN_KILLS_HOLDING_RUNS, f"only {holding} kills hit a worker holding runs; {context}"
    assert not pool.unexpected_exits(), f"workers died on their own: {pool.unexpected_exits()}; {context}"

    # Every run ended, succeeded, and nothing holds it any more.
    assert len(seen.runs) == scenario.subject_count, context
    assert {r.state for r in seen.runs} == {"succeeded"}, (
        [(r.id, r.state, r.error_category, r.last_error) for r in seen.runs if r.state != "succeeded"],
        context,
    )
    assert [r.id for r in seen.runs if r.lease_owner or r.lease_expires_at] == [], context
    assert seen.undispatched == 0, context

    # One run per subject: manual runs for the members, one event run per membership added.
    by_subject = Counter(r.subject_id for r in seen.runs)
    assert set(by_subject) == set(scenario.directory.subject_ids) | set(scenario.newcomer_ids), context
    assert set(by_subject.values()) == {1}, context
    assert sorted(r.id for r in seen.runs if r.trigger_type == "manual") == sorted(scenario.run_ids), context
    event_runs = [r for r in seen.runs if r.trigger_type == "event"]
    assert {r.subject_id for r in event_runs} == set(scenario.newcomer_ids), context
    assert len({r.trigger_key for r in event_runs}) == len(event_runs), context

    # Per run and step exactly one succeeded attempt (and no attempt left started).
    for run in seen.runs:
        attempts = seen.attempts[run.id]
        succeeded = {step: attempts[(step, "succeeded")] for step in STEP_IDS}
        assert succeeded == dict.fromkeys(STEP_IDS, 1), (run.id, dict(attempts), context)
        assert not [key for key in attempts if key[1] == "started"], (run.id, dict(attempts), context)

    # Every effect exactly once, made by the run itself.
    run_of = {r.subject_id: r.id for r in seen.runs}
    role_ids = [scenario.directory.role_ids[name] for name in GRANTED]
    assert sorted((g.role_id, g.user_id, g.source_run_id) for g in seen.granted) == sorted(
        (role_id, subject, run_id) for subject, run_id in run_of.items() for role_id in role_ids
    ), context
    assert seen.legacy_left == 0, context
    groups_of = {
        **dict.fromkeys(scenario.directory.subject_ids, scenario.directory.group_ids),
        **dict.fromkeys(scenario.newcomer_ids, scenario.newcomers_group_ids),
    }
    assert sorted((g.group_id, g.user_id, g.source_run_id) for g in seen.group_rows) == sorted(
        (group_id, subject, run_id) for subject, run_id in run_of.items() for group_id in groups_of[subject]
    ), context

    # The endpoint: every run called it, under its own key and its own attempts' ids, each request
    # signed; an attempt failed only when a kill cut the call off from its record.
    calls: dict[str, list[Any]] = {}
    for request in scenario.receiver.requests():
        assert request.verified_by == [0], ("unverified signature", request.headers, context)
        calls.setdefault(request.header("Idempotency-Key") or "", []).append(request)
    for run in seen.runs:
        attempts = seen.sync_attempts.get(run.id, [])
        assert {a.error_category for a in attempts if a.state == "failed"} <= {"interrupted"}, (attempts, context)
        heard = calls.get(f"{run.id}.sync", [])
        ids = {a.id for a in attempts}
        assert heard and {r.header("Webhook-Id") for r in heard} <= ids, (run.id, heard, attempts, context)
        assert next(a.id for a in attempts if a.state == "succeeded") in {r.header("Webhook-Id") for r in heard}
    assert set(calls) == {f"{run.id}.sync" for run in seen.runs}, context

    # The audit trail of each run, counted by correlation id: nothing twice, nothing failed but the
    # calls a kill interrupted.
    def expected(run_id: str) -> Counter[str]:
        interrupted = sum(1 for a in seen.sync_attempts.get(run_id, []) if a.state == "failed")
        return AUDIT_PER_RUN + Counter({"workflow.step.failed": interrupted})

    wrong = {run.id: dict(seen.audit[run.id]) for run in seen.runs if seen.audit[run.id] != expected(run.id)}
    assert wrong == {}, context
    interrupted_calls = sum(1 for attempts in seen.sync_attempts.values() for a in attempts if a.state == "failed")
    print(f"{interrupted_calls} endpoint calls interrupted by a kill and made again")


# --- A worker that lost its lease commits nothing -----------------------------------------------------


async def counts(realm: RealmHandle, run_id: str) -> dict[str, int]:
    async with realm.sessions() as session:
        row = (
            await session.execute(
                text(
                    "SELECT (SELECT count(*) FROM step_attempts WHERE run_id = :r) AS attempts, "
                    "(SELECT count(*) FROM role_assignments WHERE source_run_id = :r) AS assignments, "
                    "(SELECT count(*) FROM group_members WHERE source_run_id = :r) AS memberships, "
                    "(SELECT count(*) FROM audit_events WHERE correlation_id = :r) AS audit, "
                    "(SELECT step_index FROM workflow_runs WHERE id = :r) AS step_index"
                ),
                {"r": run_id},
            )
        ).one()
    return dict(row._mapping)


async def lease_of(realm: RealmHandle, run_id: str) -> tuple[str | None, str]:
    async with realm.sessions() as session:
        row = (
            await session.execute(text("SELECT lease_owner, state FROM workflow_runs WHERE id = :r"), {"r": run_id})
        ).one()
    return row.lease_owner, row.state


async def claim(runner: Runner) -> list[str]:
    async with runner.sessions() as session, session.begin():
        claimed = await leases.claim_due_runs(
            session,
            runner.worker_id,
            now=runner.clock.now(),
            lease=runner.settings.lease,
            batch_size=runner.settings.batch_size,
            tenant_share=runner.settings.tenant_share,
        )
    return [c.run_id for c in claimed]


async def test_a_worker_that_lost_its_lease_commits_nothing(realm: RealmHandle) -> None:
    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    role = await realm.role("viewer", ["realm.workflows.read"])
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org.id, name="Builders")
    directory = Directory(realm.id, realm.admin.id, org.id, [group.id], {"granted": role.id}, [subject.id])
    flow = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "join", "type": "add_to_group", "group_id": group.id},
            {"id": "done", "type": "end"},
        ],
    }
    workflow_id = await publish(realm.sessions, directory.actor, "Lease", flow)
    (run_id,) = await start_manual_runs(realm.sessions, directory.actor, workflow_id, [subject.id])

    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    settings = RunnerSettings(lease=timedelta(seconds=LEASE_SECONDS))
    a = Runner(realm.sessions, "worker-chaos-101-aaaaaaaa", settings=settings, clock=clock)
    b = Runner(realm.sessions, "worker-chaos-202-bbbbbbbb", settings=settings, clock=clock)

    # A claims the run and makes progress (it starts, and the grant commits) under its lease.
    assert await claim(a) == [run_id]
    assert await claim(b) == []  # a live lease is never taken over
    assert await advance_once(a, run_id) is True
    assert await lease_of(realm, run_id) == (a.worker_id, "running")
    after_a = await counts(realm, run_id)
    assert after_a["attempts"] == 1 and after_a["assignments"] == 1 and after_a["step_index"] == 1

    # A stalls past its lease. Even with nobody else holding the run, A may not commit.
    clock.advance(seconds=LEASE_SECONDS + 1)
    before = await counts(realm, run_id)
    with pytest.raises(LeaseLost):
        await advance_once(a, run_id)
    assert await counts(realm, run_id) == before

    # B claims the run and applies the next step.
    assert await claim(b) == [run_id]
    assert await advance_once(b, run_id) is True
    after_b = await counts(realm, run_id)
    assert after_b["attempts"] == 2 and after_b["assignments"] == 1 and after_b["step_index"] == 2
    assert after_b["memberships"] == 1

    # A wakes up and tries its transition: nothing commits, and B keeps the run.
    with pytest.raises(LeaseLost):
        await advance_once(a, run_id)
    assert await advance(a, run_id) == 0  # gives up without handing back B's lease
    assert await counts(realm, run_id) == after_b
    assert await lease_of(realm, run_id) == (b.worker_id, "running")

    # B finishes; every effect exactly once.
    assert await advance(b, run_id) == 1
    final = await counts(realm, run_id)
    assert final["attempts"] == 3 and final["assignments"] == 1 and final["memberships"] == 1
    assert await lease_of(realm, run_id) == (None, "succeeded")
    async with realm.sessions() as session:
        types = Counter(
            (
                await session.execute(text("SELECT type FROM audit_events WHERE correlation_id = :r"), {"r": run_id})
            ).scalars()
        )
    assert types == Counter(
        {
            "workflow.run.started": 1,
            "role.assigned": 1,
            "group.member_added": 1,
            "workflow.step.succeeded": 3,
            "workflow.run.succeeded": 1,
        }
    )
