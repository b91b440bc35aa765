from __future__ import annotations

import dataclasses
from datetime import timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.app import create_app
from engine.directory import webhooks
from engine.directory.models import WebhookSubscription
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import Settings
from testing.factories import RealmHandle
from testing.workflows import manual, publish

KEY = "test-secret-key-0123456789abcdef0123456789"  # the settings fixture's operator key


async def _row(realm: RealmHandle, webhook_id: str) -> WebhookSubscription:
    async with realm.sessions() as session:
        row = await session.get(WebhookSubscription, webhook_id)
        assert row is not None
        return row


async def test_secret_is_shown_once_and_stored_encrypted(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    response = await client.post(
        realm.api + "/webhooks",
        json={"destination": "https://hooks.example.com/in?x=1", "event_types": ["user.created"]},
        headers=realm.headers,
    )
    assert response.status_code == 201, response.text
    created = response.json()
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) > 40
    assert created["id"].startswith("whk_") and created["state"] == "active"
    assert created["event_types"] == ["user.created"] and created["egress_permitted"] is True

    shown = (await client.get(f"{realm.api}/webhooks/{created['id']}", headers=realm.headers)).json()
    listed = (await client.get(realm.api + "/webhooks", headers=realm.headers)).json()
    assert "secret" not in shown and secret not in str(shown)
    assert [w["id"] for w in listed["items"]] == [created["id"]] and secret not in str(listed)

    async with realm.sessions() as session:
        stored = (
            (await session.execute(text("SELECT * FROM webhook_subscriptions WHERE id = :i"), {"i": created["id"]}))
            .mappings()
            .one()
        )
        audit = (
            await session.execute(
                text("SELECT type, actor_id, details::text FROM audit_events WHERE subject_id = :i"),
                {"i": created["id"]},
            )
        ).all()
    assert all(secret not in str(value) for value in stored.values())
    assert crypto.decrypt(KEY, "webhook-secret", stored["secret_enc"]) == secret
    assert [(t, a) for t, a, _ in audit] == [("webhook.created", realm.admin.id)]
    assert secret not in audit[0][2] and "hooks.example.com" in audit[0][2]


