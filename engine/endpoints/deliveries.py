"""Webhook deliveries: every outbox event a subscription selects, signed, at least once, in order.

- Fan-out happens in the outbox dispatcher's transaction (:func:`fan_out`): one
  ``webhook_deliveries`` row per event and per subscription that selects its type (all types
  when ``event_types`` is null) and is ``active`` or ``paused``. An error there rolls back the
  whole dispatch batch, fan-out included, and it is retried.
- Order per subscription: only the oldest pending delivery of a subscription (its *head*) is
  ever sent; the next one waits until it succeeds or fails for good. A head is claimed with a
  short lease (``lease_until``) so one dispatcher sends it while the others skip it.
- Sending happens outside any transaction (:class:`DeliveryDispatcher`), at most
  ``concurrency`` at a time per worker process and one per subscription: a slow or dead
  endpoint holds one slot for at most the delivery timeout, never the engine or the other
  subscriptions.
- Retries: a transient failure (3xx, 5xx, 408, 429, timeout, network error, egress denial)
  waits ``backoff_ms`` doubling per try, capped at 6 hours, with up to 20 % jitter; after
  ``max_attempts`` tries, or at once for a permanent answer (410, other 4xx), the delivery is
  ``failed`` and the subscription's next event goes. A paused subscription holds its deliveries
  (no tries counted); a disabled or deleted one fails them.
- ``Webhook-Id`` is the delivery id (the same for every try of it; a redelivery is a new
  delivery with a new id), the body follows the Standard Webhooks payload convention
  ``{type, timestamp, id, realm_id, correlation_id, data}`` with identifiers only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from engine.directory.audit import TRIGGER_EVENT_TYPES, Actor, record_audit
from engine.directory.models import OutboxEvent, WebhookDelivery, WebhookSubscription
from engine.directory.webhooks import signing_secrets
from engine.endpoints import read_models, transport
from engine.endpoints.calls import signed_request
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.platform.errors import Conflict, NotFound
from engine.platform.ids import new_id
from engine.platform.pagination import Page, keyset_page

log = logging.getLogger("cockpit.deliveries")

NOTIFY_CHANNEL = "cockpit_deliveries"
BACKOFF_CAP_MS = 6 * 3600 * 1000
BACKOFF_JITTER = 0.2
STATES = ("pending", "succeeded", "failed")


@dataclass(frozen=True)
class DeliveryPolicy:
    operator_key: str | None = None
    allow_private_egress: bool = False
    timeout_ms: int = 10_000
    max_attempts: int = 8
    backoff_ms: int = 10_000
    concurrency: int = 8
    ca_bundle: Path | None = None  # COCKPIT_WEBHOOK_CA_BUNDLE


def retry_delay_ms(backoff_ms: int, failed_tries: int) -> int:
    """The wait after ``failed_tries`` failed tries: the backoff doubling per try, capped at 6 hours,
    with up to 20 % jitter taken off (the step retries' formula, engine/runs/retry.py)."""
    base = min(backoff_ms * (2 ** min(max(failed_tries - 1, 0), 40)), BACKOFF_CAP_MS)
    return int(base - base * BACKOFF_JITTER * random.random())


def event_payload(event: OutboxEvent) -> dict[str, Any]:
    """The Standard Webhooks payload of an event: identifiers only."""
    data: dict[str, Any] = {"subject_id": event.subject_id, "organization_id": event.organization_id}
    data |= {k: v for k, v in (event.payload or {}).items() if isinstance(v, str | int | bool) or v is None}
    created = event.created_at or SYSTEM_CLOCK.now()
    return {
        "type": event.type,
        "timestamp": created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "id": event.id,
        "realm_id": event.realm_id,
        "correlation_id": event.correlation_id,
        "data": data,
    }


async def fan_out(session: AsyncSession, events: Sequence[OutboxEvent]) -> int:
    """Queue a delivery of each event to each subscription that selects it (same transaction)."""
    if not events:
        return 0
    realms = {e.realm_id for e in events}
    subscriptions = (
        (
            await session.execute(
                select(WebhookSubscription)
                .where(
                    col(WebhookSubscription.realm_id).in_(realms),
                    col(WebhookSubscription.state).in_(("active", "paused")),
                )
                .order_by(col(WebhookSubscription.id))
            )
        )
        .scalars()
        .all()
    )
    if not subscriptions:
        return 0
    rows: list[WebhookDelivery] = []
    for event in sorted(events, key=lambda e: e.id):
        payload = event_payload(event)
        for subscription in subscriptions:
            if subscription.realm_id != event.realm_id:
                continue
            if subscription.event_types is None:
                if event.type not in TRIGGER_EVENT_TYPES:
                    continue  # run and approval events go only where they are named
            elif event.type not in subscription.event_types:
                continue
            rows.append(
                WebhookDelivery(
                    id=new_id("whd"),
                    realm_id=event.realm_id,
                    subscription_id=subscription.id,
                    event_id=event.id,
                    event_type=event.type,
                    payload=payload,
                )
            )
    if rows:
        session.add_all(rows)
        await session.flush()
        await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})
    return len(rows)


