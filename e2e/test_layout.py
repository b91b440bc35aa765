"""Every main page at 1400 and 800 px, with the demo realm's data: nothing wider than the window.

Screenshots of each page at each width land in ``test-results/screens/`` (ignored by git) for a
reviewer to open. A page whose document is wider than its viewport fails, naming the widest
element, so a table that spills out of its card is caught wherever it appears.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from e2e.conftest import LiveServer
from e2e.helpers import sign_in_url
from e2e.pages import sign_in_with_link
from e2e.test_runs import in_database
from engine.directory import principals, webhooks
from engine.directory.audit import Actor
from engine.directory.seed import DEMO_ADMIN_EMAIL, DEMO_SLUG, seed_demo
from engine.platform.config import PROJECT_ROOT
from engine.runs import service as runs
from engine.runs.demo import approve_demo_request, seed_demo_workflow
from engine.workflows import service as workflows
from testing.processes import cockpit_env
from testing.receiver import Receiver

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
LAYOUT_ENV = {"COCKPIT_ALLOW_PRIVATE_EGRESS": "true", "COCKPIT_DELIVERY_BACKOFF_MS": "1000"}


@pytest.fixture
def live_server_env() -> dict[str, str]:
    return LAYOUT_ENV


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook endpoint that refuses its second request once (503) and then accepts everything."""
    answers = iter([200, 503])
    r = Receiver(respond=lambda _r: next(answers, 200)).start()
    try:
        yield r
    finally:
        r.stop()


def _demo_with(receiver: Receiver) -> Any:
    async def work(session: Any) -> dict[str, str]:
        return await _demo(session, receiver)

    return work


async def _demo(session: Any, receiver: Receiver) -> dict[str, str]:
    """The demo realm, plus a run that failed and one that was cancelled: every state to look at;
    a webhook subscription that receives the realm's events, and a service principal."""
    demo = await seed_demo(session)
    admin = Actor(type="user", id=demo.admin.id, realm_id=demo.realm.id)
    operator_key = cockpit_env("", Path("."))["COCKPIT_SECRET_KEY"]
    subscription, secret = await webhooks.create_subscription(
        session, admin, operator_key, destination=receiver.url, allow_private_network=True
    )
    receiver.secrets.append(secret)
    robot = await principals.create_service_principal(
        session, admin, name="HR sync", description="Sends joiners and leavers from the HR system.", authority=None
    )
    workflow_id, run_ids = await seed_demo_workflow(session, demo)
    draft, _ = await workflows.create_workflow(
        session,
        admin,
        name="Contractor offboarding",
        description="Ends a contractor's access when their engagement ends. Not published yet.",
        definition={"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]},
        has_definition=True,
        requires_approval=False,
    )
    cancelled = await runs.start_manual_run(
        session, admin, workflow_id, subject_id=demo.users["grace@demo.example"].id, organization_id=None
    )
    await runs.cancel_run(session, admin, cancelled.id, reason="Started for the wrong person")
    organization = next(iter(demo.organizations.values()))
    group = next(iter(demo.groups.values()))
    return {
        "workflow": workflow_id,
        "draft": draft.id,
        "run": run_ids[0],
        "cancelled": cancelled.id,
        "user": demo.users["margaret@demo.example"].id,
        "webhook": subscription.id,
        "service_principal": robot.id,
        "organization": organization.id,
        "group": group.id,
        "group_organization": group.organization_id,
        "role": next(iter(demo.roles.values())).id,
    }


def _wait_finished(live_server: LiveServer, run_ids: list[str], timeout_s: float = 60) -> None:
    from sqlalchemy import text

    async def states(session: Any) -> list[str]:
        rows = await session.execute(text("SELECT state FROM workflow_runs WHERE id = ANY(:ids)"), {"ids": run_ids})
        return [r[0] for r in rows]

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = in_database(live_server, states)
        if found and all(
            s in {"succeeded", "cancelled", "compensated", "failed", "compensation_failed"} for s in found
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"runs not finished after {timeout_s} s: {found}")


def _approve_when_asked(live_server: LiveServer, run_id: str, timeout_s: float = 60) -> None:
    """The demo approver approves the run's request as soon as the live worker has made it."""

    async def approve(session: Any) -> bool:
        return await approve_demo_request(session, run_id)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if in_database(live_server, approve):
            return
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} asked for no approval within {timeout_s} s")


