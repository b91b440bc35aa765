"""Signing in with a password, the TOTP step after it, and signing out."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.auth import SESSION_COOKIE, CurrentPrincipal, client_address, request_id_of
from cockpit.pages.auth.sessions import (
    PENDING_COOKIE,
    PENDING_TTL,
    CodeForm,
    anonymous_page,
    clear_cookie,
    current_browser_session,
    pending_cookie,
    read_pending,
    require_pre_csrf,
    safe_next,
    set_cookie,
    signed_in,
    start_session,
    unknown_realms,
)
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory.mfa import SIGN_IN_AGAIN, verify_second_factor
from engine.directory.models import User
from engine.directory.passwords import sign_in_with_password
from engine.directory.realms import realm_by_slug
from engine.directory.sessions import close_session
from engine.platform.errors import TooManyRequests, Unauthorized


class SignInForm(msgspec.Struct):
    email: str = ""
    password: str = ""
    next: str = ""
    csrf: str = msgspec.field(default="", name="_csrf")


class SignInPages(Controller):
    """Sign-in with a password, the TOTP step (public) and sign-out."""

    path = "/realms/{realm:str}"
    include_in_schema = False

    @get("/sign-in", operation_id="signInPage", opt={"public": True})
    async def sign_in_page(self, request: AnyRequest, realm: FromPath[str]) -> Template:
        return anonymous_page(
            request,
            "pages/auth/sign_in.html",
            slug=realm,
            next=safe_next(realm, request.query_params.get("next")),
            email="",
            signed_out=request.query_params.get("signed_out") == "1",
        )

    @post("/sign-in", operation_id="signIn", opt={"public": True}, status_code=303)
    async def sign_in(
        self, request: AnyRequest, realm: FromPath[str], data: URLEncodedBody[SignInForm]
    ) -> Response[Any]:
        require_pre_csrf(request, data.csrf)
        ctx = context_of(request.app)
        target = safe_next(realm, data.next)
        address = client_address(request)
        failure: Unauthorized | TooManyRequests
        # Its own transaction: a failed attempt is recorded (and committed) for throttling.
        async with ctx.sessions() as session, session.begin():
            try:
                user = await sign_in_with_password(
                    session, realm, data.email, data.password, address, unknown_realms(request)
                )
            except (Unauthorized, TooManyRequests) as exc:
                failure = exc
            else:
                if user.totp_enabled_at is not None:
                    response: Response[Any] = Redirect(f"/realms/{realm}/sign-in/totp", status_code=303)
                    set_cookie(
                        response,
                        ctx.settings,
                        PENDING_COOKIE,
                        pending_cookie(ctx.settings, user, target),
                        max_age=int(PENDING_TTL.total_seconds()),
                    )
                    return response
                replaces = await current_browser_session(session, request)
                cookie = await start_session(session, request, user, method="password", mfa=False, replaces=replaces)
                return signed_in(request, target, cookie)
        return self._failed(request, realm, failure, next=target, email=data.email)

    @staticmethod
    def _failed(
        request: AnyRequest, slug: str, failure: Unauthorized | TooManyRequests, template: str = "", **context: Any
    ) -> Template:
        response = anonymous_page(
            request,
            template or "pages/auth/sign_in.html",
            slug=slug,
            status_code=failure.status,
            error=failure.detail,
            throttled=isinstance(failure, TooManyRequests),
            **context,
        )
        if isinstance(failure, TooManyRequests):
            response.headers["Retry-After"] = str(failure.retry_after_s)
        return response

    @get("/sign-in/totp", operation_id="totpPage", opt={"public": True})
    async def totp_page(self, request: AnyRequest, realm: FromPath[str]) -> Response[Any]:
        if read_pending(request) is None:
            return Redirect(f"/realms/{realm}/sign-in", status_code=303)
        return anonymous_page(request, "pages/auth/totp.html", slug=realm)

    @post("/sign-in/totp", operation_id="totpSignIn", opt={"public": True}, status_code=303)
    async def totp_sign_in(
        self, request: AnyRequest, realm: FromPath[str], data: URLEncodedBody[CodeForm]
    ) -> Response[Any]:
        require_pre_csrf(request, data.csrf)
        pending = read_pending(request)
        if pending is None:
            return Redirect(f"/realms/{realm}/sign-in", status_code=303)
        ctx = context_of(request.app)
        failure: Unauthorized | TooManyRequests
        async with ctx.sessions() as session, session.begin():
            realm_row = await realm_by_slug(session, realm)
            user = await session.get(User, pending.user_id)
            if realm_row is None or realm_row.id != pending.realm_id or user is None or user.totp_enabled_at is None:
                return Redirect(f"/realms/{realm}/sign-in", status_code=303)
            try:
                await verify_second_factor(
                    session, ctx.settings.secret_key, user, data.code, client_address(request), realm_id=realm_row.id
                )
            except (Unauthorized, TooManyRequests) as exc:
                if exc.code == SIGN_IN_AGAIN:
                    return Redirect(f"/realms/{realm}/sign-in", status_code=303)
                failure = exc
            else:
                replaces = await current_browser_session(session, request)
                cookie = await start_session(session, request, user, method="totp", mfa=True, replaces=replaces)
                return signed_in(request, safe_next(realm, pending.next), cookie)
        return self._failed(request, realm, failure, "pages/auth/totp.html")

    @post("/sign-out", operation_id="signOut", opt={"audience": "account"}, status_code=303)
    async def sign_out(
        self, request: AnyRequest, realm: FromPath[str], principal: CurrentPrincipal, db_session: DbSession
    ) -> Redirect:
        # The request's own session: the guard may have marked this browser session as seen in the
        # request's transaction, and a second connection updating the same row would wait for it.
        ctx = context_of(request.app)
        if principal.session_id:
            await close_session(
                db_session, principal.id, principal.realm.id, principal.session_id, request_id_of(request)
            )
        response = Redirect(f"/realms/{realm}/sign-in?signed_out=1", status_code=303)
        clear_cookie(response, ctx.settings, SESSION_COOKIE)
        return response