# Fail what a disabled or deleted subscription still had pending, then claim the heads: each
# active subscription's oldest pending delivery, when it is due and nobody holds it. The UPDATE
# re-checks the lease on the locked row, so two dispatchers never send the same head.
FAIL_ORPHANS_SQL = text(
    """
    UPDATE webhook_deliveries d
       SET state = 'failed', finished_at = :now, lease_until = NULL,
           last_error = 'subscription_' || CASE WHEN s.state = 'deleted' THEN 'missing' ELSE s.state END
      FROM webhook_subscriptions s
     WHERE d.subscription_id = s.id AND d.state = 'pending' AND s.state IN ('disabled', 'deleted')
    """
)
CLAIM_SQL = text(
    """
    UPDATE webhook_deliveries d
       SET lease_until = :lease_until, attempts = d.attempts + 1, last_attempt_at = :now
      FROM (
          SELECT h.id, s.destination, s.allow_private_network, s.secret_enc, s.previous_secret_enc,
                 s.previous_secret_expires_at
            FROM webhook_subscriptions s
            CROSS JOIN LATERAL (
                SELECT p.id, p.next_attempt_at, p.lease_until FROM webhook_deliveries p
                 WHERE p.subscription_id = s.id AND p.state = 'pending'
                 ORDER BY p.id LIMIT 1
            ) h
           WHERE s.state = 'active' AND (CAST(:subscription_id AS text) IS NULL OR s.id = :subscription_id)
             AND h.next_attempt_at <= :now AND (h.lease_until IS NULL OR h.lease_until <= :now)
           ORDER BY h.next_attempt_at
           LIMIT :limit
      ) heads
     WHERE d.id = heads.id AND d.state = 'pending' AND (d.lease_until IS NULL OR d.lease_until <= :now)
    RETURNING d.id, d.realm_id, d.subscription_id, d.attempts, d.lease_until, d.payload,
              heads.destination, heads.allow_private_network, heads.secret_enc, heads.previous_secret_enc,
              heads.previous_secret_expires_at
    """
)
FINISH_SQL = text(
    """
    UPDATE webhook_deliveries
       SET state = :state, lease_until = NULL, next_attempt_at = :next_attempt_at, finished_at = :finished_at,
           last_status_code = :status_code, last_error = :error, last_latency_ms = :latency_ms
     WHERE id = :id AND state = 'pending' AND attempts = :attempts AND lease_until = :lease_until
    """
)


@dataclass(frozen=True)
class ClaimedDelivery:
    """A head claimed for one try, with what sending it needs (read by the claim itself)."""

    id: str
    attempts: int
    lease_until: datetime
    payload: dict[str, Any]
    subscription: WebhookSubscription  # destination, flag and encrypted secrets (not attached to a session)


async def fail_orphans(session: AsyncSession, *, now: datetime) -> None:
    """Fail what disabled or deleted subscriptions still have pending."""
    await session.execute(FAIL_ORPHANS_SQL, {"now": now})


