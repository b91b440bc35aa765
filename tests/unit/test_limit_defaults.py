"""Defaults named by seed 000 and the specification, pinned by value (docs/testing.md, "Limits and windows")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.platform.config import ConfigError, load_settings
from engine.runs.retry import RetryPolicy, policy_for


def test_without_a_retry_policy_a_step_gets_three_attempts_30_seconds_apart() -> None:
    step = {"id": "grant", "type": "assign_role"}
    assert policy_for({}, step) == RetryPolicy(max_attempts=3, backoff_ms=30_000)
    assert policy_for({"retry": {"max_attempts": 10, "backoff": "1h"}}, step) == RetryPolicy(10, 3_600_000)
    own = {**step, "retry": {"max_attempts": 1, "backoff": "1s"}}
    assert policy_for({"retry": {"max_attempts": 10, "backoff": "1h"}}, own) == RetryPolicy(1, 1_000)


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for key in list(os.environ):
        if key.startswith("COCKPIT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path))
    return monkeypatch


def test_runs_are_kept_180_days_by_default_and_at_least_one_day(clean_environment: pytest.MonkeyPatch) -> None:
    assert load_settings().run_retention_days == 180
    clean_environment.setenv("COCKPIT_RUN_RETENTION_DAYS", "1")
    assert load_settings().run_retention_days == 1
    clean_environment.setenv("COCKPIT_RUN_RETENTION_DAYS", "0")
    with pytest.raises(ConfigError, match="COCKPIT_RUN_RETENTION_DAYS must be at least 1, got 0"):
        load_settings()
