"""Engine correctness on a real database: paused runs that come back, the database's own
invariants on finished runs, provenance that only the engine makes, and fair claims."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.clock import SYSTEM_CLOCK, FixedClock
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs import triggers
from engine.runs.runstore import leases
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision
from testing.directory import outage, refuse_role_changes
from testing.factories import RealmHandle
from testing.runs import advance, drain, load, make_runner, rows, start
from testing.workflows import publish

Client = AsyncTestClient[Litestar]


def definition(*steps: dict[str, Any], retry: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": list(steps)}
    if retry:
        out["retry"] = retry
    return out


async def refuse(realm: RealmHandle, role_id: str, op: str) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text("INSERT INTO refused_roles VALUES (:r, :op)"), {"r": role_id, "op": op})


async def claimable(realm: RealmHandle, at: datetime) -> set[str]:
    """Every run a claim at ``at`` would take (the claim is rolled back)."""
    async with realm.sessions() as session, session.begin():
        taken = await leases.claim_due_runs(
            session, "worker-probe-1-pppp", now=at, lease=timedelta(seconds=1), batch_size=50, tenant_share=50
        )
        await session.rollback()
    return {c.run_id for c in taken}


class TestPausedRunsComeBackUnfinishedOnly:
    async def test_disable_cancel_enable_then_a_new_run_succeeds_and_no_finished_run_is_claimed(
        self, client: Client, realm: RealmHandle
    ) -> None:
        """The path the 409 for deleting a workflow suggests: disable, cancel what is in flight, enable."""
        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        subjects = [await realm.user(f"s{i}@example.com") for i in range(13)]
        api = realm.api
        started = []
        for subject in subjects[:12]:  # more than a realm's share of one pass
            response = await client.post(
                f"{api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
            )
            assert response.status_code == 202, response.text
            started.append(response.json()["id"])
        assert (await client.post(f"{api}/workflows/{wid}/disable", headers=realm.headers)).status_code == 200
        for run_id in started:
            response = await client.post(f"{api}/workflow-runs/{run_id}/cancel", headers=realm.headers)
            assert response.status_code == 202, response.text
        worker = make_runner(realm)
        await drain(worker)
        for run_id in started:
            run, _ = await load(realm, run_id)
            assert run.state == "cancelled", (run.state, run.error_category)
        assert (await client.post(f"{api}/workflows/{wid}/enable", headers=realm.headers)).status_code == 200
        response = await client.post(
            f"{api}/workflows/{wid}/runs", json={"subject_id": subjects[12].id}, headers=realm.headers
        )
        assert response.status_code == 202, response.text
        fresh = response.json()["id"]
        await drain(worker)
        run, _ = await load(realm, fresh)
        assert run.state == "succeeded", (run.state, run.error_category)
        for run_id in started:
            run, _ = await load(realm, run_id)
            assert run.state == "cancelled"
            assert (run.due_at, run.lease_owner, run.lease_expires_at) == (None, None, None)
            assert "paused_due_at" not in run.context
        # Never again: not now, not in a year.
        later = datetime.now(UTC) + timedelta(days=365)
        assert not (await claimable(realm, later)) & {*started, fresh}

    async def test_enabling_keeps_a_compensation_retry_wait(self, realm: RealmHandle) -> None:
        """A cancelled run whose compensation waits for a retry is not made due at its old paused time."""
        first = await realm.role("first", ["realm.workflows.read"])
        second = await realm.role("second", ["realm.workflows.read"])
        subject = await realm.user("s@example.com")
        await refuse_role_changes(realm)
        wid = await publish(
            realm,
            definition(
                {"id": "one", "type": "assign_role", "role_id": first.id, "scope": "realm"},
                {"id": "two", "type": "assign_role", "role_id": second.id, "scope": "realm"},
                retry={"max_attempts": 3, "backoff": "10s"},
            ),
        )
        run_id = await start(realm, wid, subject.id)
        clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
        # Ahead of the real clock: the cancellation below is due at the real time, before this clock.
        worker = make_runner(realm, clock)
        await refuse(realm, second.id, "INSERT")
        await drain(worker)
        run, attempts = await load(realm, run_id)
        assert [(a.step_id, a.state) for a in attempts] == [("one", "succeeded"), ("two", "failed")]
        assert run.due_at == clock.now() + timedelta(seconds=10)  # the step's retry
        async with realm.sessions() as session, session.begin():
            await run_controls.set_workflow_enabled(session, realm.actor, wid, False)  # paused with its retry time kept
        async with realm.sessions() as session, session.begin():
            await runs.cancel_run(session, realm.actor, run_id, reason=None)
        await refuse(realm, first.id, "DELETE")
        await drain(worker)
        run, attempts = await load(realm, run_id)
        assert run.state == "compensating"
        assert attempts[0].compensation_attempts == 1
        retry_at = clock.now() + timedelta(seconds=30)  # the first compensation retry, no jitter
        assert run.due_at == retry_at
        async with realm.sessions() as session, session.begin():
            await run_controls.set_workflow_enabled(session, realm.actor, wid, True)
        run, _ = await load(realm, run_id)
        assert run.due_at == retry_at
        clock.advance(seconds=11)  # past the old paused time, before the compensation's retry
        await drain(worker)
        run, attempts = await load(realm, run_id)
        assert attempts[0].compensation_attempts == 1


class TestDatabaseInvariants:
    async def test_a_finished_run_with_a_due_time_or_a_lease_is_refused(self, realm: RealmHandle) -> None:
        from sqlalchemy.exc import IntegrityError

        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        run_id = await start(realm, wid, (await realm.user("s@example.com")).id)
        await drain(make_runner(realm))
        run, _ = await load(realm, run_id)
        assert run.state == "succeeded"
        for change in (
            "due_at = now()",
            "lease_owner = 'worker-x-1-aaaa', lease_expires_at = now() + interval '1 minute'",
            "lease_expires_at = now()",
        ):
            async with realm.sessions() as session:
                try:
                    async with session.begin():
                        await session.execute(text(f"UPDATE workflow_runs SET {change} WHERE id = :r"), {"r": run_id})
                except IntegrityError as exc:
                    assert "ck_workflow_runs_finished_not_due" in str(exc)
                else:
                    raise AssertionError(f"a finished run accepted {change}")
        # An unfinished run may be due and leased.
        other = await start(realm, wid, (await realm.user("t@example.com")).id)
        async with realm.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE workflow_runs SET lease_owner = 'w', lease_expires_at = now() WHERE id = :r"), {"r": other}
            )

    async def test_the_claim_selects_only_unfinished_states(self, realm: RealmHandle) -> None:
        """Even a row that escaped the constraint (a finished state set by hand with the check off) is never claimed."""
        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        run_id = await start(realm, wid, (await realm.user("s@example.com")).id)
        async with realm.sessions() as session, session.begin():
            await session.execute(text("ALTER TABLE workflow_runs DROP CONSTRAINT ck_workflow_runs_finished_not_due"))
            await session.execute(text("UPDATE workflow_runs SET state = 'cancelled' WHERE id = :r"), {"r": run_id})
        assert run_id not in await claimable(realm, datetime.now(UTC) + timedelta(minutes=1))


class TestFairClaims:
    async def test_a_realm_with_only_new_runs_is_not_starved_by_older_backlogs(
        self, realm: RealmHandle, other_realm: RealmHandle
    ) -> None:
        from testing.factories import make_realm

        third = await make_realm(realm.sessions)
        end = definition({"id": "done", "type": "end"})
        busy = [(realm, await publish(realm, end)), (other_realm, await publish(other_realm, end))]
        for handle, wid in busy:
            for i in range(3):
                await start(handle, wid, (await handle.user(f"old{i}@example.com")).id)
        fresh = await start(third, await publish(third, end), (await third.user("new@example.com")).id)
        async with realm.sessions() as session, session.begin():
            claimed = await leases.claim_due_runs(
                session,
                "worker-fair-1-aaaa",
                now=datetime.now(UTC) + timedelta(seconds=5),
                lease=timedelta(seconds=30),
                batch_size=4,
                tenant_share=2,
            )
        assert len(claimed) == 4
        assert fresh in {c.run_id for c in claimed}
        assert sorted(c.realm_id for c in claimed).count(realm.id) <= 2

    async def test_realms_are_visited_round_robin(self, realm: RealmHandle, other_realm: RealmHandle) -> None:
        from testing.factories import make_realm

        third = await make_realm(realm.sessions)
        end = definition({"id": "done", "type": "end"})
        handles = [realm, other_realm, third]
        for handle in handles:
            wid = await publish(handle, end)
            for i in range(3):
                await start(handle, wid, (await handle.user(f"u{i}@example.com")).id)
        seen: list[str] = []
        after: str | None = None
        now = datetime.now(UTC) + timedelta(seconds=5)
        for turn in range(3):
            async with realm.sessions() as session, session.begin():
                claimed = await leases.claim_due_runs(
                    session,
                    f"worker-rr-{turn}-aaaa",
                    now=now,
                    lease=timedelta(seconds=30),
                    batch_size=2,
                    tenant_share=2,
                    after_realm=after,
                )
            assert len(claimed) == 2
            assert len({c.realm_id for c in claimed}) == 2  # two realms, one run each
            seen += [c.realm_id for c in claimed]
            after = claimed[-1].realm_id
        # Six claims over three realms: every realm twice, never a realm left out of a round.
        assert sorted(seen) == sorted([h.id for h in handles] * 2)


class TestProvenanceComesFromTheEngine:
    async def test_a_forged_request_id_neither_suppresses_a_workflow_nor_makes_a_parent(
        self, client: Client, realm: RealmHandle, caplog: Any
    ) -> None:
        import logging

        eng = await realm.organization("Eng")
        on_added = {"type": "event", "event_types": ["organization.membership.added"]}
        same = await publish(
            realm,
            {"schema_version": 1, "triggers": [{"type": "manual"}, on_added], "steps": [{"id": "done", "type": "end"}]},
            name="Same",
        )
        other = await publish(
            realm, {"schema_version": 1, "triggers": [on_added], "steps": [{"id": "done", "type": "end"}]}, name="Other"
        )
        victim = await start(realm, same, (await realm.user("v@example.com")).id)
        alice = await realm.user("alice@example.com")
        with caplog.at_level(logging.INFO, logger="cockpit.access"):
            response = await client.post(
                f"{realm.api}/organizations/{eng.id}/members",
                json={"user_id": alice.id},
                headers={**realm.headers, "X-Request-ID": victim},
            )
        assert response.status_code in (200, 201), response.text
        request_id = response.headers["x-request-id"]
        assert request_id.startswith("req_") and request_id != victim
        access = [
            r for r in caplog.records if r.name == "cockpit.access" and getattr(r, "request_id", None) == request_id
        ]
        assert [getattr(r, "client_request_id", None) for r in access] == [victim]  # kept for the logs
        async with realm.sessions() as session, session.begin():
            await triggers.dispatch_outbox(session)
        async with realm.sessions() as session:
            audited = (
                await session.execute(
                    text(
                        "SELECT request_id, correlation_id FROM audit_events WHERE type = 'organization.membership.added'"
                    )
                )
            ).all()
            suppressed = await session.scalar(
                text("SELECT count(*) FROM audit_events WHERE type = 'workflow.trigger.suppressed'")
            )
            started = (
                await session.execute(
                    text(
                        "SELECT workflow_id, depth, parent_run_id, correlation_id FROM workflow_runs "
                        "WHERE subject_id = :s ORDER BY workflow_id"
                    ),
                    {"s": alice.id},
                )
            ).all()
        assert audited == [(request_id, request_id)]
        assert suppressed == 0
        assert sorted(started) == sorted([(same, 0, None, request_id), (other, 0, None, request_id)])


class TestTriggersAndReferences:
    async def test_an_expiry_about_a_service_principal_starts_no_run(self, realm: RealmHandle) -> None:
        from engine.directory.models import RoleAssignment
        from engine.directory.principals import create_service_principal
        from engine.directory.role_assignments import expire_due_assignments
        from engine.platform.ids import new_id

        wid = await publish(
            realm,
            {
                "schema_version": 1,
                "triggers": [{"type": "event", "event_types": ["role.assignment.expired"]}],
                "steps": [{"id": "done", "type": "end"}],
            },
        )
        role = await realm.role("temp", ["realm.audit.read"])
        user = await realm.user("u@example.com")
        async with realm.sessions() as session, session.begin():
            robot = await create_service_principal(session, realm.actor, name="robot", description="", authority=None)
            for subject in ({"service_principal_id": robot.id}, {"user_id": user.id}):
                session.add(
                    RoleAssignment(
                        id=new_id("ras"),
                        realm_id=realm.id,
                        role_id=role.id,
                        expires_at=SYSTEM_CLOCK.now() + timedelta(minutes=1),
                        granted_by=realm.admin.id,
                        **subject,
                    )
                )
        async with realm.sessions() as session, session.begin():
            assert await expire_due_assignments(session, SYSTEM_CLOCK.now() + timedelta(hours=1)) == 2
        async with realm.sessions() as session, session.begin():
            await triggers.dispatch_outbox(session)
        async with realm.sessions() as session:
            subjects = (
                (await session.execute(text("SELECT subject_id FROM workflow_runs WHERE workflow_id = :w"), {"w": wid}))
                .scalars()
                .all()
            )
        assert subjects == [user.id]  # steps act on users only

    async def test_a_deleted_group_fails_group_missing_for_an_organization_scoped_publisher(
        self, realm: RealmHandle
    ) -> None:
        from engine.directory.authz import load_authority
        from engine.directory.groups import create_group

        org = await realm.organization("Eng")
        publisher = await realm.user("publisher@example.com")
        await realm.assign(publisher, await realm.role("wf", ["realm.workflows.publish", "realm.workflows.write"]))
        await realm.assign(
            publisher,
            await realm.role("eng-admin", ["org.groups.write"], boundary="organization"),
            organization_id=org.id,
        )
        subject = await realm.user("s@example.com")
        await realm.member(org, subject)
        async with realm.sessions() as session, session.begin():
            authority = await load_authority(session, realm.id, "user", realm.admin.id)
            group, *_ = await create_group(session, realm.actor, authority, org.id, name="Team")
        actor = realm.actor.__class__(type="user", id=publisher.id, realm_id=realm.id)
        async with realm.sessions() as session, session.begin():
            workflow, _ = await create_workflow(
                session,
                actor,
                name="Team",
                definition=definition({"id": "team", "type": "add_to_group", "group_id": group.id}),
                has_definition=True,
                requires_approval=False,
            )
        async with realm.sessions() as session, session.begin():
            await publish_revision(session, actor, workflow.id, 1)
        run_id = await start(realm, workflow.id, subject.id)
        async with realm.sessions() as session, session.begin():
            await session.execute(text("DELETE FROM groups WHERE id = :g"), {"g": group.id})
        await drain(make_runner(realm))
        run, attempts = await load(realm, run_id)
        assert [(a.step_id, a.state, a.error_category) for a in attempts] == [("team", "failed", "group_missing")]
        assert run.error_category == "group_missing"


class TestWorkerWiring:
    async def test_the_listener_and_the_periodic_pass_never_act_on_each_others_leases(self, realm: RealmHandle) -> None:
        from engine.runs.runner import RunnerSettings
        from engine.worker.runtime import make_runners

        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        run_id = await start(realm, wid, (await realm.user("s@example.com")).id)
        periodic, listener = make_runners(
            realm.sessions, "worker-host-1-abcd", RunnerSettings(lease=timedelta(seconds=30))
        )
        assert periodic.worker_id != listener.worker_id
        clock = FixedClock(datetime.now(UTC) + timedelta(minutes=1))
        periodic.clock = listener.clock = clock
        async with realm.sessions() as session, session.begin():
            taken = await leases.claim_due_runs(
                session, periodic.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=1, tenant_share=1
            )
        assert [c.run_id for c in taken] == [run_id]
        clock.advance(seconds=31)  # the periodic pass is slow: its lease runs out
        async with realm.sessions() as session, session.begin():
            taken = await leases.claim_due_runs(
                session, listener.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=1, tenant_share=1
            )
        assert [c.run_id for c in taken] == [run_id]  # the listener takes it over
        # The periodic pass now reaches the run: it neither advances it nor hands back the listener's lease.
        assert await advance(periodic, run_id) == 0
        run, attempts = await load(realm, run_id)
        assert (run.state, run.lease_owner, attempts) == ("pending", listener.worker_id, [])
        assert await advance(listener, run_id) > 0
        run, _ = await load(realm, run_id)
        assert run.state == "succeeded"

    async def test_a_failing_outbox_dispatch_does_not_skip_the_run_pass(
        self, realm: RealmHandle, caplog: pytest.LogCaptureFixture
    ) -> None:
        from engine.worker.runtime import wake_pass

        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        run_id = await start(realm, wid, (await realm.user("s@example.com")).id)
        pending = "SELECT id FROM outbox_events WHERE realm_id = :r AND dispatched_at IS NULL ORDER BY id"
        waiting = await rows(realm, pending, r=realm.id)
        assert waiting  # the new user's event, at least
        await outage(realm, "outbox_events", "UPDATE")  # the dispatch cannot mark an event dispatched

        clock = FixedClock(datetime.now(UTC) + timedelta(minutes=1))
        with caplog.at_level(logging.WARNING, logger="cockpit.worker"):
            transitions, _ = await wake_pass(make_runner(realm, clock), realm.sessions)
        assert transitions > 0
        assert any("outbox dispatch after a notification failed" in r.getMessage() for r in caplog.records)
        # Rolled back: every event that waited still waits for the periodic dispatch (the run's own are added).
        assert set(waiting) <= set(await rows(realm, pending, r=realm.id))
        run, _ = await load(realm, run_id)
        assert run.state == "succeeded"

    async def test_one_periodic_pass_at_a_time_in_a_process(self, realm: RealmHandle) -> None:
        """Two periodic jobs in one process never run passes under one lease owner at once."""
        import asyncio
        from types import SimpleNamespace

        from engine.runs.runner import Runner
        from engine.worker import queue

        class HeldRunner(Runner):
            def __init__(self) -> None:
                super().__init__(realm.sessions, "worker-host-2-abcd")
                self.entered = 0
                self.inside = asyncio.Event()
                self.release = asyncio.Event()

            async def run_pass(self) -> int:
                self.entered += 1
                self.inside.set()
                await self.release.wait()
                return 0

        held = HeldRunner()
        runtime = queue.WorkerRuntime(worker_id=held.worker_id, sessions=realm.sessions, settings=None, runner=held)
        context = SimpleNamespace(additional_context={"runtime": runtime})
        first = asyncio.create_task(queue.workflows_run(context, 0))  # type: ignore[arg-type]
        await asyncio.wait_for(held.inside.wait(), timeout=30)
        # The next second's job arrives while the first still runs: it leaves the work to it.
        await asyncio.wait_for(queue.workflows_run(context, 1), timeout=30)  # type: ignore[arg-type]
        assert held.entered == 1
        held.release.set()
        await asyncio.wait_for(first, timeout=30)
