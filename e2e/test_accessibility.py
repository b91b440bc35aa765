"""Accessibility: axe-core (WCAG 2.1 A and AA, and best practices) over every page and state the
layout test visits, in Chromium, with the demo realm's data: the pages at both widths, forms
showing their errors, every disclosure open, the editor with text that is not JSON, a run that
still waits, and the approver's pages. Any violation fails the test, naming the rule and the nodes.

axe-core is a test asset only (``e2e/vendor/axe.min.js``, from the npm registry, its licence
header kept): it is injected into the page under test and never served by the cockpit. The
cockpit's Content-Security-Policy forbids inline script, so the contexts here bypass it.

axe's "needs review" contrast items (text over a colour it cannot compute) are written with a
screenshot of each to ``test-results/axe/`` for a reviewer's eye; they do not fail the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from e2e.demo import LAYOUT_ENV, demo_pages
from e2e.demo import demo as demo  # fixtures
from e2e.demo import receiver as receiver
from e2e.helpers import LiveServer, in_database, sign_in_url
from e2e.pages import sign_in_with_link
from engine.platform.config import PROJECT_ROOT
from engine.seeding.demo_realm import DEMO_ADMIN_EMAIL, DEMO_SLUG
from engine.seeding.demo_workflow import DEMO_APPROVER

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
REPORT = PROJECT_ROOT / "test-results" / "axe"

RUN_AXE = """async (tags) => {
  const options = {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations', 'incomplete']};
  const result = await axe.run(document, options);
  const nodes = (rule) => rule.nodes.map((n) => ({target: n.target.join(' '), html: n.html.slice(0, 160),
    summary: (n.failureSummary || '').slice(0, 300)}));
  return {
    violations: result.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help, nodes: nodes(v)})),
    review: result.incomplete.filter((v) => v.id === 'color-contrast').flatMap(nodes),
  };
}"""


@pytest.fixture
def live_server_env() -> dict[str, str]:
    return LAYOUT_ENV


def audit(page: Page, name: str, found: dict[str, list[str]], review: list[dict[str, Any]]) -> None:
    """axe over the page as it is now: its violations under ``name``, its contrast items to review."""
    page.wait_for_load_state("load")
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    result = page.evaluate(RUN_AXE, TAGS)
    for violation in result["violations"]:
        found.setdefault(name, []).append(
            f"{violation['id']} ({violation['impact']}): {violation['help']}\n"
            + "\n".join(f"    {n['target']}  {n['html']}\n      {n['summary']}" for n in violation["nodes"])
        )
    REPORT.mkdir(parents=True, exist_ok=True)  # (another browser session may have cleared test-results)
    for index, node in enumerate(result["review"]):
        shot = REPORT / f"review-{name}-{index}.png"
        try:
            page.locator(node["target"]).first.screenshot(path=str(shot), timeout=5_000)
        except Exception:  # an element axe names may be hidden or gone: the report still lists it
            shot = None  # type: ignore[assignment]
        review.append({"state": name, **node, "screenshot": str(shot) if shot else None})


def submit_unchecked(page: Page, button: str) -> None:
    """Press a form's submit button with the browser's own checks off, so the server answers the errors."""
    page.evaluate("() => document.querySelectorAll('form').forEach((f) => { f.noValidate = true; })")
    page.get_by_role("button", name=button, exact=True).click()
    expect(page.locator("[role=alert], .field-error").first).to_be_visible()


def waiting_run(live_server: LiveServer) -> str:
    """The demo's second run, which waits for the approver."""
    from sqlalchemy import text

    async def find(session: Any) -> str:
        row = (
            await session.execute(text("SELECT id FROM workflow_runs WHERE state = 'awaiting_approval' LIMIT 1"))
        ).one()
        return str(row[0])

    return in_database(live_server, find)


@pytest.fixture
def axe_context(browser: Browser, live_server: LiveServer) -> Iterator[Callable[[str, int], BrowserContext]]:
    contexts: list[BrowserContext] = []

    def make(email: str, width: int = 1400) -> BrowserContext:
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": width, "height": 900}, bypass_csp=True
        )
        contexts.append(context)
        page = context.new_page()
        sign_in_with_link(page, sign_in_url(live_server, DEMO_SLUG, email), DEMO_SLUG)
        return context

    yield make
    for context in contexts:
        context.close()


