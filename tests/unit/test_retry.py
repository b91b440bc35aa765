from __future__ import annotations

from engine.runs.retry import CAP_MS, delay_ms


def test_backoff_doubles_from_the_policy() -> None:
    assert [delay_ms(30_000, n, rand=lambda: 0.0) for n in (1, 2, 3, 4)] == [30_000, 60_000, 120_000, 240_000]


def test_backoff_is_capped_at_six_hours_jitter_included() -> None:
    assert delay_ms(3_600_000, 10, rand=lambda: 0.0) == CAP_MS
    assert delay_ms(3_600_000, 40, rand=lambda: 0.999) <= CAP_MS
    assert delay_ms(3_600_000, 1000, rand=lambda: 0.0) == CAP_MS  # no overflow for huge attempt numbers


def test_jitter_takes_at_most_twenty_percent_off() -> None:
    assert delay_ms(10_000, 1, rand=lambda: 1.0) == 8_000
    assert delay_ms(10_000, 1, rand=lambda: 0.5) == 9_000
