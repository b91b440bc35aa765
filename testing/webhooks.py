"""Webhook subscriptions to a real receiver, their deliveries, and runs that call them."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from engine.directory import webhooks
from engine.directory.models import WebhookDelivery
from engine.endpoints.calls import EndpointSettings
from engine.endpoints.deliveries import DeliveryDispatcher, DeliveryPolicy
from engine.platform.clock import FixedClock
from engine.platform.ids import new_id
from engine.runs.runner import Runner, RunnerSettings
from engine.runs.triggers import dispatch_outbox
from testing.factories import TEST_SECRET_KEY, RealmHandle
from testing.receiver import Receiver
from testing.runs import start
from testing.workflows import publish


def policy(**overrides: object) -> DeliveryPolicy:
    values: dict[str, object] = {
        "operator_key": TEST_SECRET_KEY,
        "allow_private_egress": True,
        "timeout_ms": 10_000,
        "max_attempts": 4,
        "backoff_ms": 1,
        "concurrency": 4,
    }
    values |= overrides
    return DeliveryPolicy(**values)  # type: ignore[arg-type]


async def subscribe(realm: RealmHandle, receiver: Receiver, event_types: list[str] | None = None) -> str:
    async with realm.sessions() as session, session.begin():
        subscription, secret = await webhooks.create_subscription(
            session,
            realm.actor,
            TEST_SECRET_KEY,
            destination=receiver.url,
            allow_private_network=True,
            event_types=event_types,
        )
    receiver.secrets.append(secret)
    return subscription.id


async def dispatch(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        await dispatch_outbox(session)


async def deliveries_of(realm: RealmHandle, hook: str) -> list[WebhookDelivery]:
    async with realm.sessions() as session:
        rows = await session.execute(
            select(WebhookDelivery).where(WebhookDelivery.subscription_id == hook).order_by(WebhookDelivery.id)  # type: ignore[arg-type]
        )
        return list(rows.scalars())


async def settle(realm: RealmHandle, dispatcher: DeliveryDispatcher, hooks: list[str], timeout: float = 60) -> None:  # noqa: ASYNC109
    """Run sweeps until no delivery of ``hooks`` is pending (a generous deadline, no fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await dispatcher.run_once()
        pending = [d for h in hooks for d in await deliveries_of(realm, h) if d.state == "pending"]
        if not pending:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("deliveries still pending")


def call_runner(
    realm: RealmHandle,
    *,
    clock: FixedClock | None = None,
    allow_private: bool = True,
    operator_key: str = TEST_SECRET_KEY,
    timeout_ms: int = 10_000,
) -> Runner:
    settings = RunnerSettings(
        lease=timedelta(seconds=30),
        endpoints=EndpointSettings(
            operator_key=operator_key, allow_private_egress=allow_private, timeout_ms=timeout_ms
        ),
    )
    return Runner(realm.sessions, "worker-test-1-call", settings=settings, clock=clock or FixedClock(datetime.now(UTC)))


def calling(hook: str, **extra: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "sync", "type": "call_webhook", "subscription_id": hook, **extra},
            {"id": "done", "type": "end"},
        ],
        "retry": {"max_attempts": 3, "backoff": "1s"},
    }


async def run_one(realm: RealmHandle, definition: dict[str, Any]) -> tuple[str, str]:
    subject = await realm.user()
    wid = await publish(realm, definition, name=f"W {new_id('wfl')[-6:]}")
    return wid, await start(realm, wid, subject.id)
