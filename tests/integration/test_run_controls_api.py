"""Re-run, retry now, bulk actions and the new list filters through the API, with the real runner."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.clock import FixedClock
from engine.platform.database import libpq_conninfo
from engine.runs.runstore.scheduling import NOTIFY_CHANNEL
from testing.factories import RealmHandle, bearer
from testing.runs import drain, load, make_runner, start
from testing.workflows import publish

Client = AsyncTestClient[Litestar]


def definition(*steps: dict[str, Any], triggers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": triggers or [{"type": "manual"}], "steps": list(steps)}


END = {"id": "done", "type": "end"}


async def audit_types(realm: RealmHandle, subject_id: str) -> list[str]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT type FROM audit_events WHERE subject_id = :s ORDER BY id"), {"s": subject_id}
        )
        return list(rows.scalars())


async def finished_run(realm: RealmHandle, workflow_id: str, subject_id: str) -> str:
    run_id = await start(realm, workflow_id, subject_id)
    await drain(make_runner(realm))
    return run_id


@pytest.fixture
def flaky_group_step(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``add_to_group`` fails transiently (the directory unreachable) until the list is cleared."""
    from engine.runs.steps.groups import AddToGroup

    failing = [1]
    original = AddToGroup.perform

    async def perform(self: AddToGroup, ctx: Any) -> Any:
        if failing:
            raise ConnectionError("the directory is unreachable")
        return await original(self, ctx)

    monkeypatch.setattr(AddToGroup, "perform", perform)
    return failing


async def group_workflow(realm: RealmHandle, backoff: str = "1h") -> tuple[str, Any]:
    from engine.directory.authz import load_authority
    from engine.directory.groups import create_group

    org = await realm.organization("Eng")
    subject = await realm.user("subject@example.com")
    await realm.member(org, subject)
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org.id, name="Team")
    wid = await publish(
        realm,
        definition(
            {
                "id": "team",
                "type": "add_to_group",
                "group_id": group.id,
                "retry": {"max_attempts": 3, "backoff": backoff},
            },
            END,
        ),
    )
    return wid, subject


class TestRerun:
    async def test_rerun_starts_the_published_revision_and_links_both_ways(
        self, client: Client, realm: RealmHandle
    ) -> None:
        subject = await realm.user("s@example.com")
        wid = await publish(realm, definition(END))
        original = await finished_run(realm, wid, subject.id)
        response = await client.post(f"{realm.api}/workflow-runs/{original}/rerun", headers=realm.headers)
        assert response.status_code == 202, response.text
        again = response.json()
        assert again["id"] != original and again["rerun_of"] == original
        assert again["subject_id"] == subject.id and again["starter_id"] == realm.admin.id and again["revision"] == 1
        assert again["input"] == {"subject_id": subject.id, "organization_id": None, "rerun_of": original}
        shown = (await client.get(f"{realm.api}/workflow-runs/{original}", headers=realm.headers)).json()
        assert shown["reruns"] == [again["id"]]
        assert "workflow.run.rerun_requested" in await audit_types(realm, original)
        async with realm.sessions() as session:
            details = (
                await session.execute(
                    text(
                        "SELECT details FROM audit_events WHERE type = 'workflow.run.rerun_requested' AND subject_id = :s"
                    ),
                    {"s": original},
                )
            ).scalar_one()
        assert details == {"rerun_id": again["id"], "revision": 1}
        await drain(make_runner(realm))
        assert (await load(realm, again["id"]))[0].state == "succeeded"

    async def test_rerun_refuses_runs_in_flight_self_and_foreign_realms(
        self, client: Client, realm: RealmHandle, other_realm: RealmHandle
    ) -> None:
        subject = await realm.user("s@example.com")
        wid = await publish(realm, definition(END))
        in_flight = await start(realm, wid, subject.id)
        busy = await client.post(f"{realm.api}/workflow-runs/{in_flight}/rerun", headers=realm.headers)
        assert busy.status_code == 409 and busy.json()["code"] == "run_in_flight"
        await drain(make_runner(realm))
        foreign = await client.post(f"{other_realm.api}/workflow-runs/{in_flight}/rerun", headers=other_realm.headers)
        assert foreign.status_code == 404
        # A starter without realm.workflows.run is refused by the route; one whose authority does not
        # cover the subject (the subject is an administrator) by the starter rules.
        reader_role = await realm.role("reader", ["realm.workflows.read"])
        reader = await realm.user("reader@example.com")
        await realm.assign(reader, reader_role)
        refused = await client.post(
            f"{realm.api}/workflow-runs/{in_flight}/rerun", headers=bearer(await realm.token(reader))
        )
        assert refused.status_code == 403
        runner_role = await realm.role("operator", ["realm.workflows.read", "realm.workflows.run"])
        operator = await realm.user("op@example.com")
        await realm.assign(operator, runner_role)
        await realm.assign(subject, await realm.builtin_role("realm-admin"))
        outranked = await client.post(
            f"{realm.api}/workflow-runs/{in_flight}/rerun", headers=bearer(await realm.token(operator))
        )
        assert outranked.status_code == 403
        async with realm.sessions() as session:
            count = (
                await session.execute(text("SELECT count(*) FROM workflow_runs WHERE workflow_id = :w"), {"w": wid})
            ).scalar_one()
        assert count == 1  # nothing started by the refusals

    async def test_rerun_refuses_a_run_whose_organization_is_inactive_or_whose_subject_is_gone(
        self, client: Client, realm: RealmHandle
    ) -> None:
        org = await realm.organization("Eng")
        subject = await realm.user("s@example.com")
        await realm.member(org, subject)
        wid = await publish(realm, definition(END))
        original = await start(realm, wid, subject.id, org.id)
        await drain(make_runner(realm))
        rerun = f"{realm.api}/workflow-runs/{original}/rerun"

        async def execute(statement: str, **values: str) -> None:
            async with realm.sessions() as session, session.begin():
                await session.execute(text(statement), values)

        await execute("UPDATE organizations SET state = 'inactive' WHERE id = :o", o=org.id)
        inactive = await client.post(rerun, headers=realm.headers)
        assert inactive.status_code == 409, inactive.text
        assert (inactive.json()["code"], inactive.json()["detail"]) == (
            "organization_inactive",
            "The run's organization is gone or inactive.",
        )
        await execute("UPDATE organizations SET state = 'active' WHERE id = :o", o=org.id)
        assert (await client.post(rerun, headers=realm.headers)).status_code == 202
        await execute("DELETE FROM users WHERE id = :u", u=subject.id)
        gone = await client.post(rerun, headers=realm.headers)
        assert gone.status_code == 409, gone.text
        assert (gone.json()["code"], gone.json()["detail"]) == (
            "subject_missing",
            "The run's subject no longer exists.",
        )


