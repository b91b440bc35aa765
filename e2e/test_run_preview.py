"""The preview in the cockpit: the start form previews the chosen person and asks for a
confirmation before starting a run certain to fail; the revision page previews any person."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from e2e.helpers import LiveServer, publish, setup_realm, sign_in

# Screenshots for a person to look at, when asked for (COCKPIT_E2E_SCREENSHOTS=<folder>).
SHOTS = os.environ.get("COCKPIT_E2E_SCREENSHOTS")


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("width", [1400, 800])
def test_the_start_form_previews_and_asks_before_a_run_certain_to_fail(
    live_server: LiveServer, page: Page, width: int
) -> None:
    setup = setup_realm(live_server, f"preview{width}")
    page.set_viewport_size({"width": width, "height": 900})
    grant = {"id": "grant", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"}
    workflow_id = publish(
        setup,
        "Grant twice",
        [grant, {"id": "again", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"}],
    )
    sign_in(live_server, page, setup)
    page.goto(f"{live_server.url}/realms/{setup.realm}/workflows/{workflow_id}/runs/start")
    page.get_by_label("Subject").fill(setup.subject_email)
    page.get_by_role("button", name="Preview for this person").click()
    preview = page.get_by_test_id("run-preview")
    expect(preview).to_be_visible()
    steps = page.get_by_test_id("preview-step")
    expect(steps).to_have_count(2)
    # The first grant would be made; the second meets it and would fail for good.
    expect(steps.nth(0)).to_have_attribute("data-outcome", "would_succeed")
    expect(steps.nth(1)).to_have_attribute("data-outcome", "would_fail")
    expect(steps.nth(1)).to_contain_text("already holds workflow-reader")
    shot(page, f"start-preview-{width}")
    # Start asks for a confirmation first, and starts nothing without it.
    page.get_by_role("button", name="Start run").click()
    expect(page.get_by_test_id("confirm-failure")).to_contain_text("certain to fail")
    assert setup.api.get("/workflow-runs", params={"workflow_id": workflow_id}).json()["items"] == []
    shot(page, f"start-confirm-{width}")
    page.get_by_label(re.compile("Start it anyway")).check()
    page.get_by_role("button", name="Start run").click()
    expect(page).to_have_url(re.compile(r"/runs/wrn_\w+\?done=started"))
    assert len(setup.api.get("/workflow-runs", params={"workflow_id": workflow_id}).json()["items"]) == 1


@pytest.mark.parametrize("width", [1400, 800])
def test_the_revision_page_previews_a_person(live_server: LiveServer, page: Page, width: int) -> None:
    setup = setup_realm(live_server, f"revpreview{width}")
    page.set_viewport_size({"width": width, "height": 900})
    workflow_id = publish(
        setup,
        "Leave and join",
        [
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "leave", "type": "remove_membership"},
            {"id": "done", "type": "end"},
        ],
    )
    sign_in(live_server, page, setup)
    page.goto(f"{live_server.url}/realms/{setup.realm}/workflows/{workflow_id}/revisions/1")
    section = page.locator("#revision-preview")
    expect(section.get_by_role("heading", name="Preview for a person")).to_be_visible()
    section.get_by_label("Person").fill(setup.subject_email)
    section.get_by_role("button", name="Preview").click()
    steps = page.get_by_test_id("preview-step")
    expect(steps).to_have_count(3)
    expect(steps.nth(0)).to_have_attribute("data-outcome", "would_succeed")
    expect(steps.nth(1)).to_contain_text("organization_required")
    expect(steps.nth(2)).to_have_attribute("data-outcome", "not_reached")
    shot(page, f"revision-preview-{width}")
    # With the organization given, every step would succeed.
    section = page.locator("#revision-preview")
    organization = section.get_by_label(re.compile("Organization"))
    organization.select_option(setup.org_id)  # offered by name, not typed as an id
    chosen = organization.locator(f'option[value="{setup.org_id}"]')
    expect(chosen).not_to_have_text(re.compile("^org_"))
    section.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("run-preview")).to_have_attribute("data-outcome", "would_succeed")
