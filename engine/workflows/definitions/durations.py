"""Durations in definitions: a whole number and a unit, ``30s``, ``15m`` or ``72h``.

Units are seconds (``s``), minutes (``m``) and hours (``h``); the number is a positive integer
without leading zeros. Every duration member has its own bounds (``BOUNDS``), documented in
docs/definitions.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UNITS: dict[str, int] = {"s": 1, "m": 60, "h": 3600}

_SYNTAX = re.compile(r"(0|[1-9][0-9]{0,9})([smh])")

MINUTE = 60
HOUR = 3600


def parse_duration(text: str) -> int:
    """The duration in seconds; ValueError when the text is not a positive duration."""
    if not isinstance(text, str):
        raise ValueError("A duration is a string such as 30s, 15m or 72h.")
    match = _SYNTAX.fullmatch(text)
    if match is None:
        raise ValueError("A duration is a whole number followed by s, m or h, such as 30s, 15m or 72h.")
    seconds = int(match.group(1)) * UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError("A duration must be positive.")
    return seconds


def format_duration(seconds: int) -> str:
    """The shortest spelling: the largest unit that divides the duration exactly (3600 → ``1h``)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise ValueError("A duration must be a positive whole number of seconds.")
    for unit in ("h", "m", "s"):
        if seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    raise AssertionError("unreachable")  # pragma: no cover - "s" always divides


@dataclass(frozen=True)
class Bounds:
    """Inclusive bounds of one duration member, in seconds."""

    minimum: int
    maximum: int

    def check(self, text: str) -> str | None:
        """None when the text is a duration within the bounds, otherwise the reason (a sentence)."""
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            if isinstance(text, str) and _SYNTAX.fullmatch(text):
                return f"must be at least {format_duration(self.minimum)}."
            return str(exc)
        if seconds < self.minimum:
            return f"must be at least {format_duration(self.minimum)}."
        if seconds > self.maximum:
            return f"must be at most {format_duration(self.maximum)}."
        return None

    def describe(self) -> str:
        return f"{format_duration(self.minimum)} to {format_duration(self.maximum)}"


# Where each duration appears, and its bounds.
BOUNDS: dict[str, Bounds] = {
    "retry.backoff": Bounds(1, HOUR),
    "approval.expires_in": Bounds(HOUR, 720 * HOUR),
    "wait.duration": Bounds(1, 8760 * HOUR),
    "assign_role.expires_in": Bounds(HOUR, 8760 * HOUR),
    "schedule.every": Bounds(HOUR, 8760 * HOUR),
    "role_holders.granted_before": Bounds(HOUR, 87600 * HOUR),
}