async def claim_heads(
    session: AsyncSession, *, now: datetime, limit: int, lease: timedelta, subscription_id: str | None = None
) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due heads (of one subscription only, when given)."""
    rows = await session.execute(
        CLAIM_SQL,
        {"now": now, "lease_until": now + lease, "limit": max(1, limit), "subscription_id": subscription_id},
    )
    return [
        ClaimedDelivery(
            r.id,
            r.attempts,
            r.lease_until,
            r.payload,
            WebhookSubscription(
                id=r.subscription_id,
                realm_id=r.realm_id,
                destination=r.destination,
                allow_private_network=r.allow_private_network,
                secret_enc=r.secret_enc,
                previous_secret_enc=r.previous_secret_enc,
                previous_secret_expires_at=r.previous_secret_expires_at,
            ),
        )
        for r in rows
    ]


class DeliveryDispatcher:
    """Sends due deliveries with bounded concurrency; ``run_once`` for one sweep, ``run`` forever."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], policy: DeliveryPolicy, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.sessions = sessions
        self.policy = policy
        self.clock = clock
        self.wake = asyncio.Event()
        self._swept_at: datetime | None = None
        self._closing = False  # set when ``run`` ends: slots finish their try and claim nothing more

    def _lease(self) -> timedelta:
        # Long enough for the call and its record, so a live dispatcher never loses its head.
        return timedelta(milliseconds=self.policy.timeout_ms + 30_000)

    async def claim(self, limit: int) -> list[ClaimedDelivery]:
        now = self.clock.now()
        async with self.sessions() as session, session.begin():
            # Orphans are swept at most once a second (the claim runs once per delivery when busy).
            if self._swept_at is None or (now - self._swept_at).total_seconds() >= 1:
                await fail_orphans(session, now=now)
                self._swept_at = now
            return await claim_heads(session, now=now, limit=limit, lease=self._lease())

    async def run_once(self, client: httpx.AsyncClient | None = None) -> int:
        """Claim up to ``concurrency`` heads, send them together; the number sent."""
        claimed = await self.claim(self.policy.concurrency)
        if not claimed:
            return 0
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(transport.new_client(self.policy.ca_bundle))
            await asyncio.gather(*(self.deliver(client, c) for c in claimed))
        return len(claimed)

    async def run(self, stop: asyncio.Event, *, poll_s: float = 1.0) -> None:
        """Keep ``concurrency`` deliveries in flight while there are due heads."""
        in_flight: set[asyncio.Task[None]] = set()
        self._closing = False
        async with transport.new_client(self.policy.ca_bundle) as client:
            try:
                while not stop.is_set():
                    free = self.policy.concurrency - len(in_flight)
                    if free > 0:
                        try:
                            for item in await self.claim(free):
                                task = asyncio.create_task(self._keep_delivering(client, item, stop))
                                in_flight.add(task)
                                task.add_done_callback(in_flight.discard)
                        except Exception:
                            log.warning("claiming deliveries failed", exc_info=True)
                    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(self.wake.wait())}
                    waits |= set(in_flight)
                    await asyncio.wait(waits, timeout=poll_s, return_when=asyncio.FIRST_COMPLETED)
                    self.wake.clear()
                    for waiter in waits:
                        if waiter not in in_flight:
                            waiter.cancel()
            finally:
                self._closing = True
                if in_flight:
                    await asyncio.gather(*in_flight, return_exceptions=True)

    async def _keep_delivering(self, client: httpx.AsyncClient, claimed: ClaimedDelivery, stop: asyncio.Event) -> None:
        """One slot: deliver, and claim the next head in the transaction that records the outcome."""
        item: ClaimedDelivery | None = claimed
        while item is not None:
            item = await self.deliver(client, item, claim_next=not (stop.is_set() or self._closing))

    async def deliver(
        self, client: httpx.AsyncClient, claimed: ClaimedDelivery, *, claim_next: bool = False
    ) -> ClaimedDelivery | None:
        """One try of one delivery, its outcome recorded whatever happens; with ``claim_next``, the
        next due head claimed in the same transaction (one transaction per delivery when busy)."""
        try:
            return await self._deliver(client, claimed, claim_next)
        except Exception:
            log.exception("a delivery try failed unexpectedly", extra={"delivery_id": claimed.id})
            return None

    async def _deliver(
        self, client: httpx.AsyncClient, claimed: ClaimedDelivery, claim_next: bool
    ) -> ClaimedDelivery | None:
        now = self.clock.now()
        subscription = claimed.subscription
        try:
            if not self.policy.operator_key:
                raise crypto.SecretUnavailable("no operator key")
            secrets = signing_secrets(subscription, self.policy.operator_key, now)
        except crypto.SecretUnavailable:
            return await self._finish(claimed, "failed", None, "secret_unavailable", 0, now, claim_next)
        body, headers = signed_request(
            claimed.payload, webhook_id=claimed.id, secrets=secrets, moment=now, idempotency_key=None
        )
        result = await transport.post(
            client,
            subscription.destination,
            body,
            headers,
            timeout_s=self.policy.timeout_ms / 1000,
            allow_private_network=subscription.allow_private_network,
            operator_allows_private=self.policy.allow_private_egress,
        )
        if result.succeeded:
            return await self._finish(
                claimed, "succeeded", result.status_code, None, result.latency_ms, now, claim_next
            )
        error = f"{result.category}: {result.message}"
        if result.permanent or claimed.attempts >= self.policy.max_attempts:
            return await self._finish(claimed, "failed", result.status_code, error, result.latency_ms, now, claim_next)
        wait = retry_delay_ms(self.policy.backoff_ms, claimed.attempts)
        retry_at = now + timedelta(milliseconds=wait)
        return await self._finish(
            claimed, "pending", result.status_code, error, result.latency_ms, retry_at, claim_next
        )

    async def _finish(
        self,
        claimed: ClaimedDelivery,
        state: str,
        status_code: int | None,
        error: str | None,
        latency_ms: int,
        next_attempt_at: datetime,
        claim_next: bool = False,
    ) -> ClaimedDelivery | None:
        done = self.clock.now()
        following: list[ClaimedDelivery] = []
        async with self.sessions() as session, session.begin():
            await session.execute(
                FINISH_SQL,
                {
                    "id": claimed.id,
                    "state": state,
                    "attempts": claimed.attempts,
                    "lease_until": claimed.lease_until,
                    "next_attempt_at": next_attempt_at if state == "pending" else done,
                    "finished_at": None if state == "pending" else done,
                    "status_code": status_code,
                    "error": error[:2000] if error else None,
                    "latency_ms": latency_ms,
                },
            )
            if claim_next:
                # The same subscription's next delivery, if due: no other slot competes for it.
                following = await claim_heads(
                    session, now=done, limit=1, lease=self._lease(), subscription_id=claimed.subscription.id
                )
        if not following:
            self.wake.set()  # a slot is free: the dispatcher claims what is due elsewhere
        return following[0] if following else None


