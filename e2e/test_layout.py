"""Every main page at 1400 and 800 px, with the demo realm's data: nothing wider than the window.

Screenshots of each page at each width land in ``test-results/screens/`` (ignored by git) for a
reviewer to open. A page whose document is wider than its viewport fails, naming the widest
element, so a table that spills out of its card is caught wherever it appears.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from e2e.demo import LAYOUT_ENV, demo_pages
from e2e.demo import demo as demo  # fixtures
from e2e.demo import receiver as receiver
from e2e.helpers import LiveServer, in_database, sign_in_url
from e2e.pages import sign_in_with_link
from engine.platform.config import PROJECT_ROOT
from engine.seeding.demo_realm import DEMO_ADMIN_EMAIL, DEMO_SLUG, seed_demo

SCREENS = PROJECT_ROOT / "test-results" / "screens"
WIDTHS = (1400, 800)

# What is wider than the window, if anything: the element that sticks out furthest.
OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const doc = document.documentElement.scrollWidth;
  let worst = null;
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || getComputedStyle(el).visibility === 'hidden') continue;
    if (el.closest('.table-scroll, pre, .code-editor')) continue;
    if (r.right > width + 1 && (!worst || r.right > worst.right)) {
      const text = (el.textContent || '').trim().slice(0, 60);
      worst = {right: Math.round(r.right), tag: el.tagName.toLowerCase(), cls: el.className, text};
    }
  }
  return {width, doc, worst};
}"""

# Every table wider than the box it sits in (a table that scrolls sideways, its scrollbar out of
# sight until someone tries): its id or class, its width and the box's.
TABLES_WIDER_THAN_THEIR_BOX = """() => {
  const out = [];
  for (const table of document.querySelectorAll('main table')) {
    const r = table.getBoundingClientRect();
    if (r.width === 0) continue;
    const box = table.parentElement;
    if (table.scrollWidth > box.clientWidth + 1 || r.width > box.clientWidth + 1) {
      out.push({table: table.id || table.className || table.closest('[id]')?.id || '?',
                width: Math.round(Math.max(r.width, table.scrollWidth)), box: box.clientWidth});
    }
  }
  return out;
}"""

# The essential columns of the runs list, which stay in view at every width; the rest fold into the
# row beneath them on a narrow window.
RUNS_ESSENTIAL = ("Subject", "Workflow", "State", "Started")
COLUMN_SHOWN = """(th) => {
  const r = th.getBoundingClientRect();
  const box = th.closest('table').parentElement.getBoundingClientRect();
  return getComputedStyle(th).display !== 'none' && r.width > 0 && r.left >= box.left - 1 && r.right <= box.right + 1;
}"""

# The live worker delivers the demo's events to a receiver on 127.0.0.1 (a private address: the
# operator allows it here, the subscription asks for it), and retries a failed try after 1 s.


@pytest.fixture
def live_server_env() -> dict[str, str]:
    return LAYOUT_ENV


def shoot(page: Page, path: Path) -> None:
    """A full-page screenshot; on a loaded machine a long page may take a while to capture."""
    try:
        page.screenshot(path=str(path), full_page=True, caret="initial", timeout=60_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(path), caret="initial", timeout=60_000)  # the window's part at least


def test_every_main_page_fits_its_window_at_1400_and_800_px(
    live_server: LiveServer, browser: Browser, demo: dict[str, str]
) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    link = sign_in_url(live_server, DEMO_SLUG, DEMO_ADMIN_EMAIL)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        sign_in_with_link(page, link, DEMO_SLUG)
        too_wide: list[str] = []
        uncoloured: list[str] = []
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            for name, path in demo_pages(demo):
                response = page.goto(path)
                assert response is not None and response.status == 200, (path, response and response.status)
                page.wait_for_load_state("load")
                shoot(page, SCREENS / f"{name}-{width}.png")
                measured = page.evaluate(OVERFLOW)
                if measured["doc"] > measured["width"]:
                    too_wide.append(f"{name} at {width} px: document {measured['doc']} px, widest {measured['worst']}")
                for table in page.evaluate(TABLES_WIDER_THAN_THEIR_BOX):
                    too_wide.append(f"{name} at {width} px: table {table}")
                if width == WIDTHS[0]:  # every state badge has a colour of its own (no grey fall-through)
                    for state in page.locator(".badge.tone-unknown").evaluate_all(
                        "els => els.map(e => e.dataset.state)"
                    ):
                        uncoloured.append(f"{name}: {state}")
        assert not too_wide, "\n".join(too_wide)
        assert not uncoloured, uncoloured
        # The delivery log shows real deliveries: signed, one retried after the receiver's 503.
        page.goto(f"/realms/{DEMO_SLUG}/webhooks/{demo['webhook']}/deliveries")
        states = page.get_by_test_id("delivery-state")
        expect(states.first).to_be_visible()
        assert states.count() >= 3 and set(states.all_inner_texts()) == {"succeeded"}
    finally:
        context.close()


