"""What a run records of an unexpected error: its kind and first line, never the SQL or its values."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from engine.platform.errors import error_summary

SECRET_VALUE = "applicant-home-address-42"


async def test_a_database_error_keeps_neither_statement_nor_parameters(db: AsyncSession) -> None:
    with pytest.raises(DBAPIError) as caught:
        await db.execute(text("SELECT no_such_column FROM realms WHERE name = :name"), {"name": SECRET_VALUE})
    full = str(caught.value)
    assert "[SQL:" in full and SECRET_VALUE in full  # what SQLAlchemy says, for contrast
    summary = error_summary(caught.value)
    assert summary.startswith("UndefinedColumnError: ")
    assert "no_such_column" in summary  # the driver's own message stays
    assert "[SQL" not in summary and "SELECT" not in summary and SECRET_VALUE not in summary
    assert "\n" not in summary


async def test_a_conflict_keeps_no_detail_line(db: AsyncSession) -> None:
    await db.execute(text("CREATE TEMP TABLE t (v text UNIQUE)"))
    await db.execute(text("INSERT INTO t VALUES (:v)"), {"v": SECRET_VALUE})
    with pytest.raises(IntegrityError) as caught:
        await db.execute(text("INSERT INTO t VALUES (:v)"), {"v": SECRET_VALUE})
    summary = error_summary(caught.value)
    assert summary.startswith("UniqueViolationError: duplicate key value violates unique constraint")
    assert SECRET_VALUE not in summary and "DETAIL" not in summary


def test_a_plain_error_and_a_silent_one() -> None:
    assert error_summary(RuntimeError("boom\nsecond line")) == "RuntimeError: boom"
    assert error_summary(TimeoutError()) == "TimeoutError"
    assert len(error_summary(ValueError("x" * 1000))) == 300
