"""The workflow catalog through the API: owners, the list's filters, renames, and the audit trail
of a workflow's life (create, change, disable, enable, delete), read whole."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.errors import NotFound
from engine.workflows.catalog import create_workflow, delete_workflow, update_workflow
from testing.factories import RealmHandle

Client = AsyncTestClient[Litestar]


def definition() -> dict[str, Any]:
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


async def workflow_count(realm: RealmHandle) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text("SELECT count(*) FROM workflows WHERE realm_id = :r"), {"r": realm.id}))


async def test_a_workflows_owner_is_an_active_user_of_the_realm(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    foreigner = await other_realm.user("foreigner@example.com")
    suspended = await realm.user("suspended@example.com")
    owner = await realm.user("owner@example.com")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": suspended.id})

    async def create(owner_id: str) -> Any:
        return await client.post(
            realm.api + "/workflows", json={"name": "Owned", "owner_id": owner_id}, headers=realm.headers
        )

    not_found = {"path": "/owner_id", "code": "not_found", "message": "There is no such user in this realm."}
    inactive = {"path": "/owner_id", "code": "inactive", "message": "The owner must be an active user."}
    for owner_id, issue in ((foreigner.id, not_found), ("usr_" + "0" * 26, not_found), (suspended.id, inactive)):
        refused = await create(owner_id)
        assert refused.status_code == 422, (owner_id, refused.text)
        assert refused.json()["errors"] == [issue]
    assert await workflow_count(realm) == 0

    created = await create(owner.id)
    assert created.status_code == 201, created.text
    assert created.json()["owner_id"] == owner.id
    url = f"{realm.api}/workflows/{created.json()['id']}"
    moved = await client.patch(url, json={"owner_id": suspended.id}, headers=realm.headers)
    assert moved.status_code == 422 and moved.json()["errors"] == [inactive]
    too_long = await client.patch(url, json={"description": "d" * 501}, headers=realm.headers)
    assert too_long.status_code == 422
    assert [(e["path"], e["code"]) for e in too_long.json()["errors"]] == [("/description", "too_long")]
    kept = (await client.get(url, headers=realm.headers)).json()
    assert (kept["owner_id"], kept["description"]) == (owner.id, "")


async def test_the_list_filters_by_state_and_searches_names_literally(client: Client, realm: RealmHandle) -> None:
    async def create(name: str) -> str:
        response = await client.post(
            realm.api + "/workflows", json={"name": name, "definition": definition()}, headers=realm.headers
        )
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    await create("Draft one")
    live = await create("Live_100%")
    old = await create("Old\\path")
    published = await client.post(f"{realm.api}/workflows/{live}/revisions/1/publish", json={}, headers=realm.headers)
    assert published.status_code == 200, published.text
    assert (await client.post(f"{realm.api}/workflows/{old}/disable", headers=realm.headers)).status_code == 200

    async def names(**params: str) -> list[str]:
        response = await client.get(realm.api + "/workflows", params=params, headers=realm.headers)
        assert response.status_code == 200, response.text
        return sorted(w["name"] for w in response.json()["items"])

    assert await names() == ["Draft one", "Live_100%", "Old\\path"]
    assert await names(state="draft") == ["Draft one"]
    assert await names(state="active") == ["Live_100%"]
    assert await names(state="disabled") == ["Old\\path"]
    # The search is a plain substring, case-insensitive: %, _ and \ stand for themselves.
    assert await names(q="ONE") == ["Draft one"]
    assert await names(q="_") == ["Live_100%"]
    assert await names(q="%") == ["Live_100%"]
    assert await names(q="\\") == ["Old\\path"]
    assert await names(q="d\\p") == ["Old\\path"]
    assert await names(q="x") == []

    refused = await client.get(realm.api + "/workflows", params={"state": "archived"}, headers=realm.headers)
    assert refused.status_code == 422
    assert [(e["path"], e["code"]) for e in refused.json()["errors"]] == [("query:state", "invalid")]


async def test_a_workflow_takes_its_own_name_in_another_case_but_never_anothers(
    client: Client, realm: RealmHandle
) -> None:
    async def create(name: str) -> str:
        response = await client.post(realm.api + "/workflows", json={"name": name}, headers=realm.headers)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    payroll, _ = await create("Payroll"), await create("Leavers")
    url = f"{realm.api}/workflows/{payroll}"
    renamed = await client.patch(url, json={"name": "PAYROLL"}, headers=realm.headers)
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "PAYROLL"
    taken = await client.patch(url, json={"name": "leavers"}, headers=realm.headers)
    assert taken.status_code == 409
    assert (await client.get(url, headers=realm.headers)).json()["name"] == "PAYROLL"


async def test_a_workflows_life_is_audited_whole(client: Client, realm: RealmHandle) -> None:
    owner = await realm.user("owner@example.com")
    created = await client.post(realm.api + "/workflows", json={"name": "Payroll"}, headers=realm.headers)
    assert created.status_code == 201, created.text
    wid = created.json()["id"]
    url = f"{realm.api}/workflows/{wid}"
    changed = await client.patch(
        url, json={"name": "Payroll run", "description": "Monthly", "owner_id": owner.id}, headers=realm.headers
    )
    assert changed.status_code == 200, changed.text
    shown = (await client.get(url, headers=realm.headers)).json()
    assert (shown["name"], shown["description"], shown["owner_id"]) == ("Payroll run", "Monthly", owner.id)
    # The same values again change nothing and record nothing.
    same = await client.patch(
        url, json={"name": "Payroll run", "description": "Monthly", "owner_id": owner.id}, headers=realm.headers
    )
    assert same.status_code == 200 and same.json()["updated_at"] == changed.json()["updated_at"]
    assert (await client.post(f"{url}/disable", headers=realm.headers)).status_code == 200
    assert (await client.post(f"{url}/enable", headers=realm.headers)).status_code == 200
    assert (await client.delete(url, headers=realm.headers)).status_code == 204

    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, category, subject_type, subject_id, actor_id, details FROM audit_events"
                " WHERE realm_id = :r AND (type LIKE 'workflow.%' OR type = 'security.alert') ORDER BY id"
            ),
            {"r": realm.id},
        )
        events = [tuple(row) for row in rows]
    admin = realm.admin.id
    alert = {"reason": "workflow_disabled", "workflow_id": wid, "name": "Payroll run"}
    assert events == [
        ("workflow.created", "workflow", "workflow", wid, admin, {"name": "Payroll", "requires_approval": False}),
        ("workflow.updated", "workflow", "workflow", wid, admin, {"changed": ["description", "name", "owner_id"]}),
        ("workflow.disabled", "workflow", "workflow", wid, admin, {"state": "disabled"}),
        ("security.alert", "security", "workflow", wid, admin, alert),
        ("workflow.enabled", "workflow", "workflow", wid, admin, {"state": "draft"}),
        ("workflow.deleted", "workflow", "workflow", wid, admin, {"name": "Payroll run"}),
    ]


async def test_a_rename_waits_for_a_deletion_under_way_and_then_finds_nothing(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(session, realm.actor, name="Leavers")
    async with realm.sessions() as one, realm.sessions() as two:
        await one.begin()
        await delete_workflow(one, realm.actor, workflow.id)

        async def rename() -> Any:
            async with two.begin():
                return await update_workflow(two, realm.actor, workflow.id, name="Leavers 2")

        task = asyncio.create_task(rename())
        await asyncio.sleep(0.5)  # the rename is now waiting for the deletion's lock
        await one.commit()
        try:
            answer: Any = await task
        except Exception as exc:  # the refusal is the answer
            answer = exc
    assert isinstance(answer, NotFound), answer
    assert await workflow_count(realm) == 0