class TestRetryNow:
    async def test_retry_now_makes_the_waiting_retry_due_and_the_run_goes_on(
        self, client: Client, realm: RealmHandle, flaky_group_step: list[int], database_url: str
    ) -> None:
        wid, subject = await group_workflow(realm)
        run_id = await start(realm, wid, subject.id)
        clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
        await drain(make_runner(realm, clock))
        shown = (await client.get(f"{realm.api}/workflow-runs/{run_id}", headers=realm.headers)).json()
        assert shown["state"] == "running" and shown["error_category"] == "error"
        assert shown["next_attempt_at"] is not None  # an hour away
        flaky_group_step.clear()  # the directory is back
        with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as listener:
            listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
            response = await client.post(f"{realm.api}/workflow-runs/{run_id}/retry-now", headers=realm.headers)
            woken = list(listener.notifies(timeout=10, stop_after=1))
        assert response.status_code == 202, response.text
        assert [n.channel for n in woken] == [NOTIFY_CHANNEL]  # the workers are woken, not left to their next pass
        assert response.json()["next_attempt_at"] is None
        assert "workflow.run.retry_requested" in await audit_types(realm, run_id)
        await drain(make_runner(realm))  # the real clock: no waiting an hour
        run, attempts = await load(realm, run_id)
        assert run.state == "succeeded"
        assert [(a.step_id, a.number, a.state) for a in attempts] == [
            ("team", 1, "failed"),
            ("team", 2, "succeeded"),
            ("done", 1, "succeeded"),
        ]
        again = await client.post(f"{realm.api}/workflow-runs/{run_id}/retry-now", headers=realm.headers)
        assert again.status_code == 409 and again.json()["code"] == "nothing_waits"

    async def test_retry_now_is_409_when_nothing_waits_and_404_across_realms(
        self, client: Client, realm: RealmHandle, other_realm: RealmHandle
    ) -> None:
        subject = await realm.user("s@example.com")
        wid = await publish(realm, definition(END))
        pending = await start(realm, wid, subject.id)
        response = await client.post(f"{realm.api}/workflow-runs/{pending}/retry-now", headers=realm.headers)
        assert response.status_code == 409 and response.json()["code"] == "nothing_waits"
        foreign = await client.post(f"{other_realm.api}/workflow-runs/{pending}/retry-now", headers=other_realm.headers)
        assert foreign.status_code == 404


