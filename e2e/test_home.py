from __future__ import annotations

from playwright.sync_api import Page, expect

from e2e.helpers import LiveServer


def test_start_page_shows_the_layout_and_links_to_readiness(live_server: LiveServer, page: Page) -> None:
    page.goto("/")
    expect(page).to_have_title("Home · Lifecycle Cockpit")
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    # htmx is vendored and loaded from our own static files.
    page.wait_for_function("() => window.htmx !== undefined")
    assert page.evaluate("() => window.htmx.version").startswith("2.")
    page.get_by_role("link", name="Readiness").click()
    page.wait_for_url("**/readyz")
    expect(page.get_by_text('"database":{"ok":true}')).to_be_visible()


def test_unknown_page_shows_a_finished_error_page(live_server: LiveServer, page: Page) -> None:
    response = page.goto("/no-such-page")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", level=1)).to_contain_text("404")
    expect(page.get_by_role("link", name="Back to the start page")).to_be_visible()


def test_status_widget_turns_ready_once_the_worker_beats(live_server: LiveServer, page: Page) -> None:
    page.goto("/")
    status = page.get_by_test_id("service-status")
    expect(status).to_contain_text("Ready", timeout=30_000)
    expect(status).to_contain_text("A worker alive")
