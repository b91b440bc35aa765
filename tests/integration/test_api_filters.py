"""The list filters an automation leans on: runs by organization and starter, approvals by run, audit
events by correlation id; an approval's reminder and expiry as members of their own."""

from __future__ import annotations

from datetime import timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.audit import Actor
from engine.directory.models import Organization, User
from engine.runs import service as runs
from testing.factories import RealmHandle, bearer
from testing.runs import clock_now, drain, make_runner
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def start_as(realm: RealmHandle, actor: Actor, wid: str, subject: User, org: Organization | None = None) -> str:
    async with realm.sessions() as session, session.begin():
        run = await runs.start_manual_run(
            session, actor, wid, subject_id=subject.id, organization_id=org.id if org else None
        )
        return run.id


async def listed(
    client: Client, realm: RealmHandle, path: str, headers: dict[str, str] | None = None, **params: str
) -> list[str]:
    response = await client.get(realm.api + path, params=params, headers=headers or realm.headers)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def test_runs_are_filtered_by_organization_and_by_starter(client: Client, realm: RealmHandle) -> None:
    acme, globex = await realm.organization("Acme"), await realm.organization("Globex")
    other_admin = await realm.user("second@example.com")
    await realm.assign(other_admin, await realm.builtin_role("realm-admin"))
    second = Actor(type="user", id=other_admin.id, realm_id=realm.id)
    subject = await realm.user("subject@example.com")
    await realm.member(acme, subject)
    await realm.member(globex, subject)
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    in_acme = await start_as(realm, realm.actor, wid, subject, acme)
    in_globex = await start_as(realm, second, wid, subject, globex)
    nowhere = await start_as(realm, second, wid, subject)

    assert await listed(client, realm, "/workflow-runs", organization_id=acme.id) == [in_acme]
    assert await listed(client, realm, "/workflow-runs", organization_id=globex.id) == [in_globex]
    assert await listed(client, realm, "/workflow-runs", starter_id=realm.admin.id) == [in_acme]
    assert await listed(client, realm, "/workflow-runs", starter_id=other_admin.id) == [nowhere, in_globex]
    both = await listed(client, realm, "/workflow-runs", starter_id=other_admin.id, organization_id=globex.id)
    assert both == [in_globex]
    assert await listed(client, realm, "/workflow-runs") == [nowhere, in_globex, in_acme]


async def test_approvals_by_run_with_their_reminder_and_expiry_and_no_retry_time_on_the_run(
    client: Client, realm: RealmHandle
) -> None:
    approver = await realm.user("boss@example.com")
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    token = await realm.token(approver, audience="account")
    first, second = await realm.user("one@example.com"), await realm.user("two@example.com")
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "2h"})
    )
    clock = clock_now()
    run_one = await start_as(realm, realm.actor, wid, first)
    run_two = await start_as(realm, realm.actor, wid, second)
    await drain(make_runner(realm, clock))

    mine = bearer(token)
    everything = await listed(client, realm, "/approvals", headers=mine)
    only_one = await client.get(f"{realm.api}/approvals", params={"run_id": run_one}, headers=mine)
    [approval] = only_one.json()["items"]
    assert len(everything) == 2 and approval["run_id"] == run_one
    [of_two] = await listed(client, realm, "/approvals", headers=mine, run_id=run_two)
    assert sorted([approval["id"], of_two]) == sorted(everything)

    created = clock.now()
    reminder_at, expires_at = approval["reminder_at"], approval["expires_at"]
    assert reminder_at == (created + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert expires_at == (created + timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    assert approval["reminded_at"] is None

    shown = (await client.get(f"{realm.api}/workflow-runs/{run_one}", headers=realm.headers)).json()
    assert shown["state"] == "awaiting_approval"
    assert shown["next_attempt_at"] is None  # the reminder is no retry
    assert shown["due_at"] == reminder_at
    [in_timeline] = shown["approvals"]
    assert in_timeline["reminder_at"] == reminder_at and in_timeline["expires_at"] == expires_at


async def test_audit_events_by_correlation_id(client: Client, realm: RealmHandle) -> None:
    subject = await realm.user("audited@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}))
    run_one = await start_as(realm, realm.actor, wid, subject)
    await start_as(realm, realm.actor, wid, await realm.user("other@example.com"))
    await drain(make_runner(realm, clock_now()))
    response = await client.get(f"{realm.api}/audit-events", params={"correlation_id": run_one}, headers=realm.headers)
    events = response.json()["items"]
    assert events and {e["correlation_id"] for e in events} == {run_one}
    assert "workflow.run.succeeded" in {e["type"] for e in events}
    everything = (await client.get(f"{realm.api}/audit-events", headers=realm.headers)).json()["items"]
    assert len(everything) > len(events)


async def test_an_unknown_approval_status_is_refused_at_its_query_parameter(client: Client, realm: RealmHandle) -> None:
    token = await realm.token(realm.admin, audience="account")
    for known in ("pending", "approved"):
        ok = await client.get(f"{realm.api}/approvals?status={known}", headers=bearer(token))
        assert ok.status_code == 200, ok.text
    refused = await client.get(f"{realm.api}/approvals?status=bogus", headers=bearer(token))
    assert refused.status_code == 422
    assert [(e["path"], e["code"]) for e in refused.json()["errors"]] == [("query:status", "invalid")]


async def test_an_id_filter_of_the_wrong_shape_is_refused_at_its_query_parameter(
    client: Client, realm: RealmHandle
) -> None:
    token = bearer(await realm.token(realm.admin, audience="account"))
    for path, name, headers in (
        ("/workflow-runs", "organization_id", realm.headers),
        ("/workflow-runs", "starter_id", realm.headers),
        ("/approvals", "run_id", token),
    ):
        refused = await client.get(f"{realm.api}{path}", params={name: "nope"}, headers=headers)
        assert refused.status_code == 422, (path, name, refused.text)
        assert [e["path"] for e in refused.json()["errors"]] == [f"query:{name}"], (path, name)
