"""The realm's home: KPI tiles, recent activity, service status."""

from __future__ import annotations

from playwright.sync_api import Locator

from e2e.pages.base import CockpitPage


class RealmHome(CockpitPage):
    def open(self) -> RealmHome:
        self.page.goto(self.root + "/")
        return self

    def kpi(self, name: str) -> Locator:
        """A tile (``active-workflows``, ``runs-in-flight``, ``failed``, ``users``…)."""
        return self.page.get_by_test_id(f"kpi-{name}")

    def kpi_value(self, name: str) -> Locator:
        return self.kpi(name).get_by_test_id("kpi-value")
