"""The landing page of the cockpit."""

from __future__ import annotations

from litestar import Controller, Request, get
from litestar.response import Template


class HomeController(Controller):
    include_in_schema = False

    @get("/", name="home")
    async def home(self, request: Request) -> Template:  # type: ignore[type-arg]
        return Template(template_name="pages/home.html", context={"request": request})
