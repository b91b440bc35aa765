"""Deliveries' numbers, read from their rows, the API and a real receiver on 127.0.0.1: the wait
after a failed try (doubling, with its 6-hour cap), the lease of a claimed head, how many heads a
sweep sends and how many are in flight, when orphans are swept, the secrets of a rotation's overlap,
the log's pages and filters, and the exact bytes of a body that is not ASCII.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import update
from sqlmodel import col

from engine.directory import webhooks
from engine.directory.audit import emit_event
from engine.directory.models import WebhookDelivery
from engine.endpoints.deliveries import BACKOFF_CAP_MS, BACKOFF_JITTER, DeliveryDispatcher, count_failing_deliveries
from engine.platform.clock import FixedClock
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.receiver import Receiver
from testing.webhooks import deliveries_of, dispatch, policy, settle, subscribe

HOUR_MS = 3600 * 1000


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver().start()
    try:
        yield made
    finally:
        made.stop()


async def outcome_event(realm: RealmHandle, payload: dict[str, str] | None = None) -> None:
    """One event only subscriptions that name it get (a run outcome never starts a run)."""
    async with realm.sessions() as session, session.begin():
        await emit_event(session, realm.actor, "workflow.run.succeeded", subject_id=realm.admin.id, payload=payload)
    await dispatch(realm)


async def due_now(realm: RealmHandle, delivery_id: str) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(
            update(WebhookDelivery)
            .where(col(WebhookDelivery.id) == delivery_id)
            .values(next_attempt_at=col(WebhookDelivery.created_at))
        )


async def test_a_value_outside_ascii_goes_out_as_utf8_bytes_and_is_signed_as_sent(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """The body is UTF-8 JSON, not ASCII escapes: ``ë`` arrives as its two bytes, and the signature
    the receiver verifies is over those very bytes."""
    hook = await subscribe(realm, receiver, ["workflow.run.succeeded"])
    await outcome_event(realm, {"note": "Zoë 東京"})
    await settle(realm, DeliveryDispatcher(realm.sessions, policy()), [hook])
    [got] = receiver.requests()
    assert got.verified_by == [0]
    assert '"note":"Zoë 東京"'.encode() in got.body, got.body
    assert b"\\u" not in got.body
    assert got.json["data"]["note"] == "Zoë 東京"


async def test_the_wait_after_a_failed_try_doubles_up_to_the_six_hour_cap(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """With a backoff of 4 hours, the first failed try waits 4 hours less at most a fifth (under the
    cap), the second 6 hours less at most a fifth (8 hours, capped), and so does the third."""
    receiver.respond = lambda _r: 503
    hook = await subscribe(realm, receiver, ["workflow.run.succeeded"])
    await outcome_event(realm)
    backoff = 4 * HOUR_MS
    dispatcher = DeliveryDispatcher(realm.sessions, policy(backoff_ms=backoff, max_attempts=10))
    for tries, base in ((1, backoff), (2, BACKOFF_CAP_MS), (3, BACKOFF_CAP_MS)):
        assert await dispatcher.run_once() == 1
        [row] = await deliveries_of(realm, hook)
        assert (row.state, row.attempts, row.last_status_code) == ("pending", tries, 503)
        assert row.last_attempt_at is not None
        wait = row.next_attempt_at - row.last_attempt_at
        # the try's own time (a few ms, generously a minute) lies between the claim and the wait
        low = timedelta(milliseconds=base * (1 - BACKOFF_JITTER))
        assert low <= wait <= timedelta(milliseconds=base, minutes=1), (tries, wait)
        assert await dispatcher.run_once() == 0  # not due before its wait is over
        await due_now(realm, row.id)
    assert len(receiver.requests()) == 3


async def test_a_claimed_head_is_leased_for_the_timeout_and_thirty_seconds(
    realm: RealmHandle, receiver: Receiver
) -> None:
    hook = await subscribe(realm, receiver, ["workflow.run.succeeded"])
    await outcome_event(realm)
    dispatcher = DeliveryDispatcher(realm.sessions, policy(timeout_ms=7_000))
    [claimed] = await dispatcher.claim(8)
    [row] = await deliveries_of(realm, hook)
    assert row.id == claimed.id and row.attempts == claimed.attempts == 1
    assert row.last_attempt_at is not None and row.lease_until is not None
    assert row.lease_until - row.last_attempt_at == timedelta(seconds=37)
    assert await dispatcher.claim(8) == []  # held by its lease
    assert receiver.requests() == []


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_one_sweep_sends_at_most_concurrency_heads(
    realm: RealmHandle, receiver: Receiver, concurrency: int
) -> None:
    """Three subscriptions with a due head each: a sweep claims and sends ``concurrency`` of them,
    the next sweep the rest."""
    hooks = [await subscribe(realm, receiver, ["workflow.run.succeeded"]) for _ in range(3)]
    await outcome_event(realm)
    dispatcher = DeliveryDispatcher(realm.sessions, policy(concurrency=concurrency))
    assert await dispatcher.run_once() == concurrency
    assert len(receiver.requests()) == concurrency
    sent = [d for h in hooks for d in await deliveries_of(realm, h) if d.state == "succeeded"]
    assert len(sent) == concurrency
    await settle(realm, dispatcher, hooks)
    assert len(receiver.requests()) == 3


async def test_running_keeps_at_most_concurrency_deliveries_in_flight(realm: RealmHandle, receiver: Receiver) -> None:
    """With one slot, a second subscription's head waits while the first endpoint holds its answer,
    and goes as soon as the slot is free."""
    release = threading.Event()
    receiver.respond = lambda _r: 200 if release.wait(timeout=60) else 500
    hooks = [await subscribe(realm, receiver, ["workflow.run.succeeded"]) for _ in range(2)]
    await outcome_event(realm)
    dispatcher = DeliveryDispatcher(realm.sessions, policy(concurrency=1, timeout_ms=60_000))
    stop = asyncio.Event()
    task = asyncio.create_task(dispatcher.run(stop, poll_s=0.02))
    try:
        await receiver.arrived(1)
        await asyncio.sleep(0.5)  # many sweeps: none may claim the other head while the slot is taken
        assert len(receiver.requests()) == 1
        rows = [d for h in hooks for d in await deliveries_of(realm, h)]
        assert sorted(d.attempts for d in rows) == [0, 1]
        release.set()
        await receiver.arrived(2)
    finally:
        release.set()
        stop.set()
        await asyncio.wait_for(task, timeout=60)
    await settle(realm, dispatcher, hooks)
    assert len(receiver.requests()) == 2


async def test_a_delivery_in_a_rotations_overlap_is_signed_with_both_secrets(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """The claim reads the subscription's previous secret and its end beside the current one: a
    receiver still holding the old secret verifies the delivery, as does one holding the new."""
    hook = await subscribe(realm, receiver, ["workflow.run.succeeded"])
    async with realm.sessions() as session, session.begin():
        _, rotated = await webhooks.rotate_secret(session, realm.actor, TEST_SECRET_KEY, hook)
    receiver.secrets.append(rotated)
    await outcome_event(realm)
    await settle(realm, DeliveryDispatcher(realm.sessions, policy()), [hook])
    [got] = receiver.requests()
    assert got.verified_by == [0, 1]
    assert len((got.header("Webhook-Signature") or "").split(" ")) == 2


async def test_the_delivery_log_pages_newest_first_filters_by_state_and_counts_a_failed_try(
    client: AsyncTestClient[Litestar], realm: RealmHandle, receiver: Receiver
) -> None:
    """Three events, the third refused once: the log in pages of two, newest first; each state's
    filter; a pending delivery whose last try failed counts as failing."""
    receiver.respond = lambda r: 503 if r.json["data"].get("n") == "3" else 200
    hook = await subscribe(realm, receiver, ["workflow.run.succeeded"])
    for n in "123":
        await outcome_event(realm, {"n": n})
    dispatcher = DeliveryDispatcher(realm.sessions, policy(backoff_ms=HOUR_MS))
    for _ in range(3):
        assert await dispatcher.run_once() == 1
    first, second, third = await deliveries_of(realm, hook)
    assert (first.state, second.state, third.state) == ("succeeded", "succeeded", "pending")
    async with realm.sessions() as session:
        assert await count_failing_deliveries(session, realm.id) == 1

    url = f"{realm.api}/webhooks/{hook}/deliveries"
    page = (await client.get(url, params={"limit": 2}, headers=realm.headers)).json()
    assert [d["id"] for d in page["items"]] == [third.id, second.id] and page["next_cursor"]
    rest = (await client.get(url, params={"limit": 2, "cursor": page["next_cursor"]}, headers=realm.headers)).json()
    assert [d["id"] for d in rest["items"]] == [first.id] and rest["next_cursor"] is None
    for state, expected in (("succeeded", [second.id, first.id]), ("pending", [third.id]), ("failed", [])):
        listed = (await client.get(url, params={"state": state}, headers=realm.headers)).json()
        assert [d["id"] for d in listed["items"]] == expected, state
        if state == "succeeded":  # done: no next try
            assert [d["next_attempt_at"] for d in listed["items"]] == [None, None]
    [waiting] = (await client.get(url, params={"state": "pending"}, headers=realm.headers)).json()["items"]
    assert waiting["next_attempt_at"] is not None and waiting["last_error"].startswith("http_503")
    bad = await client.get(url, params={"state": "sideways"}, headers=realm.headers)
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["message"] == "state is one of pending, succeeded, failed"


async def test_orphans_are_swept_at_the_first_claim_a_second_after_the_last_sweep(
    realm: RealmHandle, receiver: Receiver
) -> None:
    """A subscription disabled just after a sweep keeps its pending delivery through the claims of
    the next 999 ms, and the first claim a whole second after the sweep fails it."""
    hook = await subscribe(realm, receiver, ["workflow.run.succeeded"])
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, hook, state="paused")  # held, not claimed
    await outcome_event(realm)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=1))
    dispatcher = DeliveryDispatcher(realm.sessions, policy(), clock=clock)
    assert await dispatcher.claim(8) == []  # the first claim sweeps
    async with realm.sessions() as session, session.begin():
        await webhooks.update_subscription(session, realm.actor, hook, state="disabled")
    for _ in range(3):
        clock.advance(milliseconds=333)
        assert await dispatcher.claim(8) == []
        [row] = await deliveries_of(realm, hook)
        assert (row.state, row.last_error) == ("pending", None)
    clock.advance(milliseconds=1)
    assert await dispatcher.claim(8) == []
    [row] = await deliveries_of(realm, hook)
    assert (row.state, row.last_error) == ("failed", "subscription_disabled")
    assert receiver.requests() == []
