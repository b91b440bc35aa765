"""The workflow editor in a real browser: live validation, go to a line, save, approve, publish, diff."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from playwright.sync_api import BrowserContext, Page, expect

from e2e.helpers import LiveServer
from e2e.pages import RevisionPage, WorkflowsPage, sign_in_with_link
from engine.platform.db import make_engine, make_sessionmaker
from testing.factories import independent_admin, make_realm, sign_in_link

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
            # Made by the operator, not by the first: an independent second person.
            second, _ = await independent_admin(realm, "second@example.com", display_name="Second Admin")
            return realm.slug, await sign_in_link(realm, realm.admin), await sign_in_link(realm, second)
        finally:
            await engine.dispose()

    # Playwright's sync API keeps an event loop running in this thread: run ours in another.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work()).result()


def sign_in(page: Page, slug: str, token: str) -> None:
    sign_in_with_link(page, f"/realms/{slug}/sign-in/link?token={token}", slug)


def test_an_admin_writes_fixes_and_saves_a_second_approves_the_first_publishes(
    live_server: LiveServer, page: Page, new_context: Callable[..., BrowserContext]
) -> None:
    slug, first_link, second_link = prepare(live_server)

    # The first admin creates a workflow that requires approval, with a minimal first revision.
    sign_in(page, slug, first_link)
    workflows = WorkflowsPage(page, slug)
    workflows.nav("Workflows")
    expect(workflows.heading).to_have_text("Workflows")
    editor = workflows.create("Onboarding", definition=MINIMAL, requires_approval=True)
    expect(editor.heading).to_have_text("Edit Onboarding")
    expect(editor.message).to_have_text("Workflow created.")

    # They type a definition with a mistake: the error shows with its path and its line.
    editor.type_definition(TYPED)
    expect(editor.feedback).to_contain_text("1 problem")
    expect(editor.issues).to_have_count(1)
    expect(editor.issues).to_contain_text("/definition/steps/0/duration")
    expect(editor.issues.get_by_role("link", name=re.compile("^line"))).to_have_text("line 6")
    expect(editor.issues.get_by_role("link", name="field")).to_have_attribute("href", "#b-steps-0-duration")
    expect(editor.error_lines).to_have_text(["6"])
    expect(editor.preview).to_contain_text("pause")

    # Saving it is refused with the same error, and the text stays as typed.
    editor.save()
    expect(editor.problem.filter(has_text="The request is not valid.")).to_be_visible()
    expect(editor.issues).to_contain_text("/definition/steps/0/duration")
    assert editor.definition.input_value() == TYPED

    # Clicking the error puts the caret on that line; typing replaces it.
    editor.go_to_line(6)
    assert editor.selected_text() == '      "duration": "forever",'
    page.keyboard.type('      "duration": "1h",')
    editor.expect_valid()
    expect(editor.error_lines).to_have_count(0)

    editor.save()
    revision = RevisionPage.current(page, slug)
    expect(revision.heading).to_contain_text("Revision 2")
    expect(revision.message).to_have_text("Saved as a new draft revision.")
    assert revision.number == 2
    expect(revision.state).to_have_text("draft")
    expect(revision.publish_button).to_have_count(0)  # approval comes first

    # A second admin approves it.
    other = new_context()
    second = other.new_page()
    sign_in(second, slug, second_link)
    theirs = RevisionPage(second, slug, revision.workflow_id, revision.number).open()
    theirs.approve("Looks right.")
    expect(theirs.message).to_have_text("Revision approved.")
    expect(theirs.properties).to_contain_text("Second Admin")
    other.close()

    # The first admin publishes it.
    revision.open()
    expect(revision.state).to_have_text("approved")
    revision.publish()
    expect(revision.message).to_have_text("Revision published.")
    expect(revision.state).to_have_text("published")

    # The diff shows what changed between revision 1 and revision 2.
    expect(revision.diff.get_by_role("heading", level=2)).to_have_text("Changes from revision 1 to revision 2")
    expect(revision.diff_step_status("pause")).to_have_text("added")
    expect(revision.side_by_side).to_contain_text('"duration": "1h"')

    # The list shows the workflow active, at revision 2.
    workflows.nav("Workflows")
    expect(workflows.state_of("Onboarding")).to_have_text("active")
    expect(workflows.row("Onboarding")).to_contain_text("revision 2")


SECOND = (
    '{"schema_version": 1, "triggers": [{"type": "manual"}], '
    '"steps": [{"id": "pause", "type": "wait", "duration": "1h"}, {"id": "done", "type": "end"}]}'
)


def test_back_after_saving_shows_what_was_saved_and_saving_it_again_changes_nothing(
    live_server: LiveServer, page: Page
) -> None:
    slug, first_link, _ = prepare(live_server)
    sign_in(page, slug, first_link)
    workflows = WorkflowsPage(page, slug)
    workflows.nav("Workflows")
    editor = workflows.create("Back and forth", definition=MINIMAL)
    expect(page.get_by_text("Starting from revision 1")).to_be_visible()

    editor.type_definition(SECOND)
    editor.expect_valid()
    editor.save()
    saved = RevisionPage.current(page, slug)
    assert saved.number == 2
    expect(editor.message).to_have_text("Saved as a new draft revision.")

    # Back: the editor shows the text just saved and starts from the revision it made, not the
    # page as it was before saving.
    page.go_back()
    editor.wait_until_ready()
    expect(page.get_by_text("Starting from revision 2")).to_be_visible()
    expect(editor.definition).to_have_value(re.compile('"duration": "1h"'))

    # Saving it again makes no revision 3: the editor says nothing changed.
    editor.save()
    same = RevisionPage.current(page, slug)
    assert same.number == 2
    expect(editor.message).to_contain_text("Nothing changed")
