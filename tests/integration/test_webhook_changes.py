"""Webhook subscriptions through the API: what each change writes to the audit log, what changes
nothing, the list's pages and filters, and a rotation's overlap as the API shows it."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import RealmHandle

Client = AsyncTestClient[Litestar]


async def audit_of(realm: RealmHandle, webhook_id: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, category, subject_type, details FROM audit_events"
                " WHERE realm_id = :r AND subject_id = :i ORDER BY id"
            ),
            {"r": realm.id, "i": webhook_id},
        )
        return [(t, c, s, d) for t, c, s, d in rows]


async def test_each_change_is_audited_with_what_changed(client: Client, realm: RealmHandle) -> None:
    created = await client.post(
        realm.api + "/webhooks",
        json={"destination": "https://one.example.com/in?token=x", "event_types": ["user.created"]},
        headers=realm.headers,
    )
    assert created.status_code == 201, created.text
    hook = created.json()["id"]
    url = f"{realm.api}/webhooks/{hook}"
    changed = await client.patch(
        url,
        json={
            "state": "paused",
            "allow_private_network": True,
            "event_types": ["user.suspended"],
            "destination": "https://two.example.com/in",
        },
        headers=realm.headers,
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["state"], body["allow_private_network"], body["event_types"], body["destination"]) == (
        "paused",
        True,
        ["user.suspended"],
        "https://two.example.com/in",
    )
    assert body["updated_at"] > created.json()["updated_at"]
    # The same values again change nothing and write nothing.
    same = await client.patch(
        url,
        json={"state": "paused", "allow_private_network": True, "event_types": ["user.suspended"]},
        headers=realm.headers,
    )
    assert same.status_code == 200 and same.json()["updated_at"] == body["updated_at"]
    rotated = await client.post(url + "/rotate-secret", headers=realm.headers)
    assert rotated.status_code == 200, rotated.text
    assert (await client.delete(url, headers=realm.headers)).status_code == 204
    assert (await client.delete(url, headers=realm.headers)).status_code == 204  # again: nothing more

    audited = await audit_of(realm, hook)
    assert [(t, c, s) for t, c, s, _ in audited] == [
        ("webhook.created", "configuration", "webhook"),
        ("webhook.updated", "configuration", "webhook"),
        ("webhook.secret_rotated", "configuration", "webhook"),
        ("webhook.deleted", "configuration", "webhook"),
    ]
    details = [d for *_, d in audited]
    assert details[0] == {
        "destination_host": "one.example.com",
        "allow_private_network": False,
        "event_types": ["user.created"],
    }
    assert details[1] == {
        "changed": ["state", "allow_private_network", "event_types", "destination"],
        "state": {"from": "active", "to": "paused"},
        "allow_private_network": True,
        "event_types": ["user.suspended"],
        "destination_host": {"from": "one.example.com", "to": "two.example.com"},
    }
    assert details[2] == {"previous_secret_expires_at": details[2]["previous_secret_expires_at"]}
    assert details[2]["previous_secret_expires_at"].startswith(rotated.json()["previous_secret_expires_at"][:16])
    assert details[3] == {"state": {"from": "paused", "to": "deleted"}}


async def test_the_list_pages_oldest_first_and_filters_by_state(client: Client, realm: RealmHandle) -> None:
    ids = []
    for n in range(3):
        made = await client.post(
            realm.api + "/webhooks", json={"destination": f"https://h{n}.example.com/"}, headers=realm.headers
        )
        ids.append(made.json()["id"])
    await client.patch(f"{realm.api}/webhooks/{ids[1]}", json={"state": "disabled"}, headers=realm.headers)
    first = (await client.get(realm.api + "/webhooks", params={"limit": 2}, headers=realm.headers)).json()
    assert [w["id"] for w in first["items"]] == ids[:2] and first["next_cursor"]
    rest = (
        await client.get(
            realm.api + "/webhooks", params={"limit": 2, "cursor": first["next_cursor"]}, headers=realm.headers
        )
    ).json()
    assert [w["id"] for w in rest["items"]] == ids[2:] and rest["next_cursor"] is None
    disabled = (await client.get(realm.api + "/webhooks", params={"state": "disabled"}, headers=realm.headers)).json()
    assert [w["id"] for w in disabled["items"]] == [ids[1]]
    bad = await client.get(realm.api + "/webhooks", params={"state": "sideways"}, headers=realm.headers)
    assert bad.status_code == 422
    assert bad.json()["errors"][0] == {
        "path": "query:state",
        "code": bad.json()["errors"][0]["code"],
        "message": "state is one of active, paused, disabled, deleted",
    }


async def test_a_rotations_overlap_leaves_the_view_once_it_is_over(client: Client, realm: RealmHandle) -> None:
    made = (
        await client.post(
            realm.api + "/webhooks", json={"destination": "https://r.example.com/"}, headers=realm.headers
        )
    ).json()
    url = f"{realm.api}/webhooks/{made['id']}"
    assert made["previous_secret_expires_at"] is None
    await client.post(url + "/rotate-secret", headers=realm.headers)
    assert (await client.get(url, headers=realm.headers)).json()["previous_secret_expires_at"] is not None
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "UPDATE webhook_subscriptions SET previous_secret_expires_at = now() - interval '1 second' WHERE id = :i"
            ),
            {"i": made["id"]},
        )
    assert (await client.get(url, headers=realm.headers)).json()["previous_secret_expires_at"] is None


async def test_another_realm_can_neither_change_nor_delete_a_subscription(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    made = (
        await client.post(
            realm.api + "/webhooks", json={"destination": "https://o.example.com/"}, headers=realm.headers
        )
    ).json()
    foreign = f"{other_realm.api}/webhooks/{made['id']}"
    assert (await client.delete(foreign, headers=other_realm.headers)).status_code == 404
    assert (await client.patch(foreign, json={"state": "paused"}, headers=other_realm.headers)).status_code == 404
    missing = f"{realm.api}/webhooks/whk_00000000000000000000000000"
    assert (await client.delete(missing, headers=realm.headers)).status_code == 404
    shown = (await client.get(f"{realm.api}/webhooks/{made['id']}", headers=realm.headers)).json()
    assert shown["state"] == "active"
    assert [t for t, *_ in await audit_of(realm, made["id"])] == ["webhook.created"]
