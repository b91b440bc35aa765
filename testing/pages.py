"""The HTML pages as a signed-in browser asks for them, over the app's test client."""

from __future__ import annotations

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.models import User
from testing.factories import HTML, BrowserLogin, RealmHandle, browser_session

Client = AsyncTestClient[Litestar]


async def signed_in(client: Client, realm: RealmHandle, user: User | None = None) -> BrowserLogin:
    login = await browser_session(realm, user or realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    return login


def htmx(login: BrowserLogin, target: str) -> dict[str, str]:
    return HTML | {"HX-Request": "true", "HX-Target": target, "X-CSRF-Token": login.csrf}


def step_block(page: str, step_id: str) -> str:
    """The HTML of one step of the timeline."""
    return page.split(f'id="step-{step_id}"', 1)[1].split("</li>", 1)[0]
