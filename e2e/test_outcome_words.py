"""The outcome of a run in words, read in a real browser by the approver, an auditor and a plain user.

Two runs ask Bea Boss: she rejects one ("Not this quarter") and approves the other. Under "Decided
by me" she reads how each ended; the administrator and an auditor read "Rejected by Bea Boss: Not
this quarter" on the runs list and the timeline, with the run named for its person; a plain user
sees no run at all and is told so. Screenshots of the changed pages at 1400 and 800 px go to the
test's output folder (``--output``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from e2e.helpers import FINISH_TIMEOUT, PASSWORD, LiveServer, publish, reload_until, setup_realm, sign_in, sign_in_path
from e2e.pages import TimelinePage
from e2e.pages.base import sign_in_with_link

WIDTHS = (1400, 800)


def shoot(page: Page, folder: Path, name: str) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})


def test_the_approver_the_auditor_and_a_plain_user_read_the_outcome_in_words(
    live_server: LiveServer, page: Page, new_context: Callable[..., BrowserContext], pytestconfig: pytest.Config
) -> None:
    shots = Path(str(pytestconfig.getoption("--output"))) / "outcome-words"
    shots.mkdir(parents=True, exist_ok=True)
    setup = setup_realm(live_server, "words-e2e")

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = setup.api.post(path, json=body)
        assert response.status_code in (200, 201, 202), (path, response.status_code, response.text)
        result: dict[str, Any] = response.json()
        return result

    approver = post("/users", {"email": "bea@example.com", "display_name": "Bea Boss", "password": PASSWORD})
    auditor = post("/users", {"email": "audrey@example.com", "display_name": "Audrey Auditor"})
    post("/users", {"email": "pat@example.com", "display_name": "Pat Plain", "password": PASSWORD})
    auditor_role = next(r for r in setup.api.get("/roles").json()["items"] if r["name"] == "realm-auditor")
    post("/role-assignments", {"role_id": auditor_role["id"], "user_id": auditor["id"]})
    subject = next(u for u in setup.api.get("/users").json()["items"] if u["email"] == setup.subject_email)
    workflow_id = publish(
        setup,
        "Lab access",
        [
            {"id": "approve", "type": "approval", "approvers": [approver["id"]], "expires_in": "72h"},
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "done", "type": "end"},
        ],
    )
    first = post(f"/workflows/{workflow_id}/runs", {"subject_id": subject["id"], "organization_id": setup.org_id})

    # The approver rejects the first request with a comment.
    approver_page = new_context().new_page()
    approver_page.set_viewport_size({"width": 1400, "height": 900})
    approver_page.goto(f"/realms/{setup.realm}/sign-in?next=/realms/{setup.realm}/approvals")
    approver_page.get_by_label("Email").fill("bea@example.com")
    approver_page.get_by_label("Password").fill(PASSWORD)
    approver_page.get_by_role("button", name="Sign in").click()
    expect(approver_page).to_have_url(re.compile(rf"/realms/{setup.realm}/approvals$"))
    cards = approver_page.get_by_test_id("approval-card")
    reload_until(approver_page, lambda: cards.count() == 1)
    expect(cards.first).to_contain_text("in 3 days")  # a 72 h request, just asked
    cards.first.get_by_role("link", name="Decide").click()
    approver_page.get_by_label(re.compile("^Comment")).fill("Not this quarter")
    approver_page.get_by_test_id("reject").click()
    expect(approver_page.get_by_test_id("flash")).to_contain_text("Rejected")

    # The administrator's timeline names who said no and why; the state stays the seed's.
    sign_in(live_server, page, setup)
    timeline = TimelinePage(page, setup.realm, first["id"]).open()
    expect(page.get_by_test_id("run-outcome")).to_have_text(
        "Rejected by Bea Boss: Not this quarter", timeout=FINISH_TIMEOUT
    )
    expect(timeline.state).to_have_text("failed")
    expect(page.get_by_test_id("run-title")).to_have_text("Lab access for Grace Hopper")
    expect(page.get_by_test_id("run-trigger")).to_contain_text("Started by Ada Admin")
    shoot(page, shots, "admin-timeline-rejected")

    # The second request: approved, and the run succeeds.
    second = post(f"/workflows/{workflow_id}/runs", {"subject_id": subject["id"], "organization_id": setup.org_id})
    approver_page.goto(f"/realms/{setup.realm}/approvals")
    reload_until(approver_page, lambda: cards.count() == 1)
    cards.first.get_by_role("link", name="Decide").click()
    approver_page.get_by_test_id("approve").click()
    TimelinePage(page, setup.realm, second["id"]).open().follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)

    approver_page.goto(f"/realms/{setup.realm}/approvals/decided")
    led_to = approver_page.get_by_test_id("approval-led-to")
    expect(led_to).to_have_count(2)
    expect(led_to.nth(0)).to_contain_text("approved — then succeeded")
    expect(led_to.nth(1)).to_contain_text("rejected — the run stopped")
    shoot(approver_page, shots, "approver-decided")

    page.goto(f"/realms/{setup.realm}/runs")
    rows = page.get_by_test_id("run-row")
    expect(rows).to_have_count(2)
    expect(rows.filter(has_text="Rejected by Bea Boss")).to_have_count(1)
    expect(page.get_by_test_id("run-title").first).to_have_text("Lab access for Grace Hopper")
    shoot(page, shots, "admin-runs")
    page.goto(f"/realms/{setup.realm}/")
    expect(page.get_by_test_id("kpi-rejected").get_by_test_id("kpi-value")).to_have_text("1")
    expect(page.get_by_test_id("kpi-failed").get_by_test_id("kpi-value")).to_have_text("0")
    shoot(page, shots, "admin-home")
    page.goto(f"/realms/{setup.realm}/workflows/{workflow_id}/diagnostics")
    expect(page.get_by_test_id("health-badge").first).to_have_attribute("data-health", "healthy")
    expect(page.get_by_test_id("fig-rejected")).to_contain_text("1 run")
    shoot(page, shots, "admin-diagnostics")
    page.goto(f"/realms/{setup.realm}/attention")
    shoot(page, shots, "admin-attention")

    # An auditor reads the same words.
    auditor_page = new_context().new_page()
    sign_in_with_link(
        auditor_page, live_server.url + sign_in_path(live_server, setup.realm, "audrey@example.com"), setup.realm
    )
    auditor_page.goto(f"/realms/{setup.realm}/runs")
    expect(
        auditor_page.get_by_test_id("run-outcome").filter(has_text="Rejected by Bea Boss: Not this quarter")
    ).to_have_count(1)

    # A plain user has no run to read and is told there is nothing decided by them.
    plain = new_context().new_page()
    plain.goto(f"/realms/{setup.realm}/sign-in?next=/realms/{setup.realm}/approvals/decided")
    plain.get_by_label("Email").fill("pat@example.com")
    plain.get_by_label("Password").fill(PASSWORD)
    plain.get_by_role("button", name="Sign in").click()
    expect(plain.get_by_test_id("approvals-empty")).to_contain_text("You have not decided any request yet.")
    expect(plain.locator("main")).not_to_contain_text("Rejected by")


def test_start_run_on_a_draft_workflow_looks_disabled(live_server: LiveServer, page: Page) -> None:
    """The fieldset disables the buttons; they must also look it (not only refuse the click)."""
    setup = setup_realm(live_server, "draft-e2e")
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    created = setup.api.post("/workflows", json={"name": "Draft only", "definition": definition})
    assert created.status_code in (200, 201), created.text
    sign_in(live_server, page, setup)
    page.goto(f"/realms/{setup.realm}/workflows/{created.json()['id']}/runs/start")
    start = page.get_by_role("button", name="Start run")
    expect(start).to_be_disabled()
    expect(page.get_by_test_id("start-disabled-reason")).to_contain_text("only an active workflow starts runs")
    looks = start.evaluate("b => { const s = getComputedStyle(b); return [s.opacity, s.cursor]; }")
    assert looks == ["0.55", "not-allowed"], looks
