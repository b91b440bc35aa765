"""Keyset pagination: pages ordered by id (ids sort by creation time); the cursor is the last id."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped

from engine.platform.errors import invalid

T = TypeVar("T")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def encode_cursor(last_id: str) -> str:
    return base64.urlsafe_b64encode(last_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = base64.urlsafe_b64decode(padded.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise invalid("query:cursor", "The cursor is not one this API returned.", "invalid_cursor") from exc
    if "_" not in value or len(value) > 60:
        raise invalid("query:cursor", "The cursor is not one this API returned.", "invalid_cursor")
    return value


def check_limit(limit: int | None) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise invalid("query:limit", f"limit is between 1 and {MAX_LIMIT}.", "out_of_range")
    return limit


async def keyset_page(
    session: AsyncSession,
    query: Select[*tuple[Any, ...]],
    id_column: Mapped[str],
    *,
    cursor: str | None,
    limit: int | None,
    descending: bool = False,
) -> Page[Any]:
    """Run ``query`` for one page after ``cursor``; rows are scalars (ORM objects) or tuples."""
    size = check_limit(limit)
    after = decode_cursor(cursor)
    if after is not None:
        query = query.where(id_column < after if descending else id_column > after)
    query = query.order_by(id_column.desc() if descending else id_column.asc()).limit(size + 1)
    result = await session.execute(query)
    rows: Sequence[Any] = result.scalars().all() if len(query.column_descriptions) == 1 else result.all()
    items = list(rows[:size])
    next_cursor = None
    if len(rows) > size:
        last = items[-1]
        last_id = getattr(last, "id", None) or last[0].id
        next_cursor = encode_cursor(last_id)
    return Page(items=items, next_cursor=next_cursor)
