"""An approver decides in a real browser with an account session; the run goes on.

The approver signs in with email and password (no second factor: an account session, enough for
self-service approvals), finds the request in "Waiting for me" with names — the workflow, the
person it is about, what the run does next — approves it with a comment, and the administrator's
run timeline moves on to succeeded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import BrowserContext, Page, expect

from e2e.helpers import FINISH_TIMEOUT, PASSWORD, LiveServer, publish, reload_until, setup_realm, sign_in
from e2e.pages import TimelinePage


def test_an_approver_approves_and_the_timeline_moves_on(
    live_server: LiveServer, page: Page, new_context: Callable[..., BrowserContext]
) -> None:
    setup = setup_realm(live_server, "approvals-e2e")

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = setup.api.post(path, json=body)
        assert response.status_code in (200, 201, 202), (path, response.status_code, response.text)
        result: dict[str, Any] = response.json()
        return result

    approver = post("/users", {"email": "bea@example.com", "display_name": "Bea Boss", "password": PASSWORD})
    subject = next(u for u in setup.api.get("/users").json()["items"] if u["email"] == setup.subject_email)
    workflow_id = publish(
        setup,
        "Joiner",
        [
            {"id": "approve", "type": "approval", "approvers": [approver["id"]], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "done", "type": "end"},
        ],
    )
    run = post(f"/workflows/{workflow_id}/runs", {"subject_id": subject["id"], "organization_id": setup.org_id})

    # The administrator watches the run wait for the approval.
    sign_in(live_server, page, setup)
    timeline = TimelinePage(page, setup.realm, run["id"]).open()
    timeline.follow_to("awaiting_approval", timeout_ms=FINISH_TIMEOUT)
    expect(timeline.step_state("approve")).to_have_text("awaiting approval")
    expect(page.get_by_test_id("approval-row")).to_contain_text("Bea Boss")

    # The approver, in a browser of their own, with a password only.
    approver_page = new_context().new_page()
    approver_page.set_viewport_size({"width": 800, "height": 900})
    approver_page.goto(f"/realms/{setup.realm}/sign-in?next=/realms/{setup.realm}/approvals")
    approver_page.get_by_label("Email").fill("bea@example.com")
    approver_page.get_by_label("Password").fill(PASSWORD)
    approver_page.get_by_role("button", name="Sign in").click()
    expect(approver_page).to_have_url(re.compile(rf"/realms/{setup.realm}/approvals$"))
    cards = approver_page.get_by_test_id("approval-card")
    reload_until(approver_page, lambda: cards.count() == 1)
    card = cards.first
    expect(card).to_contain_text("Joiner for Grace Hopper")
    expect(card.get_by_test_id("next-steps")).to_contain_text("grants role workflow-reader across the realm")
    expect(card.get_by_test_id("next-steps")).to_contain_text("adds them to group Engineering")
    expect(card).to_contain_text("Ada Admin, by hand")
    expect(card).not_to_contain_text("usr_")
    card.get_by_role("link", name="Decide").click()
    approver_page.get_by_label(re.compile("^Comment")).fill("Welcome, Grace")
    approver_page.get_by_test_id("approve").click()
    expect(approver_page.get_by_test_id("flash")).to_contain_text("Approved")
    expect(approver_page.get_by_test_id("decision")).to_contain_text("approved by Bea Boss")
    approver_page.get_by_role("link", name="Decided by me").click()
    expect(approver_page.get_by_test_id("approval-card")).to_contain_text("“Welcome, Grace”")

    # The administrator's timeline, still open, moves on by itself.
    timeline.follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)
    for step in ("approve", "grant", "team", "done"):
        expect(timeline.step_state(step)).to_have_text("succeeded")
    expect(page.get_by_test_id("approval-status")).to_have_text("approved")
