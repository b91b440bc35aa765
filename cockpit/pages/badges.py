"""State badges: every state a run, a step, an attempt, an approval, a compensation, a webhook
delivery or a notice can be in, and the tone its badge is shown in. The one place that decides a
badge's colour: templates render ``ui.badge(kind, state)`` (``templates/partials/_macros.html``),
the stylesheet colours ``.badge.tone-<tone>``.

Tones: ``ok`` green (succeeded, approved, done), ``progress`` blue (in progress), ``waiting``
amber (waiting for time or people), ``bad`` red (failed, rejected, expired), ``undone`` violet
(compensated), ``stopped`` slate with a border (cancelled), ``quiet`` grey (not reached, nothing
needed). A state missing from its kind's map is ``unknown``, which no state shown should be.
"""

from __future__ import annotations

from typing import Final

TONES: Final = ("ok", "progress", "waiting", "bad", "undone", "stopped", "quiet")

BADGES: Final[dict[str, dict[str, str]]] = {
    # engine/runs/states.py RUN_STATES
    "run": {
        "pending": "progress",
        "running": "progress",
        "compensating": "progress",
        "waiting": "waiting",
        "awaiting_approval": "waiting",
        "succeeded": "ok",
        "failed": "bad",
        "compensation_failed": "bad",
        "compensated": "undone",
        "cancelled": "stopped",
    },
    # The timeline's word for each step of a run.
    "step": {
        "not_reached": "quiet",
        "up_next": "progress",
        "in_progress": "progress",
        "retrying": "waiting",
        "waiting": "waiting",
        "awaiting_approval": "waiting",
        "succeeded": "ok",
        "failed": "bad",
        "cancelled": "stopped",
    },
    # engine/runs/preview.py: what a previewed step would do.
    "preview": {"would_succeed": "ok", "would_fail": "bad", "not_reached": "quiet"},
    # engine/runs/states.py ATTEMPT_*
    "attempt": {"started": "progress", "succeeded": "ok", "failed": "bad"},
    # engine/runs/approval_models.py APPROVAL_STATUSES
    "approval": {
        "pending": "waiting",
        "approved": "ok",
        "rejected": "bad",
        "expired": "bad",
        "cancelled": "stopped",
    },
    # engine/runs/states.py COMP_*: what became of undoing a succeeded step.
    "compensation": {
        "pending": "waiting",
        "done": "ok",
        "not_needed": "quiet",
        "impossible": "bad",
        "failed": "bad",
    },
    # engine/endpoints/deliveries.py STATES
    "delivery": {"pending": "waiting", "succeeded": "ok", "failed": "bad"},
    # engine/runs/approval_models.py NOTICE_STATES
    "notice": {"queued": "waiting", "sent": "ok", "failed": "bad", "not_configured": "quiet"},
}


def badge_tone(kind: str, state: str | None) -> str:
    """The tone of ``state`` (spaces or underscores alike) among ``kind``'s states, or ``unknown``."""
    key = (state or "").strip().replace(" ", "_").replace("-", "_")
    return BADGES.get(kind, {}).get(key, "unknown")
