"""The cockpit from the keyboard, in Chromium against a live server and worker.

Each live part is reached with Tab and left to update several times: focus stays on the same
control — the run timeline's refresh (its Refresh link, a person's link, "Cancel run"), the
editor's builder (moving a step with Enter or Space), the validation panel, bulk progress. State
changes are said once by a polite region outside what is replaced; Escape closes a disclosure;
every tab stop shows a focus ring; a skip link leads to the content.
"""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Locator, Page, expect

from e2e.helpers import FINISH_TIMEOUT, LiveServer, admin_of, in_database, publish, setup_realm, sign_in, subject_id
from e2e.pages import RunsPage, TimelinePage
from e2e.pages.editor import EditorPage
from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.seeding.demo_workflow import approve_demo_request
from engine.workflows.catalog import create_workflow

# Counts the swaps of each region (by id) and the changes of each announcer (by test id).
WATCH = """() => {
  window.swaps = {};
  document.addEventListener('htmx:afterSwap', (e) => {
    const id = e.detail.target && e.detail.target.id;
    if (id) window.swaps[id] = (window.swaps[id] || 0) + 1;
  });
  window.said = {};
  document.querySelectorAll('[data-testid$="-announcer"]').forEach((live) => {
    const name = live.dataset.testid;
    window.said[name] = [];
    const changes = {childList: true, characterData: true, subtree: true};
    new MutationObserver(() => window.said[name].push(live.textContent)).observe(live, changes);
  });
}"""

# Whether the focused element shows a ring (an outline, or a box shadow); each element is marked
# the first time, so coming back to one ends the round.
RING = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return {end: true};
  if (el.dataset.ringChecked) return {end: true};
  el.dataset.ringChecked = '1';
  const s = getComputedStyle(el);
  const outline = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 1;
  const text = (el.textContent || el.value || '').trim().slice(0, 40);
  const what = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' ' + text;
  return {end: false, ok: outline || s.boxShadow !== 'none', what};
}"""


def swaps(page: Page, region: str) -> int:
    count: int = page.evaluate("(id) => window.swaps[id] || 0", region)
    return count


def wait_for_swaps(page: Page, region: str, more: int, timeout_ms: int = 30_000) -> None:
    start = swaps(page, region)
    page.wait_for_function("([id, n]) => (window.swaps[id] || 0) >= n", arg=[region, start + more], timeout=timeout_ms)


def tab_to(page: Page, target: Locator, *, limit: int = 120) -> None:
    """Press Tab (from where focus is) until ``target`` has focus."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if target.evaluate("(el) => el === document.activeElement"):
            return
    raise AssertionError(f"Tab never reached {target}")


def assert_rings(page: Page, *, limit: int = 250) -> None:
    """Every tab stop of the page, from the top, shows a focus ring."""
    page.goto(page.url.split("#")[0])
    page.wait_for_load_state("load")
    missing: list[str] = []
    stops = 0
    for _ in range(limit):
        page.keyboard.press("Tab")
        ring = page.evaluate(RING)
        if ring["end"]:
            break
        stops += 1
        if not ring["ok"]:
            missing.append(ring["what"])
    assert stops > 5, stops
    assert not missing, f"tab stops without a focus ring: {missing}"


