"""The engine's one source of time.

Everything in ``engine/`` that needs "now" asks a ``Clock``: the worker and the web app use the
``SYSTEM_CLOCK``; tests give a ``FixedClock`` and move it. Nothing else in ``engine/`` reads the
wall clock (``datetime.now`` is a banned API there, see ``[tool.ruff.lint.flake8-tidy-imports]``
in pyproject.toml).
"""

from __future__ import annotations

import random as _random
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Time, and the randomness of backoff jitter, for the engine."""

    def now(self) -> datetime: ...

    def random(self) -> float: ...


class SystemClock:
    """The wall clock (UTC) and the process's random numbers."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def random(self) -> float:
        return _random.random()


class FixedClock:
    """A clock that moves only when told (tests)."""

    def __init__(self, start: datetime, jitter: float = 0.0) -> None:
        self.current = start
        self.jitter = jitter

    def now(self) -> datetime:
        return self.current

    def random(self) -> float:
        return self.jitter

    def set(self, moment: datetime) -> None:
        self.current = moment

    def advance(self, **kwargs: float) -> None:
        self.current += timedelta(**kwargs)


SYSTEM_CLOCK = SystemClock()
