"""A delivery's payload and its retry wait, as pure functions (no database, no HTTP)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from engine.directory.models import OutboxEvent
from engine.endpoints.deliveries import BACKOFF_CAP_MS, event_payload, retry_delay_ms


@pytest.mark.parametrize(("failed_tries", "base"), [(0, 1000), (1, 1000), (2, 2000), (3, 4000), (4, 8000)])
def test_the_wait_doubles_per_failed_try_with_at_most_a_fifth_taken_off(failed_tries: int, base: int) -> None:
    waits = {retry_delay_ms(1000, failed_tries) for _ in range(200)}
    assert all(base * 0.8 <= wait <= base for wait in waits), sorted(waits)
    assert len(waits) > 1, "no jitter"


def test_the_wait_is_capped_at_six_hours() -> None:
    assert BACKOFF_CAP_MS == 6 * 3600 * 1000
    waits = [retry_delay_ms(10_000, tries) for tries in (13, 14, 41, 1000) for _ in range(50)]
    assert all(BACKOFF_CAP_MS * 0.8 <= wait <= BACKOFF_CAP_MS for wait in waits)


def test_the_payload_carries_the_events_own_time_in_utc() -> None:
    created = datetime(2026, 3, 4, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    event = OutboxEvent(
        id="evt_1",
        realm_id="rlm_1",
        type="user.created",
        subject_id="usr_1",
        payload={"user_id": "usr_1", "nested": {"dropped": True}},
        correlation_id="req_1",
        created_at=created,
    )
    assert event_payload(event) == {
        "type": "user.created",
        "timestamp": "2026-03-04T05:08:09.123456Z",
        "id": "evt_1",
        "realm_id": "rlm_1",
        "correlation_id": "req_1",
        "data": {"subject_id": "usr_1", "organization_id": None, "user_id": "usr_1"},
    }
