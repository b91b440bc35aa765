"""The workflow editor in a real browser: live validation, go to a line, save, approve, publish, diff."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from playwright.sync_api import BrowserContext, Page, expect

from e2e.conftest import LiveServer
from engine.db import make_engine, make_sessionmaker
from tests.factories import make_realm, sign_in_link

MINIMAL = '{"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}'

# What the first admin types: a wait step whose duration is not a duration (line 6).
TYPED = """{
  "schema_version": 1,
  "triggers": [{"type": "manual"}],
  "steps": [
    {
      "duration": "forever",
      "id": "pause",
      "type": "wait"
    },
    {"id": "done", "type": "end"}
  ]
}"""


def prepare(live_server: LiveServer) -> tuple[str, str, str]:
    """A realm with two administrators; a one-time sign-in link for each."""

    async def work() -> tuple[str, str, str]:
        engine = make_engine(live_server.database_url, pool_size=2)
        try:
            realm = await make_realm(make_sessionmaker(engine))
            second = await realm.user("second@example.com", display_name="Second Admin")
            await realm.assign(second, await realm.builtin_role("realm-admin"))
            return realm.slug, await sign_in_link(realm, realm.admin), await sign_in_link(realm, second)
        finally:
            await engine.dispose()

    # Playwright's sync API keeps an event loop running in this thread: run ours in another.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work()).result()


def sign_in(page: Page, live_server: LiveServer, slug: str, token: str) -> None:
    page.goto(f"{live_server.url}/realms/{slug}/sign-in/link?token={token}")
    page.get_by_role("button", name="Continue").click()
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows")).to_be_visible()


def test_an_admin_writes_fixes_and_saves_a_second_approves_the_first_publishes(
    live_server: LiveServer, page: Page, new_context: Callable[..., BrowserContext]
) -> None:
    slug, first_link, second_link = prepare(live_server)
    page.on("dialog", lambda dialog: dialog.accept())  # hx-confirm asks before publishing

    # The first admin creates a workflow that requires approval, with a minimal first revision.
    sign_in(page, live_server, slug, first_link)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Workflows")
    page.get_by_role("link", name="New workflow").click()
    page.get_by_label("Name").fill("Onboarding")
    page.get_by_label("Requires approval before publishing").check()
    page.get_by_label("Initial definition").fill(MINIMAL)
    page.get_by_role("button", name="Create workflow").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Edit Onboarding")
    expect(page.locator(".flash.ok")).to_have_text("Workflow created.")
    page.wait_for_function("() => window.cockpitEditor !== undefined")

    # They type a definition with a mistake: the error shows with its path and its line.
    editor = page.locator("#definition-text")
    editor.fill(TYPED)
    editor.press("End")  # a key goes up: the debounced validation runs
    feedback = page.locator("#editor-feedback")
    expect(feedback).to_contain_text("1 problem")
    issue = feedback.locator("ol.issues li")
    expect(issue).to_have_count(1)
    expect(issue).to_contain_text("/definition/steps/0/duration")
    expect(issue.locator("a.goto-line")).to_have_text("line 6")
    expect(page.locator("#definition-gutter .bad")).to_have_text("6")
    expect(page.locator("#editor-preview")).to_contain_text("pause")

    # Saving it is refused with the same error, and the text stays as typed.
    page.get_by_role("button", name="Save as new draft revision").click()
    expect(page.locator(".flash.bad")).to_contain_text("The request is not valid.")
    expect(feedback.locator("ol.issues li")).to_contain_text("/definition/steps/0/duration")
    assert page.locator("#definition-text").input_value() == TYPED

    # Clicking the error puts the caret on that line; typing replaces it.
    issue.locator("a.goto-line").click()
    selected = page.evaluate(
        "() => { const t = document.getElementById('definition-text');"
        " return t.value.slice(t.selectionStart, t.selectionEnd); }"
    )
    assert selected == '      "duration": "forever",'
    page.keyboard.type('      "duration": "1h",')
    expect(feedback).to_contain_text("✓ Valid")
    expect(page.locator("#definition-gutter .bad")).to_have_count(0)

    page.get_by_role("button", name="Save as new draft revision").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Revision 2")
    expect(page.locator(".flash.ok")).to_have_text("Saved as a new draft revision.")
    revision_url = page.url.split("?", 1)[0]
    assert re.search(rf"/realms/{slug}/workflows/wfl_\w+/revisions/2$", revision_url)
    expect(page.get_by_role("button", name="Publish")).to_have_count(0)  # approval comes first

    # A second admin approves it.
    other = new_context()
    try:
        second = other.new_page()
        sign_in(second, live_server, slug, second_link)
        second.goto(revision_url)
        second.get_by_label("Approval comment").fill("Looks right.")
        second.get_by_role("button", name="Approve").click()
        expect(second.locator(".flash.ok")).to_have_text("Revision approved.")
        expect(second.locator("#rev-props-title + dl")).to_contain_text("Second Admin")
    finally:
        other.close()

    # The first admin publishes it.
    page.goto(revision_url)
    expect(page.locator(".page-head .badge")).to_have_text("approved")
    page.get_by_role("button", name="Publish").click()
    expect(page.locator(".flash.ok")).to_have_text("Revision published.")
    expect(page.locator(".page-head .badge")).to_have_text("published")

    # The diff shows what changed between revision 1 and revision 2.
    diff = page.locator("#revision-diff")
    expect(diff.get_by_role("heading", level=2)).to_have_text("Changes from revision 1 to revision 2")
    expect(diff.locator("tr.st-added")).to_contain_text("pause")
    expect(diff.locator("table.side-by-side tr.insert td.new").first).to_be_visible()
    expect(diff.locator("table.side-by-side")).to_contain_text('"duration": "1h"')

    # The list shows the workflow active, at revision 2.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows").click()
    row = page.locator("#workflows-table tr", has_text="Onboarding")
    expect(row).to_contain_text("active")
    expect(row).to_contain_text("revision 2")