def _wait_delivered(live_server: LiveServer, receiver: Receiver, webhook_id: str, timeout_s: float = 90) -> None:
    """Until every delivery of the subscription is settled, one of them after a failed try."""
    from sqlalchemy import text

    async def counts(session: Any) -> tuple[int, int, int]:
        row = (
            await session.execute(
                text(
                    "SELECT count(*), count(*) FILTER (WHERE state = 'succeeded'),"
                    " count(*) FILTER (WHERE attempts > 1) FROM webhook_deliveries WHERE subscription_id = :s"
                ),
                {"s": webhook_id},
            )
        ).one()
        return int(row[0]), int(row[1]), int(row[2])

    deadline = time.monotonic() + timeout_s
    found = (0, 0, 0)
    while time.monotonic() < deadline:
        found = in_database(live_server, counts)
        total, succeeded, retried = found
        if total >= 3 and succeeded == total and retried >= 1:
            assert all(r.verified_by for r in receiver.requests()), "a delivery was not signed"
            return
        time.sleep(0.5)
    raise AssertionError(f"deliveries (total, succeeded, retried) after {timeout_s} s: {found}")


@pytest.fixture
def demo(live_server: LiveServer, receiver: Receiver) -> dict[str, str]:
    ids = in_database(live_server, _demo_with(receiver))
    _approve_when_asked(live_server, ids["run"])
    _wait_finished(live_server, [ids["run"], ids["cancelled"]])
    _wait_delivered(live_server, receiver, ids["webhook"])
    return ids


def shoot(page: Page, path: Path) -> None:
    """A full-page screenshot; on a loaded machine a long page may take a while to capture."""
    try:
        page.screenshot(path=str(path), full_page=True, caret="initial", timeout=60_000)
    except PlaywrightTimeout:
        page.screenshot(path=str(path), caret="initial", timeout=60_000)  # the window's part at least


def _pages(ids: dict[str, str]) -> list[tuple[str, str]]:
    r = f"/realms/{DEMO_SLUG}"
    return [
        ("home", f"{r}/"),
        ("workflows", f"{r}/workflows"),
        ("workflow", f"{r}/workflows/{ids['workflow']}"),
        ("draft-workflow", f"{r}/workflows/{ids['draft']}"),
        ("revision", f"{r}/workflows/{ids['workflow']}/revisions/1"),
        ("editor", f"{r}/workflows/{ids['workflow']}/edit"),
        ("diagnostics", f"{r}/workflows/{ids['workflow']}/diagnostics"),
        ("revisions", f"{r}/workflows/{ids['workflow']}/revisions"),
        ("workflow-runs", f"{r}/workflows/{ids['workflow']}/runs"),
        ("start-run", f"{r}/workflows/{ids['workflow']}/runs/start"),
        ("new-workflow", f"{r}/workflows/new"),
        ("new-workflow-from-template", f"{r}/workflows/new?template=offboarding"),
        ("editor-from-template", f"{r}/workflows/{ids['draft']}/edit?template=approved-access"),
        ("start-many", f"{r}/workflows/{ids['workflow']}/runs/start-many"),
        ("runs", f"{r}/runs"),
        ("needs-attention", f"{r}/attention"),
        ("approvals", f"{r}/approvals"),
        ("approvals-decided", f"{r}/approvals/decided"),
        ("notices", f"{r}/notices"),
        ("timeline", f"{r}/runs/{ids['run']}"),
        ("timeline-cancelled", f"{r}/runs/{ids['cancelled']}"),
        ("users", f"{r}/users"),
        ("user", f"{r}/users/{ids['user']}"),
        ("service-principals", f"{r}/service-principals"),
        ("service-principal", f"{r}/service-principals/{ids['service_principal']}"),
        ("organizations", f"{r}/organizations"),
        ("organization", f"{r}/organizations/{ids['organization']}"),
        ("group", f"{r}/organizations/{ids['group_organization']}/groups/{ids['group']}"),
        ("roles", f"{r}/roles"),
        ("role", f"{r}/roles/{ids['role']}"),
        ("webhooks", f"{r}/webhooks"),
        ("webhook-deliveries", f"{r}/webhooks/{ids['webhook']}/deliveries"),
        ("templates", f"{r}/templates"),
        ("policy", f"{r}/policy"),
        ("tokens", f"{r}/tokens"),
        ("audit", f"{r}/audit"),
        ("api-reference", "/schema"),
    ]


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
            for name, path in _pages(demo):
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
