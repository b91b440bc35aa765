"""Backoff for step retries and compensations (seed 000 "Limits and validation").

The delay doubles per attempt from the policy's backoff, is capped at 6 hours, and includes up
to 20 % jitter (taken off the delay, so a wait never exceeds the cap).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.workflows.definitions.durations import parse_duration

CAP_MS = 6 * 3600 * 1000
JITTER = 0.2
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_MS = 30_000
COMPENSATION_MAX_ATTEMPTS = 5
COMPENSATION_BACKOFF_MS = 30_000


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_ms: int


def policy_for(definition: dict[str, Any], step: dict[str, Any]) -> RetryPolicy:
    """A step's retry policy: its own ``retry``, else the definition's, else the defaults."""
    retry = step.get("retry") or definition.get("retry") or {}
    max_attempts = int(retry.get("max_attempts", DEFAULT_MAX_ATTEMPTS))
    backoff = retry.get("backoff")
    backoff_ms = parse_duration(backoff) * 1000 if isinstance(backoff, str) else DEFAULT_BACKOFF_MS
    return RetryPolicy(max_attempts=max_attempts, backoff_ms=backoff_ms)


def delay_ms(backoff_ms: int, failed_attempts: int, *, rand: Callable[[], float] = random.random) -> int:
    """The wait before the next try after ``failed_attempts`` failures (1 → the base backoff)."""
    exponent = max(failed_attempts - 1, 0)
    base = min(backoff_ms * (2 ** min(exponent, 40)), CAP_MS)
    return int(base - base * JITTER * rand())
