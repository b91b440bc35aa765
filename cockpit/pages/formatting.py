"""How the pages write moments: readable relative times, the exact time on hover."""

from __future__ import annotations

from datetime import UTC, datetime


def exact(moment: datetime) -> str:
    """``2026-12-01 09:30:05 UTC``: what the hover shows."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(moment: datetime, now: datetime | None = None) -> str:
    """``just now``, ``42 s ago``, ``5 min ago``, ``3 h ago``, ``yesterday``, ``in 3 days``; a date after a week.

    Rounded to the nearest unit, not cut: an approval that expires in 72 hours reads "in 3 days"
    even a few seconds after it was asked (71 h 59 min 55 s), and 119 minutes read "2 h".
    """
    now = now or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (now - moment).total_seconds()
    future = seconds < 0
    span = abs(seconds)
    if span < 5:
        return "just now"
    if (whole := int(span)) < 60:
        text = f"{whole} s"
    elif (minutes := _nearest(span, 60)) < 60:
        text = f"{minutes} min"
    elif (hours := _nearest(span, 3600)) < 24:
        text = f"{hours} h"
    elif (days := _nearest(span, 86400)) < 7:
        if days == 1:
            return "tomorrow" if future else "yesterday"
        text = f"{days} days"
    else:
        return moment.astimezone(UTC).strftime("%d %b %Y")
    return f"in {text}" if future else f"{text} ago"


def _nearest(span: float, unit: int) -> int:
    """``span`` seconds in whole ``unit``s, halves rounded up."""
    return int(span / unit + 0.5)
