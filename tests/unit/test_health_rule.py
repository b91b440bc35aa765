"""The health rule of a workflow's diagnostics at each boundary, and the percentile it reports."""

from __future__ import annotations

import pytest

from engine.runs.diagnostics import classify_health, percentile


@pytest.mark.parametrize(
    ("attempts", "failed", "status"),
    [
        (0, 0, "unknown"),
        (1, 0, "healthy"),
        (10, 1, "healthy"),  # exactly 10 %: not more than 10 %
        (9, 1, "degraded"),  # 11.1 %
        (100, 10, "healthy"),
        (100, 11, "degraded"),
        (1000, 100, "healthy"),
        (1000, 101, "degraded"),
        (1, 1, "degraded"),
        (3, 0, "healthy"),
    ],
)
def test_failure_share_boundaries(attempts: int, failed: int, status: str) -> None:
    health = classify_health(attempts=attempts, failed_attempts=failed, open_compensation_failures=0)
    assert health.status == status, health.reason


def test_a_failed_compensation_outranks_everything() -> None:
    for attempts, failed in ((0, 0), (10, 0), (10, 9)):
        health = classify_health(
            attempts=attempts, failed_attempts=failed, open_compensation_failures=1, open_run_ids=["wrn_a"]
        )
        assert health.status == "attention_required"
        assert health.reason == "1 compensation failed: an administrator must finish undoing it — see run wrn_a"


def test_the_reason_names_the_runs_in_words() -> None:
    health = classify_health(
        attempts=5,
        failed_attempts=0,
        open_compensation_failures=5,
        open_run_ids=["wrn_1", "wrn_2", "wrn_3", "wrn_4", "wrn_5"],
    )
    assert health.reason == (
        "5 compensations failed: an administrator must finish undoing them — see runs wrn_1, wrn_2, wrn_3 and 2 more"
    )
    assert classify_health(attempts=8, failed_attempts=1, open_compensation_failures=0).reason == (
        "1 of 8 attempts failed (12.5 %), more than 10 %."
    )
    assert "nothing to judge" in classify_health(attempts=0, failed_attempts=0, open_compensation_failures=0).reason


def test_nearest_rank_percentiles() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile(list(reversed(values)), 95) == 95.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


def test_the_reason_counts_words_and_runs_at_their_boundaries() -> None:
    """Two failed compensations are plural; three runs are named without "more", the fourth is
    "1 more"; without run ids the reason names none."""

    def reason(failures: int, runs: list[str] | None) -> str:
        return classify_health(
            attempts=1, failed_attempts=0, open_compensation_failures=failures, open_run_ids=runs
        ).reason

    assert reason(2, ["wrn_1", "wrn_2"]) == (
        "2 compensations failed: an administrator must finish undoing them — see runs wrn_1, wrn_2"
    )
    assert reason(3, ["wrn_1", "wrn_2", "wrn_3"]).endswith("see runs wrn_1, wrn_2, wrn_3")
    assert reason(4, ["wrn_1", "wrn_2", "wrn_3", "wrn_4"]).endswith("see runs wrn_1, wrn_2, wrn_3 and 1 more")
    assert reason(1, None) == "1 compensation failed: an administrator must finish undoing it"


def test_a_percentile_is_the_nearest_rank_exactly() -> None:
    """The rank is ``ceil(q / 100 · n)``: p95 of 200 values is the 190th, p100 of 101 the 101st."""
    assert percentile([float(v) for v in range(1, 201)], 95) == 190.0
    assert percentile([float(v) for v in range(1, 102)], 100) == 101.0