def test_the_run_timeline_keeps_focus_and_says_its_state(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "keys-run")
    approver = setup.api.post("/users", json={"email": "bea@example.com", "display_name": "Bea Boss"})
    assert approver.status_code in (200, 201), approver.text
    workflow_id = publish(
        setup,
        "Joiner",
        [
            {"id": "approve", "type": "approval", "approvers": [approver.json()["id"]], "expires_in": "72h"},
            {"id": "done", "type": "end"},
        ],
    )
    started = setup.api.post(f"/workflows/{workflow_id}/runs", json={"subject_id": subject_id(live_server, setup)})
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]
    sign_in(live_server, page, setup)
    timeline = TimelinePage(page, setup.realm, run_id).open()
    timeline.follow_to("awaiting_approval", timeout_ms=FINISH_TIMEOUT)

    # The first Tab reaches the skip link, which leads past the bar to the content.
    page.reload()
    page.evaluate(WATCH)
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to main content")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="← Runs")).to_be_focused()

    # Focus stays on the Refresh link, on a person's link (the second of two alike) and on
    # "Cancel run" while the timeline replaces itself every 2 s.
    region = timeline.timeline
    for control in (
        region.get_by_role("link", name="Refresh"),
        region.get_by_role("link", name="Ada Admin").nth(1),
        region.get_by_text("Cancel run", exact=True),
    ):
        tab_to(page, control)
        wait_for_swaps(page, "run-timeline", 3)
        expect(control).to_be_focused()
    # Enter opens the disclosure, Escape closes it with focus back on its summary; the refresh
    # goes on, focus stays.
    cancel = region.get_by_text("Cancel run", exact=True)
    page.keyboard.press("Enter")
    expect(timeline.cancel_reason).to_be_visible()
    page.keyboard.press("Tab")
    expect(timeline.cancel_reason).to_be_focused()
    page.keyboard.press("Escape")
    expect(timeline.cancel_reason).to_be_hidden()
    expect(cancel).to_be_focused()
    wait_for_swaps(page, "run-timeline", 2)
    expect(cancel).to_be_focused()
    # Nothing was said while the state stayed the same.
    assert page.evaluate("() => window.said['run-announcer']") == []

    # The approver approves: the run succeeds, which is said once in words; "Cancel run" is gone
    # and focus goes to the state's heading, not to the page.
    assert in_database(live_server, lambda session: approve_demo_request(session, run_id))
    timeline.follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)
    announcer = page.get_by_test_id("run-announcer")
    expect(announcer).to_have_text("Run succeeded.")
    expect(announcer).to_have_attribute("aria-live", "polite")
    expect(page.locator("#run-summary-title")).to_be_focused()
    assert_rings(page)


MOVABLE = {
    "schema_version": 1,
    "triggers": [{"type": "manual"}],
    "steps": [
        {"id": "first", "type": "wait", "duration": "1h"},
        {"id": "second", "type": "wait", "duration": "2h"},
        {"id": "third", "type": "wait", "duration": "3h"},
        {"id": "done", "type": "end"},
    ],
}


def test_the_editor_keeps_focus_and_says_its_verdict_once(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "keys-editor")

    async def workflow(session: Any) -> str:
        admin = await admin_of(session, setup.realm, setup.admin_email)
        actor = Actor(type="user", id=admin.id, realm_id=admin.realm_id)
        made, _ = await create_workflow(session, actor, name="Movable", definition=MOVABLE, has_definition=True)
        return str(made.id)

    workflow_id = in_database(live_server, workflow)
    sign_in(live_server, page, setup)
    editor = EditorPage(page, setup.realm).open(workflow_id)
    page.evaluate(WATCH)
    assert editor.definition.get_attribute("aria-invalid") is None

    def order() -> list[str]:
        return [s["id"] for s in json.loads(editor.definition.input_value())["steps"]]

    # Moving a step with Enter, then with Space: focus follows the step it moved.
    editor.definition.focus()
    down = editor.builder.get_by_role("button", name="Move step 1 down")
    tab_to(page, down)
    page.keyboard.press("Enter")
    expect(editor.builder.get_by_role("button", name="Move step 2 down")).to_be_focused()
    assert order() == ["second", "first", "third", "done"]
    page.keyboard.press(" ")
    expect(editor.builder.get_by_role("button", name="Move step 3 down")).to_be_focused()
    assert order() == ["second", "third", "first", "done"]
    page.keyboard.press("Shift+Tab")
    expect(editor.builder.get_by_role("button", name="Move step 3 up")).to_be_focused()
    page.keyboard.press("Enter")
    expect(editor.builder.get_by_role("button", name="Move step 2 up")).to_be_focused()
    assert order() == ["second", "first", "third", "done"]
    editor.expect_valid()
    assert page.evaluate("() => window.said['verdict-announcer']") == []

    # Text that is not JSON: the verdict is said once, the text is marked invalid.
    broken = editor.definition.input_value().replace('"wait"', '"wait', 1)
    editor.type_definition(broken)
    announcer = page.get_by_test_id("verdict-announcer")
    expect(announcer).to_contain_text("problem")
    expect(editor.definition).to_have_attribute("aria-invalid", "true")

    # Focus on the panel's first issue stays there through several checks of the same verdict,
    # and nothing more is said.
    editor.definition.focus()
    issue = editor.feedback.get_by_role("link", name="line").first
    tab_to(page, issue)
    for _ in range(3):
        page.evaluate(
            "() => { const t = document.getElementById('definition-text'); t.value += ' '; htmx.trigger(t, 'keyup'); }"
        )
        wait_for_swaps(page, "editor-feedback", 1)
        expect(issue).to_be_focused()
    assert len(page.evaluate("() => window.said['verdict-announcer']")) == 1

    # Fixed: said once more, no longer marked invalid.
    editor.type_definition(json.dumps(MOVABLE, indent=2))
    expect(announcer).to_contain_text("Valid")
    expect(editor.definition).not_to_have_attribute("aria-invalid", "true")
    assert len(page.evaluate("() => window.said['verdict-announcer']")) == 2
    assert_rings(page)


