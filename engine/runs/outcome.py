"""A run's outcome in people's words, written once for every page that shows a run.

:func:`run_outcome` turns what a run records (its state, error category, last error, the
approval decisions in its context, its cancellation, when it is due) into one sentence —
"Rejected by Ada Admin: not this quarter", "Retrying at 09:31 UTC: the endpoint answered 503",
"Failed and undone: Nora already held lab-access". The run keeps the state seed 000 defines; the
words only say it the way a person would.

An approver saying no is a **decision**, not a fault: :data:`DECISION_CATEGORIES` names the error
categories that record one, and workflow health, the failure figures and the diagnostics series
(engine/runs/diagnostics.py, engine/directory/overview.py) leave them out of the failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from engine.platform.clock import SYSTEM_CLOCK
from engine.runs import states as st

APPROVAL_REJECTED = "approval_rejected"
APPROVAL_EXPIRED = "approval_expired"
# Error categories that record a person's decision rather than an operational failure.
DECISION_CATEGORIES: frozenset[str] = frozenset({APPROVAL_REJECTED})

MAX_DETAIL = 200  # a list shows the first words of a long error; the timeline shows it whole


class RunLike(Protocol):
    state: str
    error_category: str | None
    last_error: str | None
    context: dict[str, Any]
    due_at: datetime | None
    lease_owner: str | None
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    cancel_reason: str | None


@dataclass(frozen=True)
class Outcome:
    """``words``: one sentence; ``tone``: its colour, as the badges name them (``ok``, ``progress``,
    ``waiting``, ``bad``, ``undone``, ``stopped``); ``decision``: the run ended because a person
    said no."""

    words: str
    tone: str
    decision: bool = False


def is_decision(error_category: str | None) -> bool:
    """Does this error category record a person's decision (not an operational failure)?"""
    return error_category in DECISION_CATEGORIES


def people_in(run: RunLike) -> list[str]:
    """The ids of the people whose names :func:`run_outcome` may write (decider, canceller)."""
    ids = [str(a.get("decided_by") or "") for a in _decisions(run)]
    return [i for i in [*ids, run.cancel_requested_by or ""] if i]


def _decisions(run: RunLike) -> list[dict[str, Any]]:
    found = (run.context or {}).get("approvals") or []
    return [a for a in found if isinstance(a, dict)]


def _clip(text: str | None, limit: int | None) -> str:
    words = " ".join((text or "").split())
    if limit is not None and len(words) > limit:
        return words[: limit - 1].rstrip() + "…"
    return words


def _at(moment: datetime, now: datetime) -> str:
    moment = moment.astimezone(UTC)
    return moment.strftime("%H:%M UTC" if moment.date() == now.astimezone(UTC).date() else "%d %b %H:%M UTC")


def _rejection(run: RunLike, names: Mapping[str, str], limit: int | None) -> str:
    rejected = [a for a in _decisions(run) if a.get("status") == "rejected"]
    if not rejected:
        return "Rejected by an approver"
    last = rejected[-1]
    who = names.get(str(last.get("decided_by") or ""), "a former user")
    comment = _clip(last.get("comment"), limit)
    return f"Rejected by {who}: {comment}" if comment else f"Rejected by {who} (no comment)"


