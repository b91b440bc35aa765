"""How the pages write moments: readable relative times, the exact time on hover."""

from __future__ import annotations

from datetime import UTC, datetime


def exact(moment: datetime) -> str:
    """``2026-12-01 09:30:05 UTC``: what the hover shows."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(moment: datetime, now: datetime | None = None) -> str:
    """``just now``, ``42 s ago``, ``5 min ago``, ``3 h ago``, ``yesterday``, ``in 4 min``; a date after a week."""
    now = now or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (now - moment).total_seconds()
    future = seconds < 0
    span = abs(int(seconds))
    if span < 5:
        return "just now"
    if span < 60:
        text = f"{span} s"
    elif span < 3600:
        text = f"{span // 60} min"
    elif span < 86400:
        text = f"{span // 3600} h"
    elif span < 7 * 86400:
        days = span // 86400
        if days == 1:
            return "tomorrow" if future else "yesterday"
        text = f"{days} days"
    else:
        return moment.astimezone(UTC).strftime("%d %b %Y")
    return f"in {text}" if future else f"{text} ago"