# Holds each next part of a bulk action for a moment, so a person (and this test) can reach its
# Continue button between parts.
SLOW_PARTS = """() => document.addEventListener('htmx:confirm', (e) => {
  if (!e.target.closest('#bulk-progress')) return;
  e.preventDefault();
  setTimeout(() => e.detail.issueRequest(true), 1500);
})"""


def test_bulk_progress_keeps_focus(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "keys-bulk")
    workflow_id = publish(setup, "Paused", [{"id": "done", "type": "end"}])

    async def paused_runs(session: Any) -> None:
        admin = await admin_of(session, setup.realm, setup.admin_email)
        actor = Actor(type="user", id=admin.id, realm_id=admin.realm_id)
        subject = await user_by_email(session, admin.realm_id, setup.subject_email)
        assert subject is not None
        for _ in range(120):  # three parts of at most 50
            await runs.start_manual_run(session, actor, workflow_id, subject_id=subject.id, organization_id=None)
        await run_controls.set_workflow_enabled(session, actor, workflow_id, False)  # they stay pending

    in_database(live_server, paused_runs)
    sign_in(live_server, page, setup)
    RunsPage(page, setup.realm).open(workflow_id=workflow_id)
    page.evaluate(WATCH)
    page.evaluate(SLOW_PARTS)
    bulk = page.get_by_test_id("bulk")
    summary = bulk.get_by_text("Act on several runs…")
    tab_to(page, summary)
    page.keyboard.press("Enter")
    page.get_by_test_id("scope-filter").check()
    page.get_by_test_id("action-cancel").check()
    page.get_by_test_id("bulk-submit").focus()
    page.keyboard.press("Enter")
    progress = page.get_by_test_id("bulk-progress")
    expect(progress.get_by_test_id("bulk-count")).to_have_text("50 of 120")
    go_on = progress.get_by_role("button", name="Continue")
    tab_to(page, go_on, limit=3)
    wait_for_swaps(page, "bulk-progress", 1)
    expect(progress.get_by_test_id("bulk-count")).to_have_text("100 of 120")
    expect(go_on).to_be_focused()
    # Finished: Continue is gone, focus is on what comes next in the region.
    expect(progress).to_have_attribute("data-finished", "true")
    expect(progress.get_by_role("link", name="Refresh the list")).to_be_focused()
    # Escape closes the disclosure it is in, focus back on its summary.
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("bulk-submit")).to_be_hidden()
    expect(summary).to_be_focused()
