"""The landing page of the cockpit and its live status widget."""

from __future__ import annotations

from litestar import Controller, Request, get
from litestar.datastructures import State
from litestar.response import Template

from cockpit.api.health import readiness

STATUS_LABELS = {
    "database": "Database reachable",
    "migrations": "Migrations at the latest revision",
    "worker": "A worker alive (heartbeat within 30 s)",
}


class HomeController(Controller):
    include_in_schema = False

    @get("/", name="home")
    async def home(self, request: Request, state: State) -> Template:  # type: ignore[type-arg]
        ready, checks = await readiness(state)
        return Template(
            template_name="pages/home.html",
            context={"request": request, "ready": ready, "checks": checks, "labels": STATUS_LABELS},
        )

    @get("/partials/status", name="status-widget")
    async def status(self, state: State) -> Template:
        ready, checks = await readiness(state)
        return Template(
            template_name="partials/_status.html", context={"ready": ready, "checks": checks, "labels": STATUS_LABELS}
        )