def run_outcome(
    run: RunLike, names: Mapping[str, str], *, now: datetime | None = None, limit: int | None = MAX_DETAIL
) -> Outcome:
    """The run's outcome in words. ``names`` maps user ids to display names (see :func:`people_in`);
    ``limit`` clips an error or a comment (None: whole)."""
    now = now or SYSTEM_CLOCK.now()
    state, category = run.state, run.error_category
    detail = _clip(run.last_error, limit)
    said = f": {detail}" if detail else ""
    if run.cancel_requested_at is not None and (state == st.CANCELLED or state not in st.FINISHED):
        who = names.get(run.cancel_requested_by or "", "a former user") if run.cancel_requested_by else "the system"
        reason = _clip(run.cancel_reason, limit)
        words = f"Cancelled by {who}" + (f": {reason}" if reason else "")
        if state == st.CANCELLED:
            return Outcome(words, "undone")
        return Outcome(
            f"Cancel requested by {who}" + (f": {reason}" if reason else "") + " — undoing what it did", "waiting"
        )
    if is_decision(category) and state in (st.COMPENSATING, *st.FINISHED):
        words = _rejection(run, names, limit)
        tail = {
            st.COMPENSATING: " — undoing what it did",
            st.COMPENSATED: " — what it did was undone",
            st.COMPENSATION_FAILED: " — undoing what it did failed: an administrator must finish by hand",
        }.get(state, "")
        return Outcome(words + tail, "bad" if state == st.COMPENSATION_FAILED else "stopped", decision=True)
    if state == st.SUCCEEDED:
        return Outcome("Succeeded", "ok")
    if state == st.PENDING:
        return Outcome("Waiting to start", "progress")
    if state == st.WAITING:
        until = run.due_at
        return Outcome(f"Waiting until {_at(until, now)}" if until else "Waiting", "waiting")
    if state == st.AWAITING_APPROVAL:
        return Outcome("Waiting for an approver's decision", "waiting")
    if state in (st.RUNNING, st.COMPENSATING):
        if category and run.due_at is not None and run.due_at > now and run.lease_owner is None:
            doing = "Retrying" if state == st.RUNNING else "Undoing; retrying"
            return Outcome(f"{doing} at {_at(run.due_at, now)}{said}", "waiting")
        if state == st.COMPENSATING:
            return Outcome(f"Failed, undoing what it did{said}", "bad")
        return Outcome("Running", "progress")
    expired = "No decision in time: the approval expired" if category == APPROVAL_EXPIRED else None
    if state == st.FAILED:
        return Outcome(expired or f"Failed{said}", "bad")
    if state == st.COMPENSATED:
        return Outcome((expired + " — what it did was undone") if expired else f"Failed and undone{said}", "undone")
    if state == st.COMPENSATION_FAILED:
        return Outcome(f"Failed, and undoing it failed{said}", "bad")
    if state == st.CANCELLED:
        return Outcome("Cancelled", "undone")
    return Outcome(state.replace("_", " ").capitalize(), "progress")


def decided_then(decision: str, outcome: Outcome | None) -> str:
    """What an approver's decision led to: ``approved — then failed: Nora already held lab-access``.

    ``decision`` is the approval's status; ``outcome`` the run's (None when the run is gone).
    """
    said = {"approved": "approved", "rejected": "rejected", "expired": "expired", "cancelled": "cancelled"}.get(
        decision, decision
    )
    if outcome is None:
        return f"{said} — the run is no longer kept"
    if decision == "rejected":
        return f"{said} — the run stopped" + (" and undid what it did" if "undone" in outcome.words else "")
    words = outcome.words
    if words == "Succeeded":
        return f"{said} — then succeeded"
    first = words[:1].lower() + words[1:]
    if words.startswith(("Failed", "Cancelled", "No decision")):
        return f"{said} — then {first}"
    return f"{said} — {first}"


def run_title(workflow_name: str | None, subject_name: str | None) -> str:
    """``Onboarding for Nora Example``: how a page names a run (its id goes on hover)."""
    return f"{workflow_name or 'A deleted workflow'} for {subject_name or 'a former user'}"


# The trigger event types (engine/directory/audit.py TRIGGER_EVENT_TYPES) in words.
EVENT_WORDS = {
    "user.created": "a user was created",
    "user.suspended": "an account was suspended",
    "user.reactivated": "an account was reactivated",
    "organization.membership.added": "a membership was added",
    "organization.membership.removed": "a membership was removed",
    "role.assignment.expired": "a role assignment expired",
}


def trigger_words(
    trigger_type: str,
    *,
    starter: str | None,
    rerun: bool = False,
    event_type: str | None = None,
    slot: str | None = None,
) -> str:
    """``Started by Ada Admin``, ``Started because a membership was added``, ``Started by its schedule``.

    ``starter``: the starter's name (None when a trigger started it); ``event_type`` of an event run
    (its input's ``event_type``); ``slot``: a scheduled run's slot.
    """
    if trigger_type == "manual" or starter:
        verb = "Re-run" if rerun else "Started"
        return f"{verb} by {starter or 'a former user'}"
    if trigger_type == "event":
        said = EVENT_WORDS.get(event_type or "", f"the event {event_type}" if event_type else "an event")
        return f"Started because {said}"
    if trigger_type == "schedule":
        return "Started by its schedule" + (f" ({slot})" if slot else "")
    return f"Started by a {trigger_type} trigger"
