"""Webhook deliveries per second to a local receiver, beside a bare ``httpx`` loop in the same run.

    uv run python bench/deliveries.py [--events 1000] [--subscriptions 8] [--concurrency 8] [--rounds 3]

Uses the embedded PostgreSQL server (under COCKPIT_HOME, default .cockpit) unless
COCKPIT_DATABASE_URL names a server (only the server is used: a scratch database is created,
migrated and dropped at the end whatever happens). A threaded HTTP receiver on 127.0.0.1 answers
204 and verifies nothing (so both sides pay the same for it).

Each round:
- **bare**: ``events × subscriptions`` POSTs of the same body with one ``httpx.AsyncClient``,
  as many at a time as the dispatcher can have in flight (``min(concurrency, subscriptions)``,
  since a subscription has one delivery in flight at most) — the ceiling of this machine and
  receiver;
- **product**: the same number of deliveries queued by :func:`engine.endpoints.deliveries.fan_out`
  and sent by :class:`DeliveryDispatcher` exactly as a worker runs it (claim with a lease,
  decrypt the secret, sign, egress check with DNS, pinned connection, record the outcome, in
  order per subscription: one in flight per subscription).

Reports both rates and their ratio (product / bare) per round and the median. Method and figures:
docs/performance.md, "Webhook deliveries".
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import secrets  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402

import httpx  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from sqlalchemy import text  # noqa: E402

from engine.directory import webhooks  # noqa: E402
from engine.directory.audit import Actor  # noqa: E402
from engine.directory.models import OutboxEvent  # noqa: E402
from engine.directory.realms import create_realm  # noqa: E402
from engine.endpoints.deliveries import DeliveryDispatcher, DeliveryPolicy, fan_out  # noqa: E402
from engine.platform.config import load_settings  # noqa: E402
from engine.platform.database import libpq_conninfo, server_url, with_database  # noqa: E402
from engine.platform.db import make_engine, make_sessionmaker  # noqa: E402
from engine.platform.ids import new_id  # noqa: E402
from engine.platform.migrate import upgrade  # noqa: E402
from testing.receiver import Receiver  # noqa: E402
from testing.sizes import table_sizes  # noqa: E402

OPERATOR_KEY = "bench-operator-key-0123456789abcdef0123456789"


async def bare(url: str, total: int, concurrency: int, body: bytes) -> float:
    queue = iter(range(total))
    async with httpx.AsyncClient(trust_env=False) as client:

        async def worker() -> None:
            for _ in queue:
                response = await client.post(url, content=body, headers={"Content-Type": "application/json"})
                assert response.status_code == 204

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return total / (time.perf_counter() - started)


async def product(
    url: str, db_url: str, events: int, subscriptions: int, concurrency: int, receiver: Receiver
) -> float:
    engine = make_engine(db_url, pool_size=concurrency + 2)
    sessions = make_sessionmaker(engine)
    try:
        async with sessions() as session, session.begin():
            realm, _ = await create_realm(session, "b" + new_id("rlm")[-10:], admin_email="a@bench.example")
            for _ in range(subscriptions):
                await webhooks.create_subscription(
                    session,
                    Actor(type="system", id=None, realm_id=realm.id),
                    OPERATOR_KEY,
                    destination=url,
                    allow_private_network=True,
                )
            await session.execute(text("UPDATE outbox_events SET dispatched_at = now()"))
        async with sessions() as session, session.begin():
            batch = [
                OutboxEvent(
                    id=new_id("obx"),
                    realm_id=realm.id,
                    type="user.created",
                    subject_id=new_id("usr"),
                    payload={},
                    created_at=datetime.now(UTC),
                )
                for _ in range(events)
            ]
            queued = await fan_out(session, batch)
        assert queued == events * subscriptions, queued
        before = len(receiver.requests())
        dispatcher = DeliveryDispatcher(
            sessions,
            DeliveryPolicy(operator_key=OPERATOR_KEY, allow_private_egress=True, concurrency=concurrency),
        )
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(dispatcher.run(stop, poll_s=0.05))
        while True:
            async with sessions() as session:
                pending = await session.scalar(
                    text("SELECT count(*) FROM webhook_deliveries WHERE realm_id = :r AND state <> 'succeeded'"),
                    {"r": realm.id},
                )
            if not pending:
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        stop.set()
        await task
        assert len(receiver.requests()) - before == queued
        return queued / elapsed
    finally:
        await engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--subscriptions", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--sizes", action="store_true", help="at the end, print each table's rows and bytes per row (testing/sizes.py)"
    )
    args = parser.parse_args(argv)
    maintenance = server_url(load_settings())
    name = f"deliveries_bench_{secrets.token_hex(4)}"
    url = with_database(maintenance, name)
    with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    receiver = Receiver(respond=lambda _r: 204).start()
    try:
        upgrade(url)
        total = args.events * args.subscriptions
        body = b'{"type":"user.created","id":"obx_x","data":{}}'
        rows = []
        for number in range(1, args.rounds + 1):
            # The same number of requests in flight as the dispatcher can have: one per subscription.
            in_flight = min(args.concurrency, args.subscriptions)
            bare_rate = asyncio.run(bare(receiver.url, total, in_flight, body))
            product_rate = asyncio.run(
                product(receiver.url, url, args.events, args.subscriptions, args.concurrency, receiver)
            )
            rows.append((bare_rate, product_rate))
            print(
                f"round {number}: bare httpx {bare_rate:7.0f}/s   deliveries {product_rate:7.0f}/s   "
                f"ratio {product_rate / bare_rate:.2f}",
                flush=True,
            )
        ratios = [p / b for b, p in rows]
        print(
            f"\n{total} requests per side per round, concurrency {args.concurrency}, "
            f"{args.subscriptions} subscriptions; {platform.machine()}, {os.cpu_count()} cores, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        print(
            f"median: bare {statistics.median(b for b, _ in rows):.0f}/s, "
            f"deliveries {statistics.median(p for _, p in rows):.0f}/s, ratio {statistics.median(ratios):.2f}"
        )
        if args.sizes:
            print()
            print(table_sizes(url))
        return 0
    finally:
        receiver.stop()
        with psycopg.connect(libpq_conninfo(maintenance), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    sys.exit(main())
