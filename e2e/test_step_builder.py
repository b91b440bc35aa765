"""The step builder in Chromium at 1400 and 800 px: add a step from the menu, pick its role by
name with the keyboard, watch the JSON follow (and the builder follow the JSON), save it, and see
the name on the revision page. The document never scrolls sideways."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Page, expect

from e2e.helpers import LiveServer
from e2e.pages import RevisionPage, sign_in_with_link
from e2e.pages.editor import EditorPage
from engine.platform.db import make_engine, make_sessionmaker
from engine.workflows.catalog import create_workflow
from testing.factories import make_realm, sign_in_link

MINIMAL = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


def prepare(live_server: LiveServer) -> dict[str, str]:
    """A realm with an administrator, two roles with names alike, and a workflow to edit."""

    async def work() -> dict[str, str]:
        engine = make_engine(live_server.database_url, pool_size=2)
        try:
            realm = await make_realm(make_sessionmaker(engine))
            role = await realm.role("Payroll readers", ["realm.users.read"])
            await realm.role("Payroll writers", ["realm.users.read", "realm.users.write"])
            async with realm.sessions() as session, session.begin():
                workflow, _ = await create_workflow(
                    session, realm.actor, name="Joiners", definition=MINIMAL, has_definition=True
                )
            return {
                "slug": realm.slug,
                "link": await sign_in_link(realm, realm.admin),
                "role_id": role.id,
                "workflow_id": workflow.id,
            }
        finally:
            await engine.dispose()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work()).result()


@pytest.mark.parametrize("width", [1400, 800])
def test_a_step_is_added_its_role_picked_by_name_and_saved(live_server: LiveServer, page: Page, width: int) -> None:
    made = prepare(live_server)
    page.set_viewport_size({"width": width, "height": 1000})
    slug = made["slug"]
    sign_in_with_link(page, f"/realms/{slug}/sign-in/link?token={made['link']}", slug)
    editor = EditorPage(page, slug).open(made["workflow_id"])
    page.wait_for_function("() => window.cockpitPicker !== undefined")
    expect(editor.builder_steps()).to_have_count(1)
    assert not editor.document_overflows()

    # Add an assign_role step from the menu: it lands before the end step, its role still to choose.
    editor.add_step("assign_role")
    expect(editor.builder_steps()).to_have_count(2)
    expect(editor.builder_steps().first).to_have_attribute("data-type", "assign_role")
    expect(editor.definition).to_have_value(re.compile(r'"type": "assign_role"'))
    expect(editor.feedback).to_contain_text("problem")
    expect(editor.issues.get_by_role("link", name="field").first).to_have_attribute("href", "#b-steps-0-role_id")

    # Escape closes a picker's list without choosing.
    search = editor.picker("b-steps-0-role_id")
    search.focus()
    search.press_sequentially("payroll", delay=20)
    listbox = page.locator("#b-steps-0-role_id-list")
    expect(listbox.get_by_role("option")).to_have_count(2)
    search.press("Escape")
    expect(listbox).to_be_hidden()
    search.fill("")

    # Pick the role by its name with the keyboard: the JSON gets its id, the builder shows its name.
    editor.pick("b-steps-0-role_id", "readers", "Payroll readers")
    expect(editor.definition).to_have_value(re.compile(rf'"role_id": "{made["role_id"]}"'))
    expect(editor.builder.get_by_role("link", name="Payroll readers")).to_be_visible()
    editor.expect_valid()
    # Focus stays in the builder, on the same field.
    expect(editor.picker("b-steps-0-role_id")).to_be_focused()

    # The builder follows the JSON: a step id typed in the text shows in the builder's field.
    value = json.loads(editor.definition.input_value())
    assert [s["type"] for s in value["steps"]] == ["assign_role", "end"]
    value["steps"][0]["id"] = "grant-payroll"
    editor.type_definition(json.dumps(value, indent=2))
    expect(page.locator("#b-steps-0-id")).to_have_value("grant-payroll")
    editor.expect_valid()
    assert not editor.document_overflows()

    editor.save()
    revision = RevisionPage.current(page, slug)
    expect(revision.message).to_have_text("Saved as a new draft revision.")
    expect(page.get_by_role("link", name="Payroll readers").first).to_be_visible()
    assert not editor.document_overflows()
