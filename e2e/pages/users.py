"""The users of the realm: searching, creating, a user's page and its status."""

from __future__ import annotations

from playwright.sync_api import Dialog, Locator, Page

from e2e.pages.base import CockpitPage


class UsersPage(CockpitPage):
    def open(self) -> UsersPage:
        self.page.goto(self.root + "/users")
        return self

    def search(self, text: str) -> UsersPage:
        self.page.get_by_role("searchbox", name="Search").fill(text)
        return self

    def row(self, email: str) -> Locator:
        return self.page.get_by_test_id("user-row").filter(has=self.page.get_by_role("link", name=email, exact=True))

    def status_of(self, email: str) -> Locator:
        return self.row(email).get_by_test_id("user-status")

    def create(self, email: str, display_name: str) -> UserPage:
        form = self.page.get_by_role("region", name="New user")
        form.get_by_label("Email", exact=True).fill(email)
        form.get_by_label("Display name").fill(display_name)
        form.get_by_role("button", name="Create user").click()
        return UserPage(self.page, self.realm)

    def open_user(self, email: str) -> UserPage:
        self.search(email)
        self.row(email).get_by_role("link", name=email, exact=True).click()
        return UserPage(self.page, self.realm)


class UserPage(CockpitPage):
    def __init__(self, page: Page, realm: str, user_id: str = "") -> None:
        super().__init__(page, realm)
        self.user_id = user_id

    def open(self) -> UserPage:
        self.page.goto(f"{self.root}/users/{self.user_id}")
        return self

    @property
    def status(self) -> Locator:
        return self.page.get_by_role("region", name="Status").get_by_test_id("user-status")

    def _confirmed(self, button: str) -> None:
        def accept(dialog: Dialog) -> None:
            dialog.accept()

        self.page.once("dialog", accept)
        self.page.get_by_role("region", name="Status").get_by_role("button", name=button).click()

    def suspend(self) -> None:
        self._confirmed("Suspend")

    def reactivate(self) -> None:
        self._confirmed("Reactivate")
