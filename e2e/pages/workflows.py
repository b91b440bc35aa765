"""The list of workflows, the new-workflow form and a workflow's own page (with the run start form)."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

from e2e.pages.base import CockpitPage
from e2e.pages.editor import EditorPage
from e2e.pages.timeline import TimelinePage


class WorkflowsPage(CockpitPage):
    def open(self) -> WorkflowsPage:
        self.page.goto(self.root + "/workflows")
        return self

    def search(self, text: str) -> WorkflowsPage:
        self.page.get_by_role("searchbox", name="Search").fill(text)
        return self

    def row(self, name: str) -> Locator:
        return self.page.get_by_test_id("workflow-row").filter(has=self.page.get_by_role("link", name=name, exact=True))

    def state_of(self, name: str) -> Locator:
        return self.row(name).get_by_test_id("workflow-state")

    def create(self, name: str, *, definition: str = "", requires_approval: bool = False) -> EditorPage:
        """New workflow → the editor of its first revision."""
        self.page.get_by_role("link", name="New workflow", exact=True).click()
        self.page.get_by_label("Name").fill(name)
        approval = self.page.get_by_label("Requires approval before publishing")
        if requires_approval:
            approval.check()
        else:
            approval.uncheck()
        if definition:
            self.page.get_by_label("Initial definition").fill(definition)
        self.page.get_by_role("button", name="Create workflow").click()
        editor = EditorPage(self.page, self.realm)
        editor.wait_until_ready()
        return editor


class WorkflowPage(CockpitPage):
    def __init__(self, page: Page, realm: str, workflow_id: str) -> None:
        super().__init__(page, realm)
        self.workflow_id = workflow_id

    def open(self) -> WorkflowPage:
        self.page.goto(f"{self.root}/workflows/{self.workflow_id}")
        return self

    @property
    def state(self) -> Locator:
        return self.page.get_by_test_id("workflow-state")

    @property
    def start_form(self) -> Locator:
        return self.page.get_by_role("region", name="Start a run")

    def start_run(
        self, subject: str, *, organization: str | None = None, certain_to_fail: bool = False
    ) -> TimelinePage:
        """Start a run by hand; ends on its timeline. A run ``certain_to_fail`` is confirmed when the
        form asks (it starts nothing before)."""
        form = self.start_form
        form.get_by_label("Subject").fill(subject)
        if organization:
            form.get_by_label("Organization").select_option(label=organization)
        form.get_by_role("button", name="Start run").click()
        if certain_to_fail:
            form = self.start_form
            expect(form.get_by_test_id("confirm-failure")).to_be_visible()
            form.get_by_label(re.compile("Start it anyway")).check()
            form.get_by_role("button", name="Start run").click()
        timeline = TimelinePage(self.page, self.realm)
        timeline.wait_until_open()
        return timeline
