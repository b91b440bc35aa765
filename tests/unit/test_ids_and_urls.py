from __future__ import annotations

import re
import time

import pytest

from engine.platform.config import ConfigError
from engine.platform.database import asyncpg_url, libpq_conninfo, normalize_url, psycopg_url, redact, with_database
from engine.platform.ids import has_prefix, new_id
from engine.worker.heartbeats import new_worker_id


def test_ids_are_prefixed_and_sort_by_creation_time() -> None:
    first = new_id("usr")
    time.sleep(0.002)
    second = new_id("usr")
    assert has_prefix(first, "usr") and has_prefix(second, "usr")
    assert first < second
    assert re.fullmatch(r"usr_[0-9a-z]{26}", first)


def test_unknown_prefix_is_refused() -> None:
    with pytest.raises(ValueError):
        new_id("xyz")


def test_worker_id_has_host_pid_and_random_suffix() -> None:
    a, b = new_worker_id(), new_worker_id()
    assert re.fullmatch(r"worker-[^-\s]+(-[^-\s]+)*-\d+-[0-9a-f]{8}", a)
    assert a != b


def test_url_variants_for_each_driver() -> None:
    url = "postgresql://app:s3cret@db.example:5433/cockpit?sslmode=require"
    assert asyncpg_url(url).startswith("postgresql+asyncpg://app:s3cret@db.example:5433/cockpit")
    assert psycopg_url(url).startswith("postgresql+psycopg://")
    assert normalize_url("postgres+asyncpg://h/db") == "postgresql://h/db"
    assert with_database(url, "postgres").split("?")[0].endswith("/postgres")
    assert redact(url) == "postgresql://app:***@db.example:5433/cockpit?sslmode=require"
    assert "host=%2Ftmp%2Fx" in libpq_conninfo("postgresql://u@/db?host=/tmp/x&foo=1") or "host=/tmp/x" in (
        libpq_conninfo("postgresql://u@/db?host=/tmp/x&foo=1")
    )
    assert "foo" not in libpq_conninfo("postgresql://u@/db?host=/tmp/x&foo=1")


def test_non_postgres_url_is_refused() -> None:
    with pytest.raises(ConfigError):
        normalize_url("mysql://localhost/db")


def test_ids_made_in_the_same_millisecond_keep_their_order() -> None:
    ids = [new_id("rol") for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
