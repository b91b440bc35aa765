"""What every cockpit page shares: the realm, the main navigation, the messages."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect


class CockpitPage:
    def __init__(self, page: Page, realm: str) -> None:
        self.page = page
        self.realm = realm

    @property
    def root(self) -> str:
        """The realm's path; navigation is relative to the context's ``base_url``."""
        return f"/realms/{self.realm}"

    @property
    def navigation(self) -> Locator:
        return self.page.get_by_role("navigation", name="Main")

    def nav(self, name: str) -> None:
        """Follow a link of the main navigation (Home, Workflows, Runs, Users, Audit log…)."""
        self.navigation.get_by_role("link", name=name, exact=True).click()

    @property
    def heading(self) -> Locator:
        return self.page.get_by_role("heading", level=1)

    @property
    def message(self) -> Locator:
        """The confirmation after an action (``role=status``)."""
        return self.page.get_by_role("status")

    @property
    def problem(self) -> Locator:
        """An error shown on the page (``role=alert``)."""
        return self.page.get_by_role("alert")


def sign_in_with_link(page: Page, link: str, realm: str) -> None:
    """Open a one-time sign-in link and press Continue; ends on the realm's home."""
    page.goto(link)
    page.get_by_role("button", name="Continue").click()
    expect(page).to_have_url(re.compile(rf"/realms/{re.escape(realm)}/?$"))
