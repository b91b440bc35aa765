"""What the run pages share: permissions, messages after a change, durations, people, filters."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from cockpit.state import DbSession
from engine.directory import principals as directory
from engine.directory.models import User

READ = {"permission": "realm.workflows.read"}
READ_ONLY = READ | {"reads_only": True}  # pages that never write: no transaction control
RUN = {"permission": "realm.workflows.run"}

FLASHES = {
    "started": "Run started. It runs in the background; this page follows it.",
    "rerun-started": "Re-run started: a new run of the published revision for the same subject.",
    "retry-now": "The retry is due now: a worker takes the run within a second or two.",
    "cancel-requested": "Cancellation requested: the run undoes what it did and ends cancelled.",
}


STATE_GROUP_PREFIX = "group:"
STATE_GROUP_LABELS = {
    "failed_any": "Failed in any way (incl. compensated)",
    "in_flight": "In flight (not finished)",
    "finished": "Finished",
    "rejected": "Rejected by an approver",
}
TRIGGER_LABELS = {"manual": "Manual (or re-run)", "event": "Event", "schedule": "Schedule"}


def parse_time(value: str) -> datetime | None:
    """A ``datetime-local`` value (read as UTC) or ISO 8601; None when empty, ValueError when not a time."""
    value = value.strip()
    if not value:
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def split_state(state: str) -> tuple[str | None, str | None]:
    """The State picker holds single states and groups (``group:failed_any``)."""
    if state.startswith(STATE_GROUP_PREFIX):
        return None, state[len(STATE_GROUP_PREFIX) :]
    return state or None, None


def human_duration(start: datetime | None, end: datetime | None) -> str | None:
    """``850 ms``, ``12.4 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    if start is None or end is None:
        return None
    seconds = max((end - start).total_seconds(), 0.0)
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


async def people(db_session: DbSession, realm_id: str, ids: Iterable[str | None]) -> dict[str, User]:
    """The users among ``ids`` (others, such as service principals, are left out), in one query."""
    return await directory.users_by_id(db_session, realm_id, ids)
