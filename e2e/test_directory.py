"""An administrator signs in with the one-time link, creates a user, adds them to an organization
and finds the change in the audit log."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from e2e.conftest import LiveServer
from e2e.helpers import create_realm, sign_in_url


def test_sign_in_create_user_add_to_organization_and_audit(live_server: LiveServer, page: Page) -> None:
    blocked: list[str] = []  # anything the Content-Security-Policy refused
    page.on(
        "console",
        lambda message: (
            blocked.append(message.text)
            if "Content Security Policy" in message.text or "Refused to" in message.text
            else None
        ),
    )
    create_realm(live_server, "acme", "root@acme.example")
    page.goto(sign_in_url(live_server, "acme", "root@acme.example"))
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(f"{live_server.url}/realms/acme/**")
    expect(page.get_by_role("navigation", name="Main")).to_contain_text("Users")

    # Create a user.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Users").click()
    page.get_by_label("Email", exact=True).fill("grace@acme.example")
    page.get_by_label("Display name").fill("Grace Hopper")
    page.get_by_role("button", name="Create user").click()
    expect(page.locator("main")).to_contain_text("grace@acme.example")

    # Create an organization and add her to it.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Organizations").click()
    page.get_by_label("Name", exact=True).fill("Research")
    page.get_by_role("button", name="Create organization").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Research")
    page.get_by_label("Add a member").fill("grace@acme.example")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#org-members table")).to_contain_text("grace@acme.example")
    # Adding her again: the widget shows the refusal in place (a 409 it swaps in, static/js/cockpit.js).
    page.get_by_label("Add a member").fill("grace@acme.example")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#org-members")).to_contain_text("already a member")

    # The audit log shows the membership, newest first.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    first_row = page.locator("table.audit tbody tr").first
    expect(first_row).to_contain_text("organization.membership.added")
    expect(page.locator("main")).to_contain_text("user.created")
    assert not blocked, blocked
