"""Relative times are rounded to the nearest unit, on both sides of each unit's edge."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cockpit.pages.formatting import relative

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ahead", "words"),
    [
        (timedelta(seconds=4), "just now"),
        (timedelta(seconds=59), "in 59 s"),
        (timedelta(seconds=89), "in 1 min"),
        (timedelta(seconds=90), "in 2 min"),
        (timedelta(minutes=59, seconds=29), "in 59 min"),
        (timedelta(minutes=59, seconds=30), "in 1 h"),
        (timedelta(minutes=119), "in 2 h"),
        (timedelta(hours=23, minutes=29), "in 23 h"),
        (timedelta(hours=23, minutes=30), "tomorrow"),
        (timedelta(hours=35, minutes=59), "tomorrow"),
        (timedelta(hours=36), "in 2 days"),
        (timedelta(hours=71, minutes=59, seconds=55), "in 3 days"),  # a 72 h approval, just asked
        (timedelta(hours=72), "in 3 days"),
        (timedelta(days=6, hours=11, minutes=59), "in 6 days"),
        (timedelta(days=6, hours=12), "08 Dec 2026"),
    ],
)
def test_future_times_round_to_the_nearest_unit(ahead: timedelta, words: str) -> None:
    assert relative(NOW + ahead, NOW) == words


@pytest.mark.parametrize(
    ("ago", "words"),
    [(timedelta(minutes=5), "5 min ago"), (timedelta(hours=30), "yesterday"), (timedelta(hours=50), "2 days ago")],
)
def test_past_times_round_the_same_way(ago: timedelta, words: str) -> None:
    assert relative(NOW - ago, NOW) == words
