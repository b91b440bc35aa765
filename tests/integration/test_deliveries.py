"""Event deliveries to webhook subscriptions, against real HTTP receivers on 127.0.0.1.

Every request is verified by the receiver with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import select

from engine.directory import principals as directory
from engine.directory import webhooks
from engine.directory.models import AuditEvent, WebhookDelivery
from engine.endpoints.deliveries import DeliveryDispatcher, count_failing_deliveries
from engine.runs import diagnostics
from engine.runs.metrics import database_gauges
from testing.factories import HTML, RealmHandle, browser_session
from testing.receiver import Received, Receiver
from testing.webhooks import deliveries_of, dispatch, policy, settle, subscribe


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made = [Receiver().start() for _ in range(2)]
    try:
        yield made
    finally:
        for r in made:
            r.stop()


async def test_events_are_delivered_signed_in_order_with_retries(realm: RealmHandle, receivers: list[Receiver]) -> None:
    every, suspended_only = receivers
    tries: dict[str, int] = {}

    def flaky(r: Received) -> int:
        event = r.json["id"]
        tries[event] = tries.get(event, 0) + 1
        return 503 if tries[event] == 1 else 200  # each event fails once, then arrives

    every.respond = flaky
    all_hook = await subscribe(realm, every)
    some_hook = await subscribe(realm, suspended_only, ["user.suspended"])
    users = [await realm.user() for _ in range(3)]
    async with realm.sessions() as session, session.begin():
        await directory.set_user_status(session, realm.actor, users[0].id, "suspended", authority=None)
    await dispatch(realm)
    await settle(realm, DeliveryDispatcher(realm.sessions, policy()), [all_hook, some_hook])

    got = every.requests()
    assert all(r.verified_by == [0] for r in got), "a request failed signature verification"
    events = [r.json["id"] for r in got]
    # Each event twice in a row (the failed try and its retry): never overtaken by the next one.
    assert events == [e for e in dict.fromkeys(events) for _ in range(2)]
    assert [r.json["type"] for r in got[::2]] == ["user.created"] * 4 + ["user.suspended"]
    assert [r.header("Webhook-Id") for r in got[:2]] == [got[0].header("Webhook-Id")] * 2
    first = got[0].json
    assert set(first) == {"type", "timestamp", "id", "realm_id", "correlation_id", "data"}
    assert first["realm_id"] == realm.id and first["data"]["user_id"] == realm.admin.id  # the realm's first user
    [only] = suspended_only.requests()
    assert only.json["type"] == "user.suspended" and only.verified_by == [0]
    log = await deliveries_of(realm, all_hook)
    assert [(d.state, d.attempts, d.last_status_code) for d in log] == [("succeeded", 2, 200)] * 5
    assert all(d.last_latency_ms is not None for d in log)


async def test_exhausted_and_permanent_failures_fail_and_the_next_event_goes(
    realm: RealmHandle, receivers: list[Receiver]
) -> None:
    receiver, gone = receivers
    receiver.respond = lambda r: 500 if r.json["data"].get("user_id") == first.id else 200
    gone.respond = lambda _r: 410
    hook = await subscribe(realm, receiver)
    gone_hook = await subscribe(realm, gone)
    async with realm.sessions() as session:
        assert await count_failing_deliveries(session, realm.id) == 0
    first = await realm.user()
    await realm.user()
    await dispatch(realm)
    await settle(realm, DeliveryDispatcher(realm.sessions, policy(max_attempts=3)), [hook, gone_hook])
    log = await deliveries_of(realm, hook)
    assert [(d.state, d.attempts) for d in log] == [("succeeded", 1), ("failed", 3), ("succeeded", 1)]
    assert log[1].last_status_code == 500 and (log[1].last_error or "").startswith("http_500")
    gone_log = await deliveries_of(realm, gone_hook)
    assert [(d.state, d.attempts) for d in gone_log] == [("failed", 1)] * 3  # 410: no retry
    assert len(gone.requests()) == 3
    async with realm.sessions() as session:
        assert await count_failing_deliveries(session, realm.id) == 4
        assert await count_failing_deliveries(session) >= 4
        # The same count feeds the diagnostics and the /metrics gauge.
        assert await diagnostics.failing_deliveries(session, realm.id) == 4
        families = {m.name: m for m in await database_gauges(session)}
        assert families["cockpit_webhook_deliveries_failing"].samples[0].value >= 4


async def test_paused_subscriptions_hold_and_disabled_ones_fail(realm: RealmHandle, receivers: list[Receiver]) -> None:
    held, refused = receivers
    await dispatch(realm)  # the realm's own first events go before anyone subscribes
    held_hook = await subscribe(realm, held)
    refused_hook = await subscribe(realm, refused)
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, held_hook, state="paused")
    await realm.user()
    await dispatch(realm)
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, refused_hook, state="disabled")
    dispatcher = DeliveryDispatcher(realm.sessions, policy())
    await dispatcher.run_once()
    assert held.requests() == [] and refused.requests() == []
    [waiting] = await deliveries_of(realm, held_hook)
    assert (waiting.state, waiting.attempts) == ("pending", 0)
    [dropped] = await deliveries_of(realm, refused_hook)
    assert (dropped.state, dropped.last_error) == ("failed", "subscription_disabled")
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, held_hook, state="active")
    await settle(realm, dispatcher, [held_hook])
    assert len(held.requests()) == 1


async def test_a_slow_endpoint_never_holds_up_another_subscription(
    realm: RealmHandle, receivers: list[Receiver]
) -> None:
    slow, fast = receivers
    await dispatch(realm)  # the realm's own first events go before anyone subscribes
    release = threading.Event()
    slow.respond = lambda _r: 200 if release.wait(timeout=60) else 500
    slow_hook = await subscribe(realm, slow)
    fast_hook = await subscribe(realm, fast)
    await realm.user()
    await realm.user()
    await dispatch(realm)
    dispatcher = DeliveryDispatcher(realm.sessions, policy(timeout_ms=60_000))
    stop = asyncio.Event()
    task = asyncio.create_task(dispatcher.run(stop, poll_s=0.05))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = [d for d in await deliveries_of(realm, fast_hook) if d.state == "succeeded"]
            if len(done) == 2:
                break
            await asyncio.sleep(0.05)
        # Both of the fast subscription's events arrived while the slow endpoint still holds its first.
        assert len(fast.requests()) == 2
        assert len(slow.requests()) == 1
        assert [d.state for d in await deliveries_of(realm, slow_hook)] == ["pending", "pending"]
        release.set()
        await slow.arrived(2)
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(task, timeout=60)


async def test_delivery_log_api_redeliver_and_realm_isolation(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle, receivers: list[Receiver]
) -> None:
    receiver = receivers[0]
    await dispatch(realm)  # the realm's own first events go before anyone subscribes
    hook = await subscribe(realm, receiver)
    await realm.user()
    await dispatch(realm)
    await settle(realm, DeliveryDispatcher(realm.sessions, policy()), [hook])
    listed = await client.get(f"{realm.api}/webhooks/{hook}/deliveries", headers=realm.headers)
    assert listed.status_code == 200, listed.text
    [item] = listed.json()["items"]
    assert item["state"] == "succeeded" and item["attempts"] == 1 and item["last_status_code"] == 200
    assert item["event_type"] == "user.created" and item["last_latency_ms"] is not None

    again = await client.post(f"{realm.api}/webhooks/{hook}/deliveries/{item['id']}/redeliver", headers=realm.headers)
    assert again.status_code == 202, again.text
    assert again.json()["redelivery_of"] == item["id"] and again.json()["state"] == "pending"
    await settle(realm, DeliveryDispatcher(realm.sessions, policy()), [hook])
    first, second = receiver.wait_for(2)
    assert first.json == second.json and first.header("Webhook-Id") != second.header("Webhook-Id")
    async with realm.sessions() as session:
        [audited] = (
            await session.execute(
                select(AuditEvent.category, AuditEvent.subject_type, AuditEvent.subject_id, AuditEvent.details).where(
                    AuditEvent.realm_id == realm.id, AuditEvent.type == "webhook.redelivery_requested"
                )
            )
        ).all()
    assert tuple(audited[:3]) == ("configuration", "webhook", hook) and audited[3]["delivery_id"] == item["id"]

    bad = await client.get(f"{realm.api}/webhooks/{hook}/deliveries?state=sideways", headers=realm.headers)
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "query:state"
    # Another realm's administrator sees no such subscription, nor its deliveries.
    foreign = await client.get(f"{other_realm.api}/webhooks/{hook}/deliveries", headers=other_realm.headers)
    assert foreign.status_code == 404
    foreign = await client.post(
        f"{other_realm.api}/webhooks/{hook}/deliveries/{item['id']}/redeliver", headers=other_realm.headers
    )
    assert foreign.status_code == 404
    # Reading needs realm.webhooks.read.
    nobody = await realm.user()
    token = await realm.token(nobody)
    denied = await client.get(f"{realm.api}/webhooks/{hook}/deliveries", headers={"Authorization": f"Bearer {token}"})
    assert denied.status_code == 403
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, hook, state="disabled")
    refused = await client.post(f"{realm.api}/webhooks/{hook}/deliveries/{item['id']}/redeliver", headers=realm.headers)
    assert refused.status_code == 409


async def test_delivery_log_page_shows_the_log_and_redelivers(
    client: AsyncTestClient[Litestar], realm: RealmHandle, receivers: list[Receiver]
) -> None:
    receiver = receivers[0]
    await dispatch(realm)  # the realm's own first events go before anyone subscribes
    receiver.respond = lambda _r: 502
    hook = await subscribe(realm, receiver)
    await realm.user()
    await dispatch(realm)
    await settle(realm, DeliveryDispatcher(realm.sessions, policy(max_attempts=2)), [hook])
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie)
    base = f"/realms/{realm.slug}/webhooks/{hook}/deliveries"
    page = await client.get(base, headers=HTML)
    assert page.status_code == 200, page.text
    assert "user.created" in page.text and "HTTP 502" in page.text and ">failed<" in page.text
    assert "Redeliver" in page.text and 'hx-trigger="every' not in page.text  # nothing in flight: no polling
    listing = await client.get(f"/realms/{realm.slug}/webhooks", headers=HTML)
    assert f'href="{base}"' in listing.text
    [row] = await deliveries_of(realm, hook)
    posted = await client.post(f"{base}/{row.id}/redeliver", data={"_csrf": login.csrf}, headers=HTML)
    assert posted.status_code == 200 and "queued again" in posted.text
    assert 'hx-trigger="every 3s"' in posted.text  # a pending delivery: the log refreshes itself
    refused = await client.post(f"{base}/{row.id}/redeliver", data={}, headers=HTML)
    assert refused.status_code == 403  # no CSRF token


async def test_a_delivery_egress_denies_says_why_and_fails_once_its_tries_are_spent(
    realm: RealmHandle, receivers: list[Receiver]
) -> None:
    """The operator's ceiling turned off after the subscription was made: every try is refused before
    any byte leaves, the delivery says why, and it fails like any other after ``max_attempts``
    tries — the last allowed try keeps it pending, the next ends it — so the next event goes."""
    receiver = receivers[0]
    hook = await subscribe(realm, receiver, ["user.created"])
    await realm.user()
    await realm.user()
    await dispatch(realm)
    dispatcher = DeliveryDispatcher(realm.sessions, policy(allow_private_egress=False, max_attempts=3))

    async def head() -> WebhookDelivery:
        return (await deliveries_of(realm, hook))[0]

    for tries in (1, 2):
        await dispatcher.run_once()
        first = await head()
        assert (first.state, first.attempts) == ("pending", tries)
        assert first.last_error is not None and first.last_error.startswith("egress_denied"), first.last_error
        async with realm.sessions() as session, session.begin():  # due again at once
            await session.execute(
                WebhookDelivery.__table__.update()  # type: ignore[attr-defined]
                .where(WebhookDelivery.__table__.c.id == first.id)  # type: ignore[attr-defined]
                .values(next_attempt_at=first.created_at)
            )
    await dispatcher.run_once()
    first = await head()
    assert (first.state, first.attempts) == ("failed", 3) and first.finished_at is not None
    assert first.last_error is not None and first.last_error.startswith("egress_denied")
    assert receiver.requests() == []  # nothing left the machine
    # The subscription's next event is the head now, and is tried in its turn.
    second = (await deliveries_of(realm, hook))[1]
    assert second.state == "pending"
    await dispatcher.run_once()
    second = (await deliveries_of(realm, hook))[1]
    assert second.attempts == 1 and second.last_error is not None and second.last_error.startswith("egress_denied")