class TestBulk:
    async def test_bulk_cancel_by_ids_answers_one_result_per_run(
        self, client: Client, realm: RealmHandle, other_realm: RealmHandle
    ) -> None:
        wid = await publish(realm, definition(END))
        subjects = [await realm.user() for _ in range(3)]
        done = await finished_run(realm, wid, subjects[2].id)
        waiting = [await start(realm, wid, s.id) for s in subjects[:2]]  # pending: no runner after them
        foreign_subject = await other_realm.user()
        foreign_wid = await publish(other_realm, definition(END))
        foreign = await start(other_realm, foreign_wid, foreign_subject.id)
        response = await client.post(
            f"{realm.api}/workflow-runs/bulk",
            json={"action": "cancel", "ids": [*waiting, done, foreign], "reason": "wrong batch"},
            headers=realm.headers,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        by_id = {r["run_id"]: r for r in body["results"]}
        assert [by_id[w]["status"] for w in waiting] == ["done", "done"]
        assert by_id[done]["status"] == "refused" and by_id[done]["code"] == "conflict"
        assert by_id[foreign]["status"] == "refused" and by_id[foreign]["code"] == "not_found"
        assert (body["done"], body["refused"], body["matched"], body["capped"]) == (2, 2, 4, False)
        for run_id in waiting:
            run, _ = await load(realm, run_id)
            assert run.cancel_requested_at is not None and run.cancel_reason == "wrong batch"
        async with other_realm.sessions() as session:
            untouched = (
                await session.execute(
                    text("SELECT cancel_requested_at FROM workflow_runs WHERE id = :r"), {"r": foreign}
                )
            ).scalar_one()
        assert untouched is None

    async def test_bulk_rerun_by_filter_takes_failed_runs_of_a_workflow(
        self, client: Client, realm: RealmHandle, flaky_group_step: list[int]
    ) -> None:
        wid, subject = await group_workflow(realm, backoff="1s")
        other = await realm.user()
        ok_wid = await publish(realm, definition(END), name="Other")
        failed = await start(realm, wid, subject.id)
        succeeded = await finished_run(realm, ok_wid, other.id)
        clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
        r = make_runner(realm, clock)
        for _ in range(4):
            await drain(r)
            clock.advance(seconds=10)
        assert (await load(realm, failed))[0].state == "failed"
        listed = (
            await client.get(f"{realm.api}/workflow-runs", params={"state_group": "failed_any"}, headers=realm.headers)
        ).json()
        assert [x["id"] for x in listed["items"]] == [failed]
        flaky_group_step.clear()
        response = await client.post(
            f"{realm.api}/workflow-runs/bulk",
            json={"action": "rerun", "filter": {"state_group": "failed_any", "workflow_id": wid}},
            headers=realm.headers,
        )
        assert response.status_code == 200, response.text
        (result,) = response.json()["results"]
        assert result["run_id"] == failed and result["status"] == "done"
        await drain(make_runner(realm))
        assert (await load(realm, result["new_run_id"]))[0].state == "succeeded"
        assert (await load(realm, succeeded))[0].state == "succeeded"
        only_other = await client.post(
            f"{realm.api}/workflow-runs/bulk",
            json={"action": "cancel", "filter": {"workflow_id": ok_wid}},
            headers=realm.headers,
        )
        assert only_other.status_code == 200, only_other.text
        assert only_other.json()["matched"] == 1  # the other workflow's runs only
        assert [(x["run_id"], x["status"]) for x in only_other.json()["results"]] == [(succeeded, "refused")]

    async def test_bulk_input_is_checked_all_at_once_and_changes_nothing(
        self, client: Client, realm: RealmHandle
    ) -> None:
        response = await client.post(
            f"{realm.api}/workflow-runs/bulk",
            json={"action": "explode", "ids": ["wrn_x"] * 1001, "filter": {"state_group": "nope"}, "reason": "x" * 501},
            headers=realm.headers,
        )
        assert response.status_code == 422
        paths = {e["path"] for e in response.json()["errors"]}
        assert {"/action", "/ids", "/filter", "/filter/state_group", "/reason"} <= paths
        missing = await client.post(f"{realm.api}/workflow-runs/bulk", json={"action": "cancel"}, headers=realm.headers)
        assert missing.status_code == 422 and missing.json()["errors"][0]["path"] == "/ids"

    async def test_all_matching_a_filter_is_capped_at_1000(self, client: Client, realm: RealmHandle) -> None:
        wid = await publish(realm, definition(END))
        subject = await realm.user()
        async with realm.sessions() as session, session.begin():
            revision_id = (
                await session.execute(text("SELECT id FROM workflow_revisions WHERE workflow_id = :w"), {"w": wid})
            ).scalar_one()
            # 1,003 finished runs, written as the runner leaves them (test data, not behaviour under test)
            await session.execute(
                text(
                    "INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id,"
                    " trigger_type, trigger_key, input, input_version, publisher_id, depth, state, step_index,"
                    " context, created_at, updated_at, finished_at)"
                    " SELECT 'wrn_' || lpad(g::text, 26, '0'), :realm, :w, 1, :rev, :s, 'manual', 'k' || g,"
                    " '{}', 1, :p, 0, 'succeeded', 1, '{}', now(), now(), now() FROM generate_series(1, 1003) g"
                ),
                {"realm": realm.id, "w": wid, "rev": revision_id, "s": subject.id, "p": realm.admin.id},
            )
        response = await client.post(
            f"{realm.api}/workflow-runs/bulk",
            json={"action": "cancel", "filter": {"workflow_id": wid, "state": "succeeded"}},
            headers=realm.headers,
        )
        body = response.json()
        assert response.status_code == 200
        assert (len(body["results"]), body["matched"], body["capped"]) == (1000, 1003, True)
        assert {r["code"] for r in body["results"]} == {"conflict"}  # finished runs are not cancelled


async def test_a_bulk_filter_takes_only_the_runs_meeting_each_of_its_criteria(
    client: Client, realm: RealmHandle
) -> None:
    org = await realm.organization("Eng")
    first, second = await realm.user(), await realm.user()
    await realm.member(org, second)
    wid = await publish(realm, definition(END))
    other_wid = await publish(realm, definition(END), name="Other")
    done = await finished_run(realm, wid, first.id)
    # Ids carry their millisecond: wait (on the clock, not a fixed time) until the next one has begun.
    middle = datetime.now(UTC) + timedelta(milliseconds=2)
    while datetime.now(UTC) < middle + timedelta(milliseconds=1):
        await asyncio.sleep(0.001)
    in_org = await start(realm, wid, second.id, organization_id=org.id)
    elsewhere = await start(realm, other_wid, first.id)

    async def matched(criteria: dict[str, str]) -> set[str]:
        response = await client.post(
            f"{realm.api}/workflow-runs/bulk", json={"action": "cancel", "filter": criteria}, headers=realm.headers
        )
        assert response.status_code == 200, (criteria, response.text)
        return {r["run_id"] for r in response.json()["results"]}

    # Each criterion alone: dropping it would take all three runs (or refuse an empty filter).
    assert await matched({"state": "succeeded"}) == {done}
    assert await matched({"state_group": "finished"}) == {done}
    assert await matched({"workflow_id": other_wid}) == {elsewhere}
    assert await matched({"subject_id": second.id}) == {in_org}
    assert await matched({"organization_id": org.id}) == {in_org}
    assert await matched({"created_before": middle.isoformat()}) == {done}
    assert await matched({"created_after": middle.isoformat()}) == {in_org, elsewhere}
    assert await matched({"trigger_type": "schedule"}) == set()
    assert await matched({"starter_id": first.id}) == set()
    assert await matched({"starter_id": realm.admin.id}) == {done, in_org, elsewhere}


async def test_list_filters_by_trigger_type_and_time_range(client: Client, realm: RealmHandle) -> None:
    subject = await realm.user()
    wid = await publish(realm, definition(END))
    before = datetime.now(UTC)
    first = await start(realm, wid, subject.id)
    # Ids carry their millisecond: wait (on the clock, not a fixed time) until the next one has begun.
    middle = datetime.now(UTC) + timedelta(milliseconds=2)
    while datetime.now(UTC) < middle + timedelta(milliseconds=1):
        await asyncio.sleep(0.001)
    second = await start(realm, wid, subject.id)

    async def ids(**params: Any) -> list[str]:
        response = await client.get(f"{realm.api}/workflow-runs", params=params, headers=realm.headers)
        assert response.status_code == 200, response.text
        return [r["id"] for r in response.json()["items"]]

    assert await ids(trigger_type="manual") == [second, first]
    assert await ids(trigger_type="schedule") == []
    assert await ids(created_after=before.isoformat()) == [second, first]
    assert await ids(created_before=middle.isoformat()) == [first]
    assert await ids(created_after=middle.isoformat()) == [second]
    bad = await client.get(
        f"{realm.api}/workflow-runs",
        params={
            "trigger_type": "cron",
            "state_group": "sad",
            "created_after": middle.isoformat(),
            "created_before": before.isoformat(),
        },
        headers=realm.headers,
    )
    assert bad.status_code == 422
    assert {e["path"] for e in bad.json()["errors"]} == {
        "query:trigger_type",
        "query:state_group",
        "query:created_before",
    }
