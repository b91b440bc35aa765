"""A revision's page: its state, approving or rejecting it, publishing it, the diff."""

from __future__ import annotations

import re

from playwright.sync_api import Dialog, Locator, Page, expect

from e2e.pages.base import CockpitPage

_REVISION_URL = re.compile(r"/workflows/(wfl_\w+)/revisions/(\d+)(?:[?#].*)?$")


class RevisionPage(CockpitPage):
    def __init__(self, page: Page, realm: str, workflow_id: str, number: int) -> None:
        super().__init__(page, realm)
        self.workflow_id = workflow_id
        self.number = number

    @classmethod
    def current(cls, page: Page, realm: str) -> RevisionPage:
        """The revision page the browser is on (after saving in the editor, say)."""
        expect(page).to_have_url(_REVISION_URL)
        found = _REVISION_URL.search(page.url)
        assert found is not None
        return cls(page, realm, found[1], int(found[2]))

    def open(self) -> RevisionPage:
        self.page.goto(f"{self.root}/workflows/{self.workflow_id}/revisions/{self.number}")
        return self

    @property
    def state(self) -> Locator:
        return self.page.get_by_test_id("revision-state")

    @property
    def properties(self) -> Locator:
        return self.page.get_by_role("region", name="Revision", exact=True)

    def approve(self, comment: str = "") -> None:
        if comment:
            self.page.get_by_label("Approval comment").fill(comment)
        self.page.get_by_role("button", name="Approve").click()

    def reject(self, comment: str) -> None:
        self.page.get_by_label("Rejection comment").fill(comment)
        self.page.get_by_role("button", name="Reject").click()

    @property
    def publish_button(self) -> Locator:
        return self.page.get_by_role("button", name="Publish")

    def publish(self) -> None:
        """Publish, accepting the confirmation the browser asks for."""

        def accept(dialog: Dialog) -> None:
            dialog.accept()

        self.page.once("dialog", accept)
        self.publish_button.click()

    @property
    def diff(self) -> Locator:
        return self.page.get_by_role("region", name=re.compile(r"^Changes"))

    def diff_step(self, step_id: str) -> Locator:
        return self.diff.get_by_test_id("diff-step").filter(has=self.page.get_by_role("cell", name=step_id, exact=True))

    def diff_step_status(self, step_id: str) -> Locator:
        return self.diff_step(step_id).get_by_test_id("diff-step-status")

    @property
    def side_by_side(self) -> Locator:
        return self.diff.get_by_role("table", name=re.compile(r"^Line by line"))
