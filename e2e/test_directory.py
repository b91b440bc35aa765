"""An administrator signs in with the one-time link, creates a user, adds them to an organization
and finds the change in the audit log."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from e2e.helpers import LiveServer, create_realm, sign_in_url
from e2e.pages import RealmHome, UsersPage, sign_in_with_link


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
    sign_in_with_link(page, sign_in_url(live_server, "acme", "root@acme.example"), "acme")
    home = RealmHome(page, "acme")
    expect(home.navigation).to_contain_text("Users")
    expect(home.kpi_value("users")).to_have_text("1")

    # Create a user.
    home.nav("Users")
    users = UsersPage(page, "acme")
    users.create("grace@acme.example", "Grace Hopper")
    expect(page.get_by_role("main")).to_contain_text("grace@acme.example")

    # Create an organization and add her to it.
    home.nav("Organizations")
    page.get_by_label("Name", exact=True).fill("Research")
    page.get_by_role("button", name="Create organization").click()
    expect(home.heading).to_contain_text("Research")
    page.get_by_label("Add a member").fill("grace@acme.example")
    page.get_by_role("button", name="Add member").click()
    members = page.get_by_role("region", name="Members")
    expect(members.get_by_role("table")).to_contain_text("grace@acme.example")
    # Adding her again: the widget shows the refusal in place (a 409 it swaps in, static/js/cockpit.js).
    page.get_by_label("Add a member").fill("grace@acme.example")
    page.get_by_role("button", name="Add member").click()
    expect(members).to_contain_text("already a member")

    # The audit log shows the membership, newest first.
    home.nav("Audit log")
    expect(page.get_by_test_id("audit-event")).to_contain_text(["organization.membership.added", "user.created"])
    assert not blocked, blocked