def test_at_800_px_the_navigation_is_a_menu(live_server: LiveServer, browser: Browser, demo: dict[str, str]) -> None:
    link = sign_in_url(live_server, DEMO_SLUG, DEMO_ADMIN_EMAIL)
    context = browser.new_context(base_url=live_server.url, viewport={"width": 800, "height": 900})
    try:
        page = context.new_page()
        sign_in_with_link(page, link, DEMO_SLUG)
        expect(page.get_by_role("navigation", name="Main")).to_be_hidden()
        menu = page.locator("details.nav-menu")
        expect(menu.get_by_role("link", name="Runs")).to_be_hidden()
        menu.locator("summary").click()
        menu.get_by_role("link", name="Runs").click()
        expect(page).to_have_url(re.compile(r"/runs$"))
        expect(page.get_by_role("heading", level=1)).to_have_text("Runs")
        # At 800 px the runs list keeps its essential columns in view; the others fold into the row.
        for column in RUNS_ESSENTIAL:
            assert page.get_by_role("columnheader", name=column, exact=True).evaluate(COLUMN_SHOWN), column
        folded = page.get_by_test_id("run-row").first.get_by_test_id("run-folded")
        expect(folded).to_be_visible()
        expect(folded).to_contain_text("Finished")
        # The runs list shows every column at 1400 px, none cut, its badges coloured by state.
        page.set_viewport_size({"width": 1400, "height": 900})
        expect(page.get_by_role("navigation", name="Main")).to_be_visible()
        expect(page.get_by_test_id("run-row").first.get_by_test_id("run-folded")).to_be_hidden()
        for column in ("Run", *RUNS_ESSENTIAL, "Current step", "Outcome", "Finished", "Duration"):
            header = page.get_by_role("columnheader", name=column, exact=True)
            expect(header).to_be_in_viewport()
            assert header.evaluate(COLUMN_SHOWN), column
        assert page.evaluate(TABLES_WIDER_THAN_THEIR_BOX) == []
        succeeded = page.get_by_test_id("run-state").filter(has_text="succeeded").first
        cancelled = page.get_by_test_id("run-state").filter(has_text="cancelled").first
        colour = "(el) => getComputedStyle(el).backgroundColor"
        assert succeeded.evaluate(colour) != cancelled.evaluate(colour)
        # Relative times carry the exact time on hover.
        when = page.locator("time[title]").first
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", when.get_attribute("title") or "")
    finally:
        context.close()


# The top bar's boxes: its children, the bar's links (and the "More" summary) and their rows.
NAV_BOXES = """() => {
  const box = (el) => {
    const r = el.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height};
  };
  const bar = document.querySelector('header.topbar');
  const nav = bar.querySelector('nav.realm-nav');
  const items = [...nav.querySelectorAll(':scope > a, :scope > details > summary')];
  return {
    bar: box(bar), nav: box(nav), brand: box(bar.querySelector('.brand')), who: box(bar.querySelector('.who')),
    items: items.map((el) => ({text: el.textContent.trim(), ...box(el)})),
    navScroll: nav.scrollWidth, navClient: nav.clientWidth,
    links: nav.querySelectorAll('a').length, menuLinks: bar.querySelectorAll('details.nav-menu a').length,
  };
}"""


@pytest.mark.parametrize("width", [1280, 1400])
def test_the_navigation_is_one_row_with_every_link(live_server: LiveServer, browser: Browser, width: int) -> None:
    in_database(live_server, seed_demo)
    link = sign_in_url(live_server, DEMO_SLUG, DEMO_ADMIN_EMAIL)
    context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        sign_in_with_link(page, link, DEMO_SLUG)
        boxes = page.evaluate(NAV_BOXES)
        items = boxes["items"]
        assert len(items) >= 8, items
        tallest = max(i["height"] for i in items)
        # One row: every link on the same line, the bar no taller than its tallest child.
        assert max(i["top"] for i in items) - min(i["top"] for i in items) <= 2, items
        assert boxes["nav"]["height"] <= tallest * 1.5, (boxes["nav"], tallest)
        parts = [boxes["brand"], boxes["nav"], boxes["who"]]
        assert boxes["bar"]["height"] <= max(p["height"] for p in parts) + 30, boxes
        for part in parts:  # brand, links and who share the row
            assert part["top"] < boxes["nav"]["bottom"] and part["bottom"] > boxes["nav"]["top"], boxes
        # Nothing cut or covered: the links fit their nav, which ends before who is signed in.
        assert boxes["navScroll"] <= boxes["navClient"] + 1, boxes
        assert max(i["right"] for i in items) <= boxes["who"]["left"], boxes
        assert boxes["brand"]["right"] <= min(i["left"] for i in items), boxes
        # Every link the narrow menu has is on the bar or in its "More" menu.
        assert boxes["links"] == boxes["menuLinks"], boxes
        main = page.get_by_role("navigation", name="Main")
        for name in ("Home", "Workflows", "Runs", "Users", "Audit log"):
            expect(main.get_by_role("link", name=name, exact=True)).to_be_visible()

        # "More" works from the keyboard: focus, Enter opens it, Tab reaches its links, Enter follows.
        more = page.get_by_test_id("nav-more")
        # (Service principals: the longest label, which the summary then shows.)
        chosen = more.get_by_role("link", name="Service principals", exact=True)
        expect(chosen).to_be_hidden()
        more.locator("summary").focus()
        page.keyboard.press("Enter")
        expect(chosen).to_be_visible()
        page.keyboard.press("Escape")
        expect(chosen).to_be_hidden()
        expect(more.locator("summary")).to_be_focused()
        page.keyboard.press("Enter")
        chosen.focus()
        page.keyboard.press("Enter")
        expect(page).to_have_url(re.compile(r"/service-principals$"))
        expect(page.get_by_role("heading", level=1)).to_contain_text("Service principals")
        # The page opened from "More" is named on the bar, which is still one row.
        expect(page.get_by_test_id("nav-more").locator("summary")).to_contain_text("Service principals")
        boxes = page.evaluate(NAV_BOXES)
        assert max(i["top"] for i in boxes["items"]) - min(i["top"] for i in boxes["items"]) <= 2, boxes
        assert boxes["navScroll"] <= boxes["navClient"] + 1, boxes
    finally:
        context.close()
