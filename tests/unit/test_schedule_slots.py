"""A schedule's slots (engine/runs/schedules.py): the latest at or before now, the next after it, and
the trigger key each slot's runs carry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from engine.runs.schedules import current_slot, next_slot, slot_key

ANCHOR = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HOUR = 3600


def test_no_slot_before_the_anchor_and_the_anchor_is_the_first() -> None:
    assert current_slot(ANCHOR, HOUR, ANCHOR - timedelta(microseconds=1)) is None
    assert current_slot(ANCHOR, HOUR, ANCHOR) == ANCHOR
    assert next_slot(ANCHOR, HOUR, ANCHOR - timedelta(microseconds=1)) == ANCHOR


def test_a_slot_lasts_until_the_instant_the_next_begins() -> None:
    second = ANCHOR + timedelta(hours=1)
    assert current_slot(ANCHOR, HOUR, second - timedelta(microseconds=1)) == ANCHOR
    assert current_slot(ANCHOR, HOUR, second) == second
    assert next_slot(ANCHOR, HOUR, second - timedelta(microseconds=1)) == second
    assert next_slot(ANCHOR, HOUR, second) == second + timedelta(hours=1)
    assert current_slot(ANCHOR, 3 * HOUR, ANCHOR + timedelta(hours=7)) == ANCHOR + timedelta(hours=6)


def test_an_interval_of_nothing_has_no_slot() -> None:
    assert current_slot(ANCHOR, 0, ANCHOR + timedelta(hours=1)) is None
    assert current_slot(ANCHOR, -HOUR, ANCHOR + timedelta(hours=1)) is None


def test_a_slots_key_is_its_instant_in_utc_to_the_microsecond() -> None:
    assert slot_key(ANCHOR) == "2026-12-01T09:00:00.000000Z"
    paris = timezone(timedelta(hours=1))
    assert slot_key(datetime(2026, 12, 1, 10, 0, 0, 5, tzinfo=paris)) == "2026-12-01T09:00:00.000005Z"
