"""One-time sign-in links: the page the link opens, and the button that signs in (a link is used
only by a POST, so a mail scanner following it does not spend it)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, URLEncodedBody
from litestar.response import Template

from cockpit.pages.auth.sessions import (
    anonymous_page,
    current_browser_session,
    realm_home,
    require_pre_csrf,
    signed_in,
    start_session,
)
from cockpit.state import AnyRequest, context_of
from engine.directory.realms import realm_by_slug
from engine.directory.sign_in_links import consume_sign_in_link, sign_in_link_usable
from engine.platform.errors import Unauthorized

LINK_INVALID = "This sign-in link cannot be used: it was used already, it has expired, or it is not complete."


class LinkForm(msgspec.Struct):
    token: str = ""
    csrf: str = msgspec.field(default="", name="_csrf")


class SignInLinkPages(Controller):
    """One-time sign-in links (public)."""

    path = "/realms/{realm:str}"
    include_in_schema = False

    @get("/sign-in/link", operation_id="signInLinkPage", opt={"public": True})
    async def link_page(self, request: AnyRequest, realm: FromPath[str], token: FromQuery[str] = "") -> Template:
        ctx = context_of(request.app)
        async with ctx.sessions() as session:
            realm_row = await realm_by_slug(session, realm)
            usable = bool(token) and realm_row is not None and await sign_in_link_usable(session, realm_row, token)
        if not usable:
            return anonymous_page(request, "pages/auth/link_invalid.html", slug=realm, status_code=400)
        return anonymous_page(request, "pages/auth/link.html", slug=realm, token=token)

    @post("/sign-in/link", operation_id="signInWithLink", opt={"public": True}, status_code=303)
    async def link_sign_in(
        self, request: AnyRequest, realm: FromPath[str], data: URLEncodedBody[LinkForm]
    ) -> Response[Any]:
        require_pre_csrf(request, data.csrf)
        ctx = context_of(request.app)
        async with ctx.sessions() as session, session.begin():
            realm_row = await realm_by_slug(session, realm)
            try:
                if realm_row is None or not data.token:
                    raise Unauthorized(LINK_INVALID)
                user = await consume_sign_in_link(session, realm_row, data.token)
            except Unauthorized:
                pass
            else:
                replaces = await current_browser_session(session, request)
                cookie = await start_session(session, request, user, method="sign_in_link", mfa=True, replaces=replaces)
                return signed_in(request, realm_home(realm), cookie)
        return anonymous_page(request, "pages/auth/link_invalid.html", slug=realm, status_code=400)
