"""Diagnostics in a real browser: health badges on the list and home, the SVG charts, Needs attention.

The live server runs ``cockpit serve`` and ``cockpit worker``; runs are started through the API
and made by the worker. One subject belongs to the group's organization (the run succeeds), two
do not (their runs fail with ``not_a_member``): 2 of 4 attempts failed, so the workflow is
degraded.
"""

from __future__ import annotations

import re
import time

from playwright.sync_api import Page, expect

from e2e.helpers import LiveServer, publish, setup_realm, sign_in

FINISH_S = 90
FINISHED = {"succeeded", "failed", "compensated", "compensation_failed", "cancelled"}


def wait_finished(setup, run_ids: list[str]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + FINISH_S
    while time.monotonic() < deadline:
        states = [setup.api.get(f"/workflow-runs/{run_id}").json()["state"] for run_id in run_ids]
        if all(state in FINISHED for state in states):
            return
        time.sleep(0.5)
    raise AssertionError(f"runs did not finish within {FINISH_S} s: {states}")


def no_horizontal_overflow(page: Page) -> None:
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"the page is {overflow}px wider than the window"


def test_health_badges_charts_and_needs_attention(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "diag")
    workflow_id = publish(
        setup,
        "Join Engineering",
        [{"id": "team", "type": "add_to_group", "group_id": setup.group_id}, {"id": "done", "type": "end"}],
    )
    publish(setup, "Quiet workflow", [{"id": "done", "type": "end"}])
    member = setup.api.get("/users", params={"q": setup.subject_email}).json()["items"][0]["id"]
    outsiders = [
        setup.api.post("/users", json={"email": f"outside-{i}@example.com", "display_name": f"Outside {i}"}).json()[
            "id"
        ]
        for i in range(2)
    ]
    run_ids = []
    for subject_id in [member, *outsiders]:
        started = setup.api.post(f"/workflows/{workflow_id}/runs", json={"subject_id": subject_id})
        assert started.status_code == 202, started.text
        run_ids.append(started.json()["id"])
    wait_finished(setup, run_ids)

    sign_in(live_server, page, setup)
    # Home: the degraded workflow is listed among those that need attention, with its badge.
    attention = page.get_by_test_id("workflows-attention")
    expect(attention).to_contain_text("Join Engineering")
    expect(attention.get_by_test_id("health-badge")).to_have_text("Degraded")
    expect(attention).not_to_contain_text("Quiet workflow")

    # The workflows list: a badge on every row.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Workflows").click()
    row = page.get_by_test_id("workflow-row").filter(has_text="Join Engineering")
    expect(row.get_by_test_id("health-badge")).to_have_text("Degraded")
    quiet = page.get_by_test_id("workflow-row").filter(has_text="Quiet workflow")
    expect(quiet.get_by_test_id("health-badge")).to_have_text("No data")

    # The badge opens the diagnostics: the reason in words and the three SVG charts.
    row.get_by_test_id("health-badge").click()
    expect(page).to_have_url(f"{live_server.url}/realms/diag/workflows/{workflow_id}/diagnostics")
    expect(page.get_by_role("heading", level=1)).to_have_text("Diagnostics: Join Engineering")
    expect(page.get_by_test_id("health-reason")).to_have_text("2 of 4 attempts failed (50.0 %), more than 10 %.")
    for chart in ("chart-runs-over-time", "chart-durations", "chart-failures"):
        svg = page.get_by_test_id(chart)
        expect(svg).to_be_visible()
        assert svg.locator("rect").count() >= 1, chart
    expect(page.get_by_test_id("chart-failures")).to_contain_text("team · not_a_member")
    expect(page.get_by_test_id("chart-durations")).to_contain_text("p50")
    expect(page.get_by_test_id("chart-durations")).to_contain_text("p95")
    expect(page.get_by_test_id("fig-failed")).to_have_text("2 of 4")
    no_horizontal_overflow(page)
    page.set_viewport_size({"width": 800, "height": 900})
    no_horizontal_overflow(page)
    expect(page.get_by_test_id("chart-runs-over-time")).to_be_visible()
    page.set_viewport_size({"width": 1400, "height": 900})

    # A recent failure opens its run.
    page.get_by_test_id("failure-run-link").first.click()
    expect(page).to_have_url(re.compile(r"/realms/diag/runs/wrn_[0-9a-z]+"))
    expect(page.get_by_test_id("step-team")).to_be_visible()

    # Needs attention: nothing, said in words.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Needs attention").click()
    expect(page.get_by_test_id("attention-empty")).to_contain_text("Nothing needs attention")
    no_horizontal_overflow(page)
