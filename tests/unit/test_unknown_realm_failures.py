"""Failed sign-ins at realms that do not exist, kept in memory: their window's exact end, and the
bound on the memory they take."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engine.directory.throttle import THROTTLE_WINDOW, UnknownRealmFailures

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_failure_counts_until_the_window_is_over_and_not_at_its_end() -> None:
    failures = UnknownRealmFailures()
    failures.record("nowhere", "Pat@example.com", "10.0.0.1", moment=START)
    last = START + THROTTLE_WINDOW - timedelta(microseconds=1)
    assert failures.per_account("nowhere", "PAT@example.com", last) == 1
    assert failures.per_address("10.0.0.1", last) == 1
    assert failures.per_account("elsewhere", "pat@example.com", last) == 0
    assert failures.per_address("10.0.0.2", last) == 0
    assert failures.per_account("nowhere", "pat@example.com", START + THROTTLE_WINDOW) == 0
    assert failures.per_address("10.0.0.1", START + THROTTLE_WINDOW) == 0


def test_a_count_forgets_what_left_the_window() -> None:
    failures = UnknownRealmFailures()
    failures.record("nowhere", "pat@example.com", "10.0.0.1", moment=START)
    failures.record("nowhere", "pat@example.com", "10.0.0.1", moment=START + timedelta(minutes=10))
    assert failures.per_address("10.0.0.1", START + THROTTLE_WINDOW) == 1
    assert failures.per_address("10.0.0.1", START + timedelta(minutes=10) + THROTTLE_WINDOW) == 0
    assert failures.per_account("nowhere", "pat@example.com", START + timedelta(minutes=10) + THROTTLE_WINDOW) == 0
    assert failures._events == {}  # nothing outside the window is kept


def test_at_the_bound_on_keys_a_new_failure_first_drops_what_left_the_window() -> None:
    failures = UnknownRealmFailures()
    failures.MAX_KEYS = 4
    later = START + THROTTLE_WINDOW
    failures.record("nowhere", "a@example.com", "10.0.0.1", moment=START)
    failures.record("nowhere", "b@example.com", "10.0.0.1", moment=START)
    assert len(failures._events) == 3  # the address and two accounts
    failures.record("nowhere", "c@example.com", "10.0.0.1", moment=later)
    assert len(failures._events) == 4  # below the bound: nothing is dropped
    failures.record("nowhere", "d@example.com", "10.0.0.1", moment=later)
    # at the bound: the accounts of a and b left the window and are dropped before d is kept
    assert sorted(failures._events) == [
        ("account", "nowhere", "c@example.com"),
        ("account", "nowhere", "d@example.com"),
        ("address", "10.0.0.1"),
    ]
    assert failures._events[("address", "10.0.0.1")] == [later, later]
