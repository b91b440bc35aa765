"""Runs through the API and the runner (seed 000: manual runs, cancellation, run-time ceiling,
the internal-step half of TestWorkflowOnboardingApprovalAndCompensation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.clock import FixedClock
from testing.factories import RealmHandle, bearer
from testing.runs import advance_once, drain, load, make_runner
from testing.workflows import publish

Client = AsyncTestClient[Litestar]


def definition(*steps: dict[str, Any], triggers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": triggers or [{"type": "manual"}], "steps": list(steps)}


async def audit(realm: RealmHandle, run_id: str) -> list[tuple[str, str | None]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, actor_id FROM audit_events WHERE subject_id = :r AND type LIKE 'workflow.%' ORDER BY id"
            ),
            {"r": run_id},
        )
        return [(t, a) for t, a in rows]


class TestManualRuns:
    async def test_start_is_202_and_the_run_is_readable(self, client: Client, realm: RealmHandle) -> None:
        subject = await realm.user("s@example.com")
        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        response = await client.post(
            f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
        )
        assert response.status_code == 202, response.text
        run = response.json()
        assert run["id"].startswith("wrn_") and run["state"] == "pending" and run["revision"] == 1
        assert run["trigger"]["type"] == "manual" and run["publisher_id"] == realm.admin.id
        await drain(make_runner(realm))
        shown = (await client.get(f"{realm.api}/workflow-runs/{run['id']}", headers=realm.headers)).json()
        assert shown["state"] == "succeeded"
        assert [(a["step_id"], a["number"], a["state"], a["idempotency_key"]) for a in shown["attempts"]] == [
            ("done", 1, "succeeded", f"{run['id']}.done")
        ]
        assert shown["compensations"] == [] and shown["approvals"] == []
        listed = (
            await client.get(
                f"{realm.api}/workflow-runs", params={"workflow_id": wid, "state": "succeeded"}, headers=realm.headers
            )
        ).json()
        assert [r["id"] for r in listed["items"]] == [run["id"]]
        bad = await client.get(f"{realm.api}/workflow-runs", params={"state": "sleeping"}, headers=realm.headers)
        assert bad.status_code == 422

    async def test_a_run_started_in_an_organization_keeps_it(self, client: Client, realm: RealmHandle) -> None:
        org = await realm.organization("Eng")
        subject = await realm.user()
        await realm.member(org, subject)
        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        response = await client.post(
            f"{realm.api}/workflows/{wid}/runs",
            json={"subject_id": subject.id, "organization_id": org.id},
            headers=realm.headers,
        )
        assert response.status_code == 202, response.text
        assert response.json()["organization_id"] == org.id
        shown = (await client.get(f"{realm.api}/workflow-runs/{response.json()['id']}", headers=realm.headers)).json()
        assert shown["organization_id"] == org.id

    async def test_nobody_starts_a_run_about_themselves_and_service_principals_cannot(
        self, client: Client, realm: RealmHandle
    ) -> None:
        wid = await publish(realm, definition({"id": "done", "type": "end"}))
        own = await client.post(
            f"{realm.api}/workflows/{wid}/runs", json={"subject_id": realm.admin.id}, headers=realm.headers
        )
        assert own.status_code == 403
        sp = (
            await client.post(f"{realm.api}/service-principals", json={"name": "robot"}, headers=realm.headers)
        ).json()
        admin_role = await realm.builtin_role("realm-admin")
        assert (
            await client.post(
                f"{realm.api}/role-assignments",
                json={"service_principal_id": sp["id"], "role_id": admin_role.id},
                headers=realm.headers,
            )
        ).status_code == 201
        token = (
            await client.post(
                f"{realm.api}/service-principals/{sp['id']}/tokens", json={"name": "t"}, headers=realm.headers
            )
        ).json()["token"]
        subject = await realm.user("s@example.com")
        robot = await client.post(
            f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=bearer(token)
        )
        assert robot.status_code == 403

    async def test_the_starter_needs_authority_over_every_step(self, client: Client, realm: RealmHandle) -> None:
        powerful = await realm.role("powerful", ["realm.users.write"])
        wid = await publish(
            realm, definition({"id": "grant", "type": "assign_role", "role_id": powerful.id, "scope": "realm"})
        )
        starter_role = await realm.role("starter", ["realm.workflows.read", "realm.workflows.run"])
        starter = await realm.user("starter@example.com")
        await realm.assign(starter, starter_role)
        subject = await realm.user("s@example.com")
        refused = await client.post(
            f"{realm.api}/workflows/{wid}/runs",
            json={"subject_id": subject.id},
            headers=bearer(await realm.token(starter)),
        )
        assert refused.status_code == 403
        assert refused.json()["errors"][0]["path"] == "/definition/steps/0"

    async def test_draft_or_disabled_workflows_do_not_start(self, client: Client, realm: RealmHandle) -> None:
        subject = await realm.user("s@example.com")
        created = await client.post(
            f"{realm.api}/workflows",
            json={"name": "Draft", "definition": definition({"id": "done", "type": "end"})},
            headers=realm.headers,
        )
        wid = created.json()["id"]
        assert (
            await client.post(
                f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
            )
        ).status_code == 409
        missing = await client.post(
            f"{realm.api}/workflows/{wid}/runs", json={"subject_id": "usr_" + "0" * 26}, headers=realm.headers
        )
        assert missing.status_code == 422 and missing.json()["errors"][0]["path"] == "/subject_id"


class TestCancellation:
    async def test_cancel_compensates_and_leaves_the_exact_audit_trail(
        self, client: Client, realm: RealmHandle
    ) -> None:
        subject = await realm.user("s@example.com")
        role = await realm.role("viewer", ["realm.workflows.read"])
        org = await realm.organization("Eng")
        await realm.member(org, subject)
        wid = await publish(
            realm,
            definition(
                {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
                {
                    "id": "leave",
                    "type": "remove_membership",
                    "organization_id": org.id,
                    "retry": {"max_attempts": 3, "backoff": "1h"},
                },
                {"id": "done", "type": "end"},
            ),
        )
        other_admin = await realm.user("other@example.com")
        await realm.assign(other_admin, await realm.builtin_role("realm-admin"))
        run_id = (
            await client.post(
                f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
            )
        ).json()["id"]
        clock = FixedClock(datetime.now(UTC))
        r = make_runner(realm, clock)
        # Advance only past the grant, one transition at a time: pending -> running -> grant.
        from engine.runs.runstore import leases

        async with realm.sessions() as session, session.begin():
            await leases.claim_due_runs(
                session, r.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=1, tenant_share=1
            )
        assert await advance_once(r, run_id)  # pending -> running, and the grant succeeded
        async with realm.sessions() as session, session.begin():
            await leases.release_lease(session, run_id, r.worker_id)
        cancel_token = await realm.token(other_admin)
        cancelled = await client.post(
            f"{realm.api}/workflow-runs/{run_id}/cancel",
            json={"reason": "requested by HR"},
            headers=bearer(cancel_token),
        )
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json()["cancel_reason"] == "requested by HR"
        again = await client.post(f"{realm.api}/workflow-runs/{run_id}/cancel", json={}, headers=realm.headers)
        assert again.status_code == 409
        clock.advance(seconds=5)  # past the moment the cancellation made the run due
        await drain(r)
        run, attempts = await load(realm, run_id)
        assert run.state == "cancelled" and run.error_category == "cancelled"
        assert run.cancel_requested_by == other_admin.id
        assert attempts[0].compensation_state == "done"
        trail = await audit(realm, run_id)
        types = [t for t, _ in trail]
        start = types.index("workflow.run.cancel_requested")
        assert types[start:] == [
            "workflow.run.cancel_requested",
            "workflow.run.failed",
            "workflow.step.compensated",
            "workflow.run.cancelled",
        ]
        actors = dict(trail[start:][:1])
        assert actors["workflow.run.cancel_requested"] == other_admin.id  # the cancelling administrator
        assert all(actor == realm.admin.id for t, actor in trail[start + 1 :])  # the accountable publisher
        finished = await client.post(f"{realm.api}/workflow-runs/{run_id}/cancel", json={}, headers=realm.headers)
        assert finished.status_code == 409


class TestRunTimeCeiling:
    async def test_publisher_losing_authority_mid_run_fails_permanently_and_compensates(
        self, client: Client, realm: RealmHandle
    ) -> None:
        publisher = await realm.user("publisher@example.com")
        admin_role = await realm.builtin_role("realm-admin")
        assignment = await realm.assign(publisher, admin_role)
        token = bearer(await realm.token(publisher))
        org = await realm.organization("Eng")
        subject = await realm.user("s@example.com")
        await realm.member(org, subject)
        group = (
            await client.post(
                f"{realm.api}/organizations/{org.id}/groups", json={"name": "Team"}, headers=realm.headers
            )
        ).json()
        viewer = await realm.role("viewer", ["realm.workflows.read"])
        body = definition(
            {"id": "team", "type": "add_to_group", "group_id": group["id"]},
            {"id": "grant", "type": "assign_role", "role_id": viewer.id, "scope": "realm"},
            {"id": "done", "type": "end"},
        )
        wid = (
            await client.post(f"{realm.api}/workflows", json={"name": "Onboard", "definition": body}, headers=token)
        ).json()["id"]
        assert (
            await client.post(f"{realm.api}/workflows/{wid}/revisions/1/publish", json={}, headers=token)
        ).status_code == 200
        run_id = (
            await client.post(
                f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
            )
        ).json()["id"]
        clock = FixedClock(datetime.now(UTC))
        r = make_runner(realm, clock)
        from engine.runs.runstore import leases

        async with realm.sessions() as session, session.begin():
            await leases.claim_due_runs(
                session, r.worker_id, now=clock.now(), lease=timedelta(seconds=30), batch_size=1, tenant_share=1
            )
        assert await advance_once(r, run_id)  # running, and team: added to the group
        # The publisher loses realm-admin while the run is in flight.
        async with realm.sessions() as session, session.begin():
            await session.execute(text("DELETE FROM role_assignments WHERE id = :a"), {"a": assignment.id})
        async with realm.sessions() as session, session.begin():
            await leases.release_lease(session, run_id, r.worker_id)
        clock.advance(seconds=5)
        await drain(r)
        run, attempts = await load(realm, run_id)
        assert run.state == "compensated"
        assert run.error_category == "publisher_lacks_authority"
        assert [(a.step_id, a.state, a.error_category) for a in attempts] == [
            ("team", "succeeded", None),
            ("grant", "failed", "publisher_lacks_authority"),
        ]
        lost = "The accountable publisher no longer holds realm.workflows.publish."
        assert (run.last_error, attempts[1].error_message) == (lost, lost)
        assert attempts[1].number == 1  # permanent: never retried
        async with realm.sessions() as session:
            in_group = await session.scalar(
                text("SELECT count(*) FROM group_members WHERE user_id = :u"), {"u": subject.id}
            )
        assert in_group == 0  # the undo ran
        assert attempts[0].compensation_state == "done"


class TestWorkflowOnboardingApprovalAndCompensation:
    """The internal-step half: onboarding grants and joins; a later failure undoes them newest first."""

    async def test_onboarding_succeeds_then_a_failing_variant_compensates_newest_first(
        self, client: Client, realm: RealmHandle
    ) -> None:
        org = await realm.organization("Eng")
        subject = await realm.user("newhire@example.com")
        await realm.member(org, subject)
        group = (
            await client.post(
                f"{realm.api}/organizations/{org.id}/groups", json={"name": "Team"}, headers=realm.headers
            )
        ).json()
        member_role = await realm.role("engineering-member", ["realm.workflows.read"], boundary="organization")
        ok = definition(
            {
                "id": "grant",
                "type": "assign_role",
                "role_id": member_role.id,
                "scope": "organization",
                "expires_in": "720h",
            },
            {"id": "team", "type": "add_to_group", "group_id": group["id"]},
            {"id": "done", "type": "end"},
        )
        wid = await publish(realm, ok, name="Onboarding")
        run_id = (
            await client.post(
                f"{realm.api}/workflows/{wid}/runs",
                json={"subject_id": subject.id, "organization_id": org.id},
                headers=realm.headers,
            )
        ).json()["id"]
        await drain(make_runner(realm))
        run, _ = await load(realm, run_id)
        assert run.state == "succeeded", run.last_error
        async with realm.sessions() as session:
            assignment = (
                await session.execute(
                    text("SELECT organization_id, expires_at, source_run_id FROM role_assignments WHERE user_id = :u"),
                    {"u": subject.id},
                )
            ).one()
        assert assignment.organization_id == org.id and assignment.source_run_id == run_id
        assert assignment.expires_at > datetime.now(UTC) + timedelta(hours=719)

        # A variant whose last step fails permanently: both effects are undone, newest first.
        other = await realm.user("second@example.com")
        await realm.member(org, other)
        elsewhere = await realm.organization("Elsewhere")
        failing = definition(
            {"id": "grant", "type": "assign_role", "role_id": member_role.id, "scope": "organization"},
            {"id": "team", "type": "add_to_group", "group_id": group["id"]},
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id},
        )
        wid2 = await publish(realm, failing, name="Failing onboarding")
        run2 = (
            await client.post(
                f"{realm.api}/workflows/{wid2}/runs",
                json={"subject_id": other.id, "organization_id": org.id},
                headers=realm.headers,
            )
        ).json()["id"]
        await drain(make_runner(realm))
        shown = (await client.get(f"{realm.api}/workflow-runs/{run2}", headers=realm.headers)).json()
        assert shown["state"] == "compensated" and shown["error_category"] == "not_a_member"
        assert [(c["step_id"], c["strategy"], c["state"]) for c in shown["compensations"]] == [
            ("grant", "undo", "done"),
            ("team", "undo", "done"),
        ]
        trail = [t for t, _ in await audit(realm, run2)]
        compensated = [t for t in trail if t == "workflow.step.compensated"]
        assert len(compensated) == 2
        async with realm.sessions() as session:
            order = (
                (
                    await session.execute(
                        text(
                            "SELECT details->>'step_id' FROM audit_events "
                            "WHERE subject_id = :r AND type = 'workflow.step.compensated' ORDER BY id"
                        ),
                        {"r": run2},
                    )
                )
                .scalars()
                .all()
            )
            left = await session.scalar(
                text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": other.id}
            )
            in_group = await session.scalar(
                text("SELECT count(*) FROM group_members WHERE user_id = :u"), {"u": other.id}
            )
        assert order == ["team", "grant"]  # newest first
        assert left == 0 and in_group == 0
