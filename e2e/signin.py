"""Signing a browser in without a person: a one-time link from the API, turned into Playwright
``storage_state`` so a flow starts signed in.

    link = create_sign_in_link(api, user_id)               # POST /sign-in-links (admin token)
    state = storage_state_from_link(playwright, base_url + link.path)
    context = browser.new_context(storage_state=state)     # signed in as that user

The link is spent by the exchange; the session it opens counts as a second factor.
"""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import httpx
from playwright.sync_api import Playwright, StorageState


@dataclass(frozen=True)
class SignInLink:
    user_id: str
    url: str
    path: str
    expires_at: str


def create_sign_in_link(api: httpx.Client, user_id: str) -> SignInLink:
    """``api``: an httpx client whose base URL is ``…/api/v1/realms/<realm>`` with an admin token."""
    response = api.post("/sign-in-links", json={"user_id": user_id})
    if response.status_code != 201:
        raise AssertionError(f"POST /sign-in-links answered {response.status_code}: {response.text}")
    body: dict[str, Any] = response.json()
    return SignInLink(user_id=body["user_id"], url=body["url"], path=body["path"], expires_at=body["expires_at"])


class _SignInForm(HTMLParser):
    """The link page's form: its action and its fields (the CSRF token and the link's token)."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {key: value or "" for key, value in attrs}
        if tag == "form" and values.get("method", "").lower() == "post" and "/sign-in/link" in values.get("action", ""):
            self.action = values["action"]
            self._inside = True
        elif tag == "input" and self._inside and values.get("name"):
            self.fields[values["name"]] = values.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._inside = False


def storage_state_from_link(playwright: Playwright, link: str) -> StorageState:
    """Open ``link`` (absolute) and press its Continue, without a browser; return the cookies of
    the signed-in session as Playwright ``storage_state``."""
    request = playwright.request.new_context()
    try:
        page = request.get(link)
        if page.status != 200:
            raise AssertionError(f"the sign-in link answered {page.status}: it was used, has expired, or is wrong")
        form = _SignInForm()
        form.feed(page.text())
        if form.action is None:
            raise AssertionError("the sign-in link page has no sign-in form")
        answer = request.post(urljoin(link, form.action), form=form.fields, max_redirects=0)
        if answer.status != 303:
            raise AssertionError(f"signing in with the link answered {answer.status}")
        state: StorageState = request.storage_state()
        if not state.get("cookies"):
            raise AssertionError("signing in with the link set no session cookie")
        return state
    finally:
        request.dispose()