def test_no_axe_violation_on_any_page_or_state(
    live_server: LiveServer, demo: dict[str, str], axe_context: Callable[[str, int], BrowserContext]
) -> None:
    REPORT.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[str]] = {}
    review: list[dict[str, Any]] = []
    r = f"/realms/{DEMO_SLUG}"
    waiting = waiting_run(live_server)

    # Every page the layout test visits, at its wide and its narrow width.
    admin = axe_context(DEMO_ADMIN_EMAIL, 1400)
    page = admin.pages[0]
    for width in (1400, 800):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in [*demo_pages(demo), ("timeline-waiting", f"{r}/runs/{waiting}")]:
            response = page.goto(path)
            assert response is not None and response.status == 200, (path, response and response.status)
            audit(page, f"{name}-{width}", found, review)
    # The narrow window's menu, open.
    page.goto(f"{r}/")
    page.locator("details.nav-menu > summary").click()
    expect(page.locator("details.nav-menu .menu-links")).to_be_visible()
    audit(page, "menu-open-800", found, review)
    page.set_viewport_size({"width": 1400, "height": 900})

    # Disclosures open: "More", a run's "Cancel run", bulk actions, an audit entry's details, a notice.
    page.goto(f"{r}/")
    page.get_by_test_id("nav-more").locator("summary").click()
    audit(page, "more-open", found, review)
    page.goto(f"{r}/runs/{waiting}")
    page.get_by_test_id("cancel-run").locator("summary").click()
    expect(page.get_by_label("Reason")).to_be_visible()
    audit(page, "cancel-run-open", found, review)
    page.goto(f"{r}/runs")
    page.get_by_text("Act on several runs…").click()
    audit(page, "bulk-open", found, review)
    page.get_by_test_id("action-cancel").check()
    page.get_by_test_id("bulk-submit").click()  # nothing ticked: refused, with the reason
    expect(page.get_by_test_id("bulk-progress")).to_contain_text("Tick the runs")
    audit(page, "bulk-refused", found, review)
    page.goto(f"{r}/audit")
    page.locator("table.audit details > summary").first.click()
    audit(page, "audit-details-open", found, review)
    page.goto(f"{r}/notices")
    if page.locator("table details > summary").count():
        page.locator("table details > summary").first.click()
        audit(page, "notice-open", found, review)

    # Forms showing their errors.
    page.goto(f"{r}/workflows/new")
    submit_unchecked(page, "Create workflow")
    audit(page, "new-workflow-errors", found, review)
    page.goto(f"{r}/workflows/new?template=onboarding")
    audit(page, "new-workflow-from-template", found, review)
    page.goto(f"{r}/workflows/{demo['workflow']}/runs/start")
    submit_unchecked(page, "Start run")
    audit(page, "start-run-errors", found, review)
    page.goto(f"{r}/workflows/{demo['workflow']}/runs/start-many")
    submit_unchecked(page, "Preview for each person")  # nobody chosen: refused, with the reason
    expect(page.get_by_test_id("people-error")).to_be_visible()
    audit(page, "start-many-refused", found, review)
    page.locator('input[name="picked"]').nth(1).check()
    page.get_by_role("button", name="Preview for each person").click()
    expect(page.get_by_test_id("person-preview")).to_have_count(1)
    audit(page, "start-many-preview", found, review)
    page.goto(f"{r}/users")
    submit_unchecked(page, "Create user")
    audit(page, "new-user-errors", found, review)
    page.goto(f"{r}/tokens")
    submit_unchecked(page, "Create token")
    audit(page, "new-token-errors", found, review)
    page.goto(f"{r}/webhooks")
    submit_unchecked(page, "Create subscription")
    audit(page, "new-webhook-errors", found, review)

    # The editor: text that is not JSON, then JSON the contract refuses.
    page.goto(f"{r}/workflows/{demo['workflow']}/edit")
    page.wait_for_function("() => window.cockpitEditor !== undefined")
    definition = page.locator("#definition-text")
    definition.fill('{"schema_version": 1, "steps": [')
    definition.press("End")
    expect(page.locator("#editor-feedback")).to_contain_text("problem")
    audit(page, "editor-not-json", found, review)
    definition.fill(json.dumps({"schema_version": 1, "triggers": [], "steps": [{"id": "Bad id", "type": "wait"}]}))
    definition.press("End")
    expect(page.get_by_test_id("builder-step")).to_have_count(1)
    expect(page.locator("#editor-feedback")).to_contain_text("problem")
    audit(page, "editor-invalid", found, review)
    page.goto(f"{r}/workflows/{demo['workflow']}/edit?template=offboarding")
    page.wait_for_function("() => window.cockpitEditor !== undefined")
    expect(page.locator("#editor-feedback")).to_contain_text("problem")
    audit(page, "editor-from-template", found, review)

    # The approver's pages: the request waiting for them, deciding it, handing it on.
    approver = axe_context(DEMO_APPROVER, 1400)
    page = approver.pages[0]
    audit(page, "approver-home", found, review)
    page.goto(f"{r}/approvals")
    card = page.get_by_test_id("approval-card").first
    expect(card).to_be_visible()
    audit(page, "approver-approvals", found, review)
    card.get_by_role("link", name="Decide").click()
    expect(page).to_have_url(re.compile(r"/approvals/\w+"))
    audit(page, "approver-decide", found, review)
    page.locator("#delegate-email").fill("nobody@demo.example")
    page.get_by_role("button", name="Hand on").click()
    expect(page.locator("[role=alert], .field-error").first).to_be_visible()
    audit(page, "approver-hand-on-error", found, review)
    page.goto(f"{r}/approvals/decided")
    audit(page, "approver-decided", found, review)

    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / "needs-review.json").write_text(json.dumps(review, indent=2))
    report = "\n".join(f"{state}:\n  " + "\n  ".join(items) for state, items in found.items())
    assert not found, f"axe violations in {len(found)} page states:\n{report}"
