"""Every state a page shows as a badge has a tone, so no badge falls through to plain grey.

The states come from where the engine defines them (and, for the timeline's words for steps,
from the page code that chooses them), so a state added later without a tone fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest

from cockpit.pages.badges import BADGES, TONES, badge_tone
from engine.endpoints import deliveries
from engine.platform.config import PROJECT_ROOT
from engine.runs import preview, states
from engine.runs.approval_models import APPROVAL_STATUSES, NOTICE_STATES


def step_words() -> set[str]:
    """The words the run timeline gives a step (``status`` where its step lines are built)."""
    words: set[str] = set()
    for path in (PROJECT_ROOT / "cockpit" / "pages").rglob("*.py"):
        source = path.read_text()
        if "StepLine(" in source:
            words |= set(re.findall(r'\bline\.status\s*=\s*"([a-z ]+)"', source))
            for built in source.split("StepLine(")[1:]:  # the first status a step line is built with
                words |= set(re.findall(r'\bstatus\s*=\s*"([a-z ]+)"', built[:800])[:1])
    assert {"not reached", "succeeded", "failed"} <= words, "the timeline's step words were not found"
    return words


SHOWN: dict[str, set[str]] = {
    "run": set(states.RUN_STATES),
    "attempt": {states.ATTEMPT_STARTED, states.ATTEMPT_SUCCEEDED, states.ATTEMPT_FAILED},
    "approval": set(APPROVAL_STATUSES),
    "compensation": {
        states.COMP_PENDING,
        states.COMP_DONE,
        states.COMP_NOT_NEEDED,
        states.COMP_IMPOSSIBLE,
        states.COMP_FAILED,
    },
    "delivery": set(deliveries.STATES),
    "notice": set(NOTICE_STATES),
    "preview": {preview.WOULD_SUCCEED, preview.WOULD_FAIL, preview.NOT_REACHED},
}


@pytest.mark.parametrize("kind", [*SHOWN, "step"])
def test_every_state_of_every_kind_has_a_tone(kind: str) -> None:
    shown = step_words() if kind == "step" else SHOWN[kind]
    missing = sorted(s for s in shown if badge_tone(kind, s) == "unknown")
    assert not missing, f"{kind} states without a badge tone: {missing}"
    assert {badge_tone(kind, s) for s in shown} <= set(TONES)


def test_the_colours_say_what_happened() -> None:
    assert badge_tone("approval", "approved") == badge_tone("run", "succeeded") == "ok"
    assert badge_tone("approval", "rejected") == badge_tone("approval", "expired") == "bad"
    assert badge_tone("approval", "pending") == badge_tone("run", "awaiting_approval") == "waiting"
    assert badge_tone("run", "running") == badge_tone("step", "in progress") == "progress"
    assert badge_tone("run", "failed") == badge_tone("run", "compensation_failed") == "bad"
    # Compensated and cancelled each look different from each other and from failed.
    assert len({badge_tone("run", s) for s in ("failed", "compensated", "cancelled")}) == 3
    assert badge_tone("delivery", "failed") == "bad" and badge_tone("delivery", "succeeded") == "ok"
    assert badge_tone("run", "no_such_state") == badge_tone("no_such_kind", "succeeded") == "unknown"


def test_every_tone_is_coloured_by_the_stylesheet() -> None:
    css = (PROJECT_ROOT / "static" / "css" / "app.css").read_text()
    for tone in TONES:
        assert re.search(rf"\.badge\.tone-{tone}\s*\{{[^}}]*background:", css), tone
    assert set().union(*(set(m.values()) for m in BADGES.values())) == set(TONES), "a tone no state uses"


def test_the_badge_macro_renders_the_tone_the_state_and_a_label(tmp_path: Path) -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(PROJECT_ROOT / "templates"), autoescape=True)
    env.globals["badge_tone"] = badge_tone
    env.globals["ids_in"] = lambda _v: []
    page = env.from_string(
        '{% import "partials/_macros.html" as ui %}'
        "{{ ui.badge('approval', 'approved', testid='approval-status') }}|"
        "{{ ui.badge('step', 'awaiting approval', label='awaiting approval') }}|"
        "{{ ui.badge('run', 'compensation_failed') }}"
    ).render()
    approved, waiting, failed = page.split("|")
    assert approved == (
        '<span class="badge tone-ok" data-state="approved" data-testid="approval-status">approved</span>'
    )
    assert 'class="badge tone-waiting"' in waiting and ">awaiting approval<" in waiting
    assert 'class="badge tone-bad"' in failed and ">compensation failed<" in failed
