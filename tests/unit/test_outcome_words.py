"""A run's outcome in words (engine/runs/outcome.py): one table, every state and the decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.runs.outcome import Outcome, decided_then, people_in, run_outcome, run_title, trigger_words

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
NAMES = {"usr_ada": "Ada Admin", "usr_bo": "Bo Approver"}


@dataclass
class Run:
    state: str
    error_category: str | None = None
    last_error: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    due_at: datetime | None = None
    lease_owner: str | None = None
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    cancel_reason: str | None = None


def rejected(comment: str | None, by: str = "usr_bo") -> dict[str, Any]:
    return {"approvals": [{"status": "rejected", "decided_by": by, "comment": comment}]}


NO = {"error_category": "approval_rejected", "last_error": "The approval was rejected."}

CASES: list[tuple[str, Run, str, str, bool]] = [
    ("succeeded", Run("succeeded"), "Succeeded", "ok", False),
    ("pending", Run("pending"), "Waiting to start", "progress", False),
    ("running", Run("running", due_at=NOW, lease_owner="w1"), "Running", "progress", False),
    (
        "waiting for a retry",
        Run("running", "endpoint_5xx", "The endpoint answered 503.", due_at=NOW + timedelta(minutes=2)),
        "Retrying at 09:02 UTC: The endpoint answered 503.",
        "waiting",
        False,
    ),
    (
        "a retry due tomorrow names the day",
        Run("running", "timeout", "Timed out.", due_at=NOW + timedelta(days=1)),
        "Retrying at 03 Dec 09:00 UTC: Timed out.",
        "waiting",
        False,
    ),
    ("a retry already due is running", Run("running", "timeout", "x", due_at=NOW), "Running", "progress", False),
    ("awaiting approval", Run("awaiting_approval"), "Waiting for an approver's decision", "waiting", False),
    ("waiting", Run("waiting", due_at=NOW + timedelta(hours=3)), "Waiting until 12:00 UTC", "waiting", False),
    (
        "rejected, nothing to undo",
        Run("failed", context=rejected("Not this quarter"), **NO),
        "Rejected by Bo Approver: Not this quarter",
        "stopped",
        True,
    ),
    (
        "rejected without a comment",
        Run("failed", context=rejected(None), **NO),
        "Rejected by Bo Approver (no comment)",
        "stopped",
        True,
    ),
    (
        "rejected and undone",
        Run("compensated", context=rejected("No"), **NO),
        "Rejected by Bo Approver: No — what it did was undone",
        "stopped",
        True,
    ),
    (
        "rejected while undoing",
        Run("compensating", context=rejected("No"), **NO),
        "Rejected by Bo Approver: No — undoing what it did",
        "stopped",
        True,
    ),
    (
        "rejected, undoing failed",
        Run("compensation_failed", context=rejected("No"), **NO),
        "Rejected by Bo Approver: No — undoing what it did failed: an administrator must finish by hand",
        "bad",
        True,
    ),
    (
        "rejected by someone no longer in the directory",
        Run("failed", context=rejected("No", by="usr_gone"), **NO),
        "Rejected by a former user: No",
        "stopped",
        True,
    ),
    ("rejected before the decision was kept", Run("failed", **NO), "Rejected by an approver", "stopped", True),
    (
        "failed",
        Run("failed", "already_held", "Nora already held lab-access"),
        "Failed: Nora already held lab-access",
        "bad",
        False,
    ),
    (
        "failed and undone",
        Run("compensated", "not_a_member", "Not a member."),
        "Failed and undone: Not a member.",
        "undone",
        False,
    ),
    (
        "compensation failed",
        Run("compensation_failed", "not_a_member", "Not a member."),
        "Failed, and undoing it failed: Not a member.",
        "bad",
        False,
    ),
    (
        "expired",
        Run("failed", "approval_expired", "The approval expired before anyone decided."),
        "No decision in time: the approval expired",
        "bad",
        False,
    ),
    (
        "cancelled with a reason",
        Run("cancelled", cancel_requested_at=NOW, cancel_requested_by="usr_ada", cancel_reason="Wrong person"),
        "Cancelled by Ada Admin: Wrong person",
        "undone",
        False,
    ),
    (
        "cancel requested",
        Run("compensating", cancel_requested_at=NOW, cancel_requested_by="usr_ada"),
        "Cancel requested by Ada Admin — undoing what it did",
        "waiting",
        False,
    ),
]


@pytest.mark.parametrize(("case", "run", "words", "tone", "decision"), CASES, ids=[c[0] for c in CASES])
def test_a_runs_outcome_in_words(case: str, run: Run, words: str, tone: str, decision: bool) -> None:
    assert run_outcome(run, NAMES, now=NOW) == Outcome(words, tone, decision)


def test_a_long_error_is_clipped_on_lists_and_whole_on_the_timeline() -> None:
    run = Run("failed", "error", "x" * 500)
    assert run_outcome(run, NAMES, now=NOW).words == "Failed: " + "x" * 199 + "…"
    assert run_outcome(run, NAMES, now=NOW, limit=None).words == "Failed: " + "x" * 500


def test_the_people_named_are_the_decider_and_the_canceller() -> None:
    run = Run("cancelled", context=rejected("No"), cancel_requested_by="usr_ada")
    assert people_in(run) == ["usr_bo", "usr_ada"]


@pytest.mark.parametrize(
    ("status", "outcome", "words"),
    [
        ("approved", Outcome("Succeeded", "ok"), "approved — then succeeded"),
        (
            "approved",
            Outcome("Failed: Nora already held lab-access", "bad"),
            "approved — then failed: Nora already held lab-access",
        ),
        ("approved", Outcome("Running", "progress"), "approved — running"),
        ("approved", Outcome("Retrying at 09:02 UTC: x", "waiting"), "approved — retrying at 09:02 UTC: x"),
        ("rejected", Outcome("Rejected by Bo Approver: No", "stopped", True), "rejected — the run stopped"),
        (
            "rejected",
            Outcome("Rejected by Bo Approver: No — what it did was undone", "stopped", True),
            "rejected — the run stopped and undid what it did",
        ),
        ("approved", None, "approved — the run is no longer kept"),
    ],
)
def test_what_an_approvers_decision_led_to(status: str, outcome: Outcome | None, words: str) -> None:
    assert decided_then(status, outcome) == words


def test_titles_and_triggers_in_names() -> None:
    assert run_title("Onboarding", "Nora Example") == "Onboarding for Nora Example"
    assert run_title(None, None) == "A deleted workflow for a former user"
    assert trigger_words("manual", starter="Ada Admin") == "Started by Ada Admin"
    assert trigger_words("manual", starter="Ada Admin", rerun=True) == "Re-run by Ada Admin"
    assert trigger_words("manual", starter=None) == "Started by a former user"
    assert (
        trigger_words("event", starter=None, event_type="organization.membership.added")
        == "Started because a membership was added"
    )
    assert trigger_words("event", starter=None, event_type="x.y") == "Started because the event x.y"
    assert trigger_words("schedule", starter=None, slot="2026-12-01") == "Started by its schedule (2026-12-01)"