async def test_rotation_keeps_the_previous_secret_for_24_hours(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    created = (
        await client.post(
            realm.api + "/webhooks", json={"destination": "https://a.example.com/"}, headers=realm.headers
        )
    ).json()
    rotated = await client.post(f"{realm.api}/webhooks/{created['id']}/rotate-secret", headers=realm.headers)
    assert rotated.status_code == 200, rotated.text
    body = rotated.json()
    assert body["secret"].startswith("whsec_") and body["secret"] != created["secret"]
    assert body["previous_secret_expires_at"] is not None

    row = await _row(realm, created["id"])
    moment = SYSTEM_CLOCK.now()
    assert webhooks.signing_secrets(row, KEY, moment) == [body["secret"], created["secret"]]
    assert webhooks.signing_secrets(row, KEY, moment + timedelta(hours=23, minutes=59)) == [
        body["secret"],
        created["secret"],
    ]
    assert webhooks.signing_secrets(row, KEY, moment + timedelta(hours=24, minutes=1)) == [body["secret"]]

    again = (await client.get(f"{realm.api}/webhooks/{created['id']}", headers=realm.headers)).json()
    assert "secret" not in again and again["previous_secret_expires_at"] is not None
    async with realm.sessions() as session:
        types = (
            (
                await session.execute(
                    text("SELECT type FROM audit_events WHERE subject_id = :i ORDER BY id"), {"i": created["id"]}
                )
            )
            .scalars()
            .all()
        )
    assert types == ["webhook.created", "webhook.secret_rotated"]


async def test_private_destinations_are_refused_without_the_flag(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    for destination in (
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "https://[::ffff:10.0.0.1]/",
        "http://10.1.2.3/",
    ):
        refused = await client.post(realm.api + "/webhooks", json={"destination": destination}, headers=realm.headers)
        assert refused.status_code == 422, destination
        assert refused.json()["errors"] == [
            {"path": "/destination", "code": "egress_denied", "message": refused.json()["errors"][0]["message"]}
        ]
    allowed = await client.post(
        realm.api + "/webhooks",
        json={"destination": "http://10.1.2.3/hook", "allow_private_network": True},
        headers=realm.headers,
    )
    assert allowed.status_code == 201
    # The operator has not allowed private egress (COCKPIT_ALLOW_PRIVATE_EGRESS is off).
    assert allowed.json()["egress_permitted"] is False
    async with realm.sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM webhook_subscriptions WHERE realm_id = :r"), {"r": realm.id}
        )
    assert count == 1


async def test_bad_input_lists_every_error(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    response = await client.post(
        realm.api + "/webhooks",
        json={"destination": "ftp://x.example.com/", "event_types": ["user.created", "user.signed_in", "user.created"]},
        headers=realm.headers,
    )
    assert response.status_code == 422
    errors = {(e["path"], e["code"]) for e in response.json()["errors"]}
    assert errors == {
        ("/destination", "invalid_url"),
        ("/event_types/1", "unknown_event_type"),
        ("/event_types/2", "duplicate"),
    }
    too_long = await client.post(
        realm.api + "/webhooks", json={"destination": "https://x.example.com/" + "a" * 2000}, headers=realm.headers
    )
    assert too_long.status_code == 422 and too_long.json()["errors"][0]["path"] == "/destination"
    unknown = await client.post(
        realm.api + "/webhooks", json={"destination": "https://x.example.com/", "secret": "mine"}, headers=realm.headers
    )
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["path"] == "/secret"


async def test_state_changes_and_soft_delete(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    created = (
        await client.post(
            realm.api + "/webhooks", json={"destination": "https://b.example.com/"}, headers=realm.headers
        )
    ).json()
    url = f"{realm.api}/webhooks/{created['id']}"
    paused = await client.patch(url, json={"state": "paused", "event_types": ["user.suspended"]}, headers=realm.headers)
    assert paused.status_code == 200, paused.text
    assert paused.json()["state"] == "paused" and paused.json()["event_types"] == ["user.suspended"]
    every = await client.patch(url, json={"event_types": None}, headers=realm.headers)
    assert every.json()["event_types"] is None and every.json()["state"] == "paused"
    bad = await client.patch(url, json={"state": "deleted", "destination": "nope"}, headers=realm.headers)
    assert bad.status_code == 422
    assert {e["path"] for e in bad.json()["errors"]} == {"/state", "/destination"}

    assert (await client.delete(url, headers=realm.headers)).status_code == 204
    assert (await client.delete(url, headers=realm.headers)).status_code == 204
    shown = await client.get(url, headers=realm.headers)
    assert shown.status_code == 200 and shown.json()["state"] == "deleted"
    assert (await client.get(realm.api + "/webhooks", headers=realm.headers)).json()["items"] == []
    deleted = (await client.get(realm.api + "/webhooks", params={"state": "deleted"}, headers=realm.headers)).json()
    assert [w["id"] for w in deleted["items"]] == [created["id"]]
    assert (await client.patch(url, json={"state": "active"}, headers=realm.headers)).status_code == 409
    assert (await client.post(url + "/rotate-secret", headers=realm.headers)).status_code == 409
    async with realm.sessions() as session:
        types = (
            (
                await session.execute(
                    text("SELECT type FROM audit_events WHERE subject_id = :i ORDER BY id"), {"i": created["id"]}
                )
            )
            .scalars()
            .all()
        )
    assert types == ["webhook.created", "webhook.updated", "webhook.updated", "webhook.deleted"]


async def test_deleting_a_subscription_a_published_workflow_calls_is_409_unless_forced(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    created = (
        await client.post(
            realm.api + "/webhooks", json={"destination": "https://c.example.com/"}, headers=realm.headers
        )
    ).json()
    await publish(
        realm,
        manual({"id": "sync", "type": "call_webhook", "subscription_id": created["id"]}, {"id": "done", "type": "end"}),
        "Badge sync",
    )
    url = f"{realm.api}/webhooks/{created['id']}"
    refused = await client.delete(url, headers=realm.headers)
    assert refused.status_code == 409 and refused.json()["code"] == "referenced_by_workflows"
    assert refused.json()["detail"].startswith("The subscription is used by the published revision of 1 workflow(s)")
    assert [w["name"] for w in refused.json()["referenced_by"]] == ["Badge sync"]
    assert (await client.get(url, headers=realm.headers)).json()["state"] == "active"
    forced = await client.delete(url, params={"force": "true"}, headers=realm.headers)
    assert forced.status_code == 204, forced.text
    assert (await client.get(url, headers=realm.headers)).json()["state"] == "deleted"


async def test_turning_the_flag_off_for_a_private_destination_is_refused(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    created = (
        await client.post(
            realm.api + "/webhooks",
            json={"destination": "http://192.168.1.5/", "allow_private_network": True},
            headers=realm.headers,
        )
    ).json()
    response = await client.patch(
        f"{realm.api}/webhooks/{created['id']}", json={"allow_private_network": False}, headers=realm.headers
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "/allow_private_network"


async def test_realms_do_not_see_each_others_webhooks(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle
) -> None:
    created = (
        await client.post(
            realm.api + "/webhooks", json={"destination": "https://c.example.com/"}, headers=realm.headers
        )
    ).json()
    assert (
        await client.get(f"{other_realm.api}/webhooks/{created['id']}", headers=other_realm.headers)
    ).status_code == 404
    assert (
        await client.post(f"{other_realm.api}/webhooks/{created['id']}/rotate-secret", headers=other_realm.headers)
    ).status_code == 404
    assert (await client.get(other_realm.api + "/webhooks", headers=other_realm.headers)).json()["items"] == []


async def test_an_operator_allowing_private_egress_shows_it_permitted_after_each_change(
    realm: RealmHandle, settings: Settings, database_url: str
) -> None:
    app = create_app(dataclasses.replace(settings, allow_private_egress=True), database_url=database_url)
    async with AsyncTestClient(app=app) as client:
        created = await client.post(
            realm.api + "/webhooks",
            json={"destination": "http://10.1.2.3/hook", "allow_private_network": True},
            headers=realm.headers,
        )
        assert created.status_code == 201, created.text
        assert created.json()["egress_permitted"] is True
        url = f"{realm.api}/webhooks/{created.json()['id']}"
        paused = await client.patch(url, json={"state": "paused"}, headers=realm.headers)
        assert paused.status_code == 200 and paused.json()["egress_permitted"] is True
        rotated = await client.post(url + "/rotate-secret", headers=realm.headers)
        assert rotated.status_code == 200 and rotated.json()["egress_permitted"] is True
