"""The runs of the realm (or of one workflow): filters and rows."""

from __future__ import annotations

from playwright.sync_api import Locator

from e2e.pages.base import CockpitPage


class RunsPage(CockpitPage):
    def open(self, *, workflow_id: str | None = None) -> RunsPage:
        query = f"?workflow_id={workflow_id}" if workflow_id else ""
        self.page.goto(f"{self.root}/runs{query}")
        return self

    def filter_state(self, state: str) -> RunsPage:
        self.page.get_by_label("State").select_option(value=state)
        return self

    def filter_subject(self, subject: str) -> RunsPage:
        self.page.get_by_role("searchbox", name="Subject").fill(subject)
        self.page.get_by_role("searchbox", name="Subject").press("Enter")
        return self

    @property
    def rows(self) -> Locator:
        return self.page.get_by_test_id("run-row")

    def row(self, run_id: str) -> Locator:
        # The list shows a run's id shortened (the whole id on hover): find the row by its data.
        return self.page.locator(f'[data-testid="run-row"][data-run-id="{run_id}"]')

    def state_of(self, run_id: str) -> Locator:
        return self.row(run_id).get_by_test_id("run-state")