# --- Reading and redelivering ---------------------------------------------------------------------


def delivery_view(delivery: WebhookDelivery) -> read_models.WebhookDelivery:
    return read_models.WebhookDelivery(
        id=delivery.id,
        subscription_id=delivery.subscription_id,
        event_id=delivery.event_id,
        event_type=delivery.event_type,
        state=delivery.state,
        attempts=delivery.attempts,
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        last_latency_ms=delivery.last_latency_ms,
        last_attempt_at=delivery.last_attempt_at,
        next_attempt_at=delivery.next_attempt_at if delivery.state == "pending" else None,
        redelivery_of=delivery.redelivery_of,
        created_at=delivery.created_at,
        finished_at=delivery.finished_at,
    )


async def list_deliveries(
    session: AsyncSession,
    realm_id: str,
    subscription_id: str,
    *,
    state: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[WebhookDelivery]:
    """A subscription's deliveries, newest first (404 for another realm's subscription)."""
    from engine.directory.webhooks import get_subscription
    from engine.platform.errors import invalid

    await get_subscription(session, realm_id, subscription_id)
    query = select(WebhookDelivery).where(
        col(WebhookDelivery.realm_id) == realm_id, col(WebhookDelivery.subscription_id) == subscription_id
    )
    if state:
        if state not in STATES:
            raise invalid("query:state", "state is one of " + ", ".join(STATES))
        query = query.where(col(WebhookDelivery.state) == state)
    return await keyset_page(session, query, col(WebhookDelivery.id), cursor=cursor, limit=limit, descending=True)


async def redeliver(session: AsyncSession, actor: Actor, subscription_id: str, delivery_id: str) -> WebhookDelivery:
    """Queue the delivery's event again, as a new delivery at the end of the subscription's queue."""
    from engine.directory.webhooks import get_subscription

    subscription = await get_subscription(session, actor.realm_id, subscription_id)
    original = await session.get(WebhookDelivery, delivery_id)
    if original is None or original.realm_id != actor.realm_id or original.subscription_id != subscription.id:
        raise NotFound("No such delivery.")
    if subscription.state in ("disabled", "deleted"):
        raise Conflict(f"The webhook subscription is {subscription.state}; nothing can be delivered to it.")
    copy = WebhookDelivery(
        id=new_id("whd"),
        realm_id=original.realm_id,
        subscription_id=original.subscription_id,
        event_id=original.event_id,
        event_type=original.event_type,
        payload=original.payload,
        redelivery_of=original.id,
        requested_by=actor.id,
    )
    session.add(copy)
    await session.flush()
    await record_audit(
        session,
        actor,
        "webhook.redelivery_requested",
        category="configuration",
        subject_type="webhook",
        subject_id=subscription.id,
        details={"delivery_id": original.id, "new_delivery_id": copy.id, "event_id": original.event_id},
    )
    await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})
    return copy


async def count_failing_deliveries(session: AsyncSession, realm_id: str | None = None) -> int:
    """Deliveries failing now: failed for good, plus pending ones whose last try failed."""
    query = select(func.count()).select_from(WebhookDelivery)
    failing = or_(
        col(WebhookDelivery.state) == "failed",
        (col(WebhookDelivery.state) == "pending") & (col(WebhookDelivery.last_error).is_not(None)),
    )
    query = query.where(failing)
    if realm_id is not None:
        query = query.where(col(WebhookDelivery.realm_id) == realm_id)
    return int(await session.scalar(query) or 0)
