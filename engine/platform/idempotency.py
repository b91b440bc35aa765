"""Idempotency keys: the first answer to a keyed request, kept per principal and key.

A client that repeats an unsafe request with the same ``Idempotency-Key`` (after a timeout, a
dropped connection) gets the first answer again instead of a second effect. The web layer
reserves the key before the request runs (``in_flight``), keeps the answer when it is sent
(``done``) or gives the key back when nothing worth keeping came of it. Each statement runs on
its own (autocommit), outside the request's transaction, so a concurrent duplicate sees the
reservation at once.

A key lives :data:`WINDOW` (24 hours) from its first use; an expired key is taken afresh by the
next request that names it, and expired rows are swept, a bounded batch at a time, by every
answer kept. A reservation left ``in_flight`` longer than :data:`ABANDONED_AFTER` (a process
that stopped mid-request) may be taken over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import Column, Index, LargeBinary
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from engine.platform.db import Driver
from engine.platform.tables import tz_column

WINDOW = timedelta(hours=24)
ABANDONED_AFTER = timedelta(minutes=5)
SWEEP_BATCH = 100


class IdempotencyKey(SQLModel, table=True):
    """One key of one principal: what the first request was (its fingerprint) and its answer."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_expires_at", "expires_at"),)

    principal_id: str = Field(primary_key=True, max_length=40)
    key: str = Field(primary_key=True, max_length=255)
    fingerprint: str = Field(max_length=64)
    state: str = Field(max_length=20)  # in_flight | done
    status: int | None = Field(default=None)
    headers: list[list[str]] | None = Field(default=None, sa_column=Column(JSONB, nullable=True))
    body: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    created_at: datetime = Field(sa_column=tz_column())
    expires_at: datetime = Field(sa_column=tz_column())


@dataclass(frozen=True)
class KeptAnswer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True)
class Reservation:
    """What the key said: ``reserved`` (go on), ``in_flight``, ``mismatch`` or ``done`` (with its answer)."""

    outcome: Literal["reserved", "in_flight", "mismatch", "done"]
    answer: KeptAnswer | None = None


RESERVE = """
WITH taken AS (
    INSERT INTO idempotency_keys AS k (principal_id, key, fingerprint, state, created_at, expires_at)
    VALUES ($1, $2, $3, 'in_flight', $4, $5)
    ON CONFLICT (principal_id, key) DO UPDATE
       SET fingerprint = EXCLUDED.fingerprint, state = 'in_flight', status = NULL, headers = NULL,
           body = NULL, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
     WHERE k.expires_at <= EXCLUDED.created_at
        OR (k.state = 'in_flight' AND k.fingerprint = EXCLUDED.fingerprint AND k.created_at <= $6)
    RETURNING 1
)
SELECT 'reserved' AS state, NULL AS fingerprint, NULL::int AS status, NULL::jsonb AS headers, NULL::bytea AS body
  FROM taken
UNION ALL
SELECT state, fingerprint, status, headers, body
  FROM idempotency_keys
 WHERE principal_id = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM taken)
"""

KEEP = """
WITH swept AS (
    DELETE FROM idempotency_keys
     WHERE ctid = ANY(ARRAY(
           SELECT ctid FROM idempotency_keys WHERE expires_at <= $6
            ORDER BY expires_at LIMIT $7 FOR UPDATE SKIP LOCKED))
)
UPDATE idempotency_keys SET state = 'done', status = $3, headers = $4::jsonb, body = $5
 WHERE principal_id = $1 AND key = $2 AND state = 'in_flight'
"""

RELEASE = "DELETE FROM idempotency_keys WHERE principal_id = $1 AND key = $2 AND state = 'in_flight'"


async def reserve(conn: Driver, principal_id: str, key: str, fingerprint: str, now: datetime) -> Reservation:
    """Take the key for this request, or say why not (``conn``: an asyncpg connection, autocommit)."""
    rows = await conn.fetch(RESERVE, principal_id, key, fingerprint, now, now + WINDOW, now - ABANDONED_AFTER)
    if not rows:
        # Another request took the key between this statement's snapshot and its insert.
        return Reservation("in_flight")
    row = rows[0]
    if row["state"] == "reserved":
        return Reservation("reserved")
    if row["fingerprint"] != fingerprint:
        return Reservation("mismatch")
    if row["state"] == "in_flight":
        return Reservation("in_flight")
    headers = row["headers"]
    if isinstance(headers, str):
        headers = json.loads(headers)
    return Reservation(
        "done", KeptAnswer(row["status"], [(str(n), str(v)) for n, v in headers or []], bytes(row["body"] or b""))
    )


async def keep(conn: Driver, principal_id: str, key: str, answer: KeptAnswer, now: datetime) -> None:
    """Keep the answer of the reserved key; sweep a batch of expired keys on the way."""
    await conn.execute(
        KEEP,
        principal_id,
        key,
        answer.status,
        json.dumps([list(h) for h in answer.headers]),
        answer.body,
        now,
        SWEEP_BATCH,
    )


async def release(conn: Driver, principal_id: str, key: str) -> None:
    """Give the key back: the request it was reserved for left nothing worth replaying."""
    await conn.execute(RELEASE, principal_id, key)
