"""A run's timeline: its state, steps and attempts, compensation, cancelling."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

from e2e.pages.base import CockpitPage

_RUN_URL = re.compile(r"/runs/(wrn_[^/?#]+)(?:[?#].*)?$")


class TimelinePage(CockpitPage):
    def __init__(self, page: Page, realm: str, run_id: str = "") -> None:
        super().__init__(page, realm)
        self.run_id = run_id

    def open(self, run_id: str | None = None) -> TimelinePage:
        self.run_id = run_id or self.run_id
        self.page.goto(f"{self.root}/runs/{self.run_id}")
        return self

    def wait_until_open(self) -> None:
        """After starting a run: wait for its page and learn its id."""
        expect(self.page).to_have_url(_RUN_URL)
        found = _RUN_URL.search(self.page.url)
        assert found is not None
        self.run_id = found[1]

    @property
    def url_path(self) -> str:
        return f"{self.root}/runs/{self.run_id}"

    @property
    def timeline(self) -> Locator:
        return self.page.get_by_test_id("run-timeline")

    @property
    def state(self) -> Locator:
        return self.page.get_by_test_id("run-state")

    def step(self, step_id: str) -> Locator:
        return self.page.get_by_test_id(f"step-{step_id}")

    def step_state(self, step_id: str) -> Locator:
        return self.step(step_id).get_by_test_id("step-state")

    def attempts(self, step_id: str) -> Locator:
        return self.step(step_id).get_by_test_id("attempt")

    def compensations(self) -> Locator:
        """The compensation rows, newest first (the order steps are undone in)."""
        return self.page.get_by_test_id("compensation")

    def compensation(self, step_id: str) -> Locator:
        return self.compensations().filter(has=self.page.get_by_role("cell", name=step_id, exact=True))

    def compensation_state(self, step_id: str) -> Locator:
        return self.compensation(step_id).get_by_test_id("compensation-state")

    @property
    def cancel_control(self) -> Locator:
        return self.page.get_by_test_id("cancel-run")

    @property
    def cancel_reason(self) -> Locator:
        return self.page.get_by_label("Reason")

    def open_cancel_form(self) -> None:
        self.cancel_control.get_by_text("Cancel run", exact=True).click()
        expect(self.cancel_reason).to_be_visible()

    def confirm_cancel(self) -> None:
        self.page.get_by_role("button", name="Confirm: cancel this run").click()

    def cancel(self, reason: str = "") -> None:
        self.open_cancel_form()
        if reason:
            self.cancel_reason.fill(reason)
        self.confirm_cancel()

    @property
    def cancellation(self) -> Locator:
        return self.page.get_by_test_id("cancellation")

    def follow_to(self, state: str, *, timeout_ms: int = 60_000) -> None:
        """Wait, without reloading, until the timeline shows the run in ``state``."""
        expect(self.state).to_have_text(state.replace("_", " "), timeout=timeout_ms)
