"""Browser sign-in: password, the TOTP step, MFA enrolment, one-time links, sign-out.

Sessions. The ``cockpit_session`` cookie (HttpOnly, SameSite=Lax, Path=/, Secure behind TLS)
holds a random value whose SHA-256 names the session row. Every sign-in and every MFA upgrade
makes a new session (a new id and a new cookie) and revokes the one it replaces. A session with
a verified second factor (TOTP or a one-time link) is an MFA session (admin pages); without one
it is an account session (self-service only), and admin pages send it to ``/mfa``.

Forms before sign-in carry a CSRF token too: a random pre-session cookie (``cockpit_pre``) and,
in the form, its keyed digest. After sign-in the guard checks the session's own token.

Between the password and the TOTP code the half-signed-in state is a signed, five-minute cookie
(``cockpit_pending``: user, realm, expiry, where to go next). It is not a session: nothing
accepts it but the TOTP step. The secret under enrolment travels in the form encrypted and
authenticated with the operator key, bound to the user and to a deadline, so a secret typed into
the form is never accepted as it is.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec
import segno
from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, URLEncodedBody
from litestar.response import Redirect, Template
from markupsafe import Markup
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.auth import (
    PRE_SESSION_COOKIE,
    SESSION_COOKIE,
    CurrentPrincipal,
    Principal,
    client_address,
    request_id_of,
)
from cockpit.pages.common import page
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory import identity
from engine.directory.models import BrowserSession, User
from engine.platform import crypto
from engine.platform.config import Settings
from engine.platform.errors import Forbidden, TooManyRequests, Unauthorized, ValidationFailed

PENDING_COOKIE = "cockpit_pending"
PENDING_TTL = timedelta(minutes=5)
ENROLMENT_TTL = timedelta(minutes=15)
ENROLMENT_PURPOSE = "totp-enrolment"
UNKNOWN_REALMS_KEY = "unknown_realm_failures"
LINK_INVALID = "This sign-in link cannot be used: it was used already, it has expired, or it is not complete."


# --- Small pieces ---------------------------------------------------------------------------------


class SignInForm(msgspec.Struct):
    email: str = ""
    password: str = ""
    next: str = ""
    csrf: str = msgspec.field(default="", name="_csrf")


class CodeForm(msgspec.Struct):
    code: str = ""
    next: str = ""
    enrolment: str = ""
    csrf: str = msgspec.field(default="", name="_csrf")


class LinkForm(msgspec.Struct):
    token: str = ""
    csrf: str = msgspec.field(default="", name="_csrf")


def settings_of(request: AnyRequest) -> Settings:
    return context_of(request.app).settings


def realm_home(slug: str) -> str:
    return f"/realms/{slug}/"


_UNSAFE_NEXT = re.compile(r"[\x00-\x1f\\]|//|/\.\.?(/|$)")


def safe_next(slug: str, value: str | None) -> str:
    """Where to go after signing in: a relative path inside this realm, or the realm home."""
    if value and value.startswith(f"/realms/{slug}/") and not _UNSAFE_NEXT.search(value) and len(value) <= 2000:
        return value
    return realm_home(slug)


def set_cookie(response: Response[Any], settings: Settings, key: str, value: str, max_age: int | None = None) -> None:
    response.set_cookie(
        key,
        value,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.secure_cookies,
        max_age=max_age,
    )


def clear_cookie(response: Response[Any], settings: Settings, key: str) -> None:
    response.set_cookie(
        key, "", path="/", httponly=True, samesite="lax", secure=settings.secure_cookies, max_age=0, expires=0
    )


def unknown_realms(request: AnyRequest) -> identity.UnknownRealmFailures:
    state = request.app.state
    store = state.get(UNKNOWN_REALMS_KEY)
    if not isinstance(store, identity.UnknownRealmFailures):
        store = identity.UnknownRealmFailures()
        state[UNKNOWN_REALMS_KEY] = store
    return store


# --- CSRF before sign-in --------------------------------------------------------------------------


def pre_session_value(request: AnyRequest) -> tuple[str, bool]:
    """The browser's pre-session value, and whether it is new (then the response sets it)."""
    value = request.cookies.get(PRE_SESSION_COOKIE)
    if value and 20 <= len(value) <= 100:
        return value, False
    return crypto.new_token("", 24), True


def pre_csrf_token(settings: Settings, value: str) -> str:
    return crypto.sign(settings.secret_key, "csrf-pre", value)


def require_pre_csrf(request: AnyRequest, presented: str) -> None:
    value = request.cookies.get(PRE_SESSION_COOKIE)
    expected = pre_csrf_token(settings_of(request), value) if value else None
    if not presented or not expected or not crypto.constant_time_equal(presented, expected):
        raise Forbidden(
            "This form has expired or did not come from this site. Reload the page and try again.", code="csrf_failed"
        )


def anonymous_page(
    request: AnyRequest, template: str, *, slug: str, status_code: int = 200, **context: Any
) -> Template:
    """A page before sign-in: its forms carry the pre-session CSRF token."""
    settings = settings_of(request)
    value, fresh = pre_session_value(request)
    response = Template(
        template_name=template,
        context={"request": request, "realm_slug": slug, "csrf_value": pre_csrf_token(settings, value), **context},
        status_code=status_code,
    )
    if fresh:
        set_cookie(response, settings, PRE_SESSION_COOKIE, value)
    return response


# --- The half-signed-in state between password and code -------------------------------------------


@dataclass(frozen=True)
class Pending:
    user_id: str
    realm_id: str
    next: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode((text + "=" * (-len(text) % 4)).encode())


def pending_cookie(settings: Settings, user: User, next_path: str) -> str:
    expires = int((identity.now() + PENDING_TTL).timestamp())
    payload = _b64(json.dumps({"u": user.id, "r": user.realm_id, "e": expires, "n": next_path}).encode())
    return f"{payload}.{crypto.sign(settings.secret_key, 'sign-in-pending', payload)}"


def read_pending(request: AnyRequest) -> Pending | None:
    raw = request.cookies.get(PENDING_COOKIE)
    if not raw or "." not in raw:
        return None
    payload, signature = raw.rsplit(".", 1)
    expected = crypto.sign(settings_of(request).secret_key, "sign-in-pending", payload)
    if not crypto.constant_time_equal(signature, expected):
        return None
    try:
        data = json.loads(_unb64(payload))
        if int(data["e"]) <= identity.now().timestamp():
            return None
        return Pending(user_id=str(data["u"]), realm_id=str(data["r"]), next=str(data["n"]))
    except (ValueError, KeyError, TypeError):
        return None


# --- Secrets under enrolment ----------------------------------------------------------------------


def seal_enrolment(settings: Settings, user_id: str, secret: str) -> str:
    deadline = int((identity.now() + ENROLMENT_TTL).timestamp())
    return crypto.encrypt(
        settings.secret_key, ENROLMENT_PURPOSE, json.dumps({"u": user_id, "s": secret, "e": deadline})
    )


def open_enrolment(settings: Settings, user_id: str, sealed: str) -> str | None:
    """The secret sealed for this user, or None (tampered, someone else's, or too old)."""
    if not sealed:
        return None
    try:
        data = json.loads(crypto.decrypt(settings.secret_key, ENROLMENT_PURPOSE, sealed))
    except (crypto.SecretUnavailable, ValueError):
        return None
    if data.get("u") != user_id or int(data.get("e", 0)) <= identity.now().timestamp():
        return None
    secret = data.get("s")
    return secret if isinstance(secret, str) else None


def qr_svg(uri: str) -> Markup:
    svg = segno.make(uri, error="m").svg_inline(scale=5, svgclass="qr", title="QR code for your authenticator app")
    return Markup(svg)  # noqa: S704  (our own SVG, no user input beyond the escaped URI)


def grouped(secret: str) -> str:
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


# --- Sessions -------------------------------------------------------------------------------------


async def current_browser_session(session: AsyncSession, request: AnyRequest) -> BrowserSession | None:
    """The live session this browser holds now (to revoke when a new one replaces it)."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    live = await identity.resolve_session(session, cookie)
    return live.session if live else None


async def start_session(
    session: AsyncSession,
    request: AnyRequest,
    user: User,
    *,
    method: str,
    mfa: bool,
    replaces: BrowserSession | None,
) -> str:
    cookie, _ = await identity.open_session(
        session,
        user,
        method=method,
        mfa=mfa,
        client_address=client_address(request),
        user_agent=request.headers.get("user-agent"),
        replaces=replaces,
        request_id=request_id_of(request),
    )
    return cookie


def signed_in(request: AnyRequest, target: str, cookie: str) -> Redirect:
    settings = settings_of(request)
    response = Redirect(target, status_code=303)
    set_cookie(response, settings, SESSION_COOKIE, cookie)
    clear_cookie(response, settings, PENDING_COOKIE)
    return response


# --- Pages ----------------------------------------------------------------------------------------


class SignInPages(Controller):
    """Sign-in, the TOTP step, one-time links (public) and sign-out."""

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
                user = await identity.sign_in_with_password(
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
            realm_row = await identity.realm_by_slug(session, realm)
            user = await session.get(User, pending.user_id)
            if (
                realm_row is None
                or realm_row.id != pending.realm_id
                or user is None
                or user.status != "active"
                or user.totp_enabled_at is None
            ):
                return Redirect(f"/realms/{realm}/sign-in", status_code=303)
            try:
                await identity.verify_second_factor(
                    session, ctx.settings.secret_key, user, data.code, client_address(request)
                )
            except (Unauthorized, TooManyRequests) as exc:
                failure = exc
            else:
                replaces = await current_browser_session(session, request)
                cookie = await start_session(session, request, user, method="totp", mfa=True, replaces=replaces)
                return signed_in(request, safe_next(realm, pending.next), cookie)
        return self._failed(request, realm, failure, "pages/auth/totp.html")

    @get("/sign-in/link", operation_id="signInLinkPage", opt={"public": True})
    async def link_page(self, request: AnyRequest, realm: FromPath[str], token: FromQuery[str] = "") -> Template:
        ctx = context_of(request.app)
        async with ctx.sessions() as session:
            realm_row = await identity.realm_by_slug(session, realm)
            usable = (
                bool(token) and realm_row is not None and await identity.sign_in_link_usable(session, realm_row, token)
            )
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
            realm_row = await identity.realm_by_slug(session, realm)
            try:
                if realm_row is None or not data.token:
                    raise Unauthorized(LINK_INVALID)
                user = await identity.consume_sign_in_link(session, realm_row, data.token)
            except Unauthorized:
                pass
            else:
                replaces = await current_browser_session(session, request)
                cookie = await start_session(session, request, user, method="sign_in_link", mfa=True, replaces=replaces)
                return signed_in(request, realm_home(realm), cookie)
        return anonymous_page(request, "pages/auth/link_invalid.html", slug=realm, status_code=400)

    @post("/sign-out", operation_id="signOut", opt={"audience": "account"}, status_code=303)
    async def sign_out(
        self, request: AnyRequest, realm: FromPath[str], principal: CurrentPrincipal, db_session: DbSession
    ) -> Redirect:
        # The request's own session: the guard may have marked this browser session as seen in the
        # request's transaction, and a second connection updating the same row would wait for it.
        ctx = context_of(request.app)
        if principal.session_id:
            await identity.close_session(
                db_session, principal.id, principal.realm.id, principal.session_id, request_id_of(request)
            )
        response = Redirect(f"/realms/{realm}/sign-in?signed_out=1", status_code=303)
        clear_cookie(response, ctx.settings, SESSION_COOKIE)
        return response


def require_browser_session(principal: Principal) -> None:
    """Second factors are enrolled and verified by a person in a browser, never with a token."""
    if principal.via != "session" or principal.session_id is None:
        raise Forbidden("Two-step verification is set up from a browser session, not with a token.")


class MfaPages(Controller):
    """Two-step verification: enrol an authenticator app, or verify a code to upgrade a session."""

    path = "/realms/{realm:str}/mfa"
    include_in_schema = False

    @get("/", operation_id="mfaPage", opt={"audience": "account"})
    async def mfa_page(self, request: AnyRequest, principal: CurrentPrincipal) -> Template:
        require_browser_session(principal)
        ctx = context_of(request.app)
        async with ctx.sessions() as session:
            user = await session.get(User, principal.id)
        assert user is not None
        return self._render(request, principal, user, next_path=request.query_params.get("next"))

    def _render(
        self,
        request: AnyRequest,
        principal: CurrentPrincipal,
        user: User,
        *,
        next_path: str | None,
        status_code: int = 200,
        sealed: str | None = None,
        **context: Any,
    ) -> Template:
        settings = settings_of(request)
        slug = principal.realm.slug
        extra: dict[str, Any] = {}
        if user.totp_enabled_at is None:
            secret = open_enrolment(settings, user.id, sealed) if sealed else None
            if secret is None:
                secret = identity.new_totp_secret()
                sealed = seal_enrolment(settings, user.id, secret)
            uri = identity.totp_uri(secret, user.email, slug)
            extra = {"secret": grouped(secret), "raw_secret": secret, "qr": qr_svg(uri), "sealed": sealed, "uri": uri}
        return page(
            request,
            "pages/auth/mfa.html",
            nav="mfa",
            status_code=status_code,
            user=user,
            enrolled=user.totp_enabled_at is not None,
            mfa_session=principal.audience == "admin",
            next=safe_next(slug, next_path),
            **extra,
            **context,
        )

    @post("/", operation_id="verifyMfa", opt={"audience": "account"}, status_code=303)
    async def verify(
        self, request: AnyRequest, principal: CurrentPrincipal, data: URLEncodedBody[CodeForm], db_session: DbSession
    ) -> Response[Any]:
        require_browser_session(principal)
        ctx = context_of(request.app)
        slug = principal.realm.slug
        target = safe_next(slug, data.next)
        failure: ValidationFailed | Unauthorized | TooManyRequests
        # The request's own session (one transaction, committed when the handler returns, refusals
        # included): the guard may have marked the browser session this upgrade replaces as seen.
        session = db_session
        user = await session.get(User, principal.id)
        assert user is not None
        try:
            if user.totp_enabled_at is None:
                secret = open_enrolment(ctx.settings, user.id, data.enrolment)
                if secret is None:
                    raise ValidationFailed(
                        "This enrolment has expired. Add the new code below to your app and try again."
                    )
                await identity.enable_totp(session, ctx.settings.secret_key, user, secret, data.code)
            elif principal.audience == "admin":
                return Redirect(target, status_code=303)  # verified already
            else:
                await identity.verify_second_factor(
                    session, ctx.settings.secret_key, user, data.code, client_address(request)
                )
        except (ValidationFailed, Unauthorized, TooManyRequests) as exc:
            failure = exc
        else:
            if principal.via != "session" or principal.session_id is None:
                return Redirect(target, status_code=303)
            old = await session.get(BrowserSession, principal.session_id)
            cookie = await start_session(session, request, user, method="mfa_upgrade", mfa=True, replaces=old)
            return signed_in(request, target, cookie)
        response = self._render(
            request,
            principal,
            user,
            next_path=target,
            status_code=failure.status,
            sealed=data.enrolment,
            error=" ".join(issue.message for issue in failure.issues) or failure.detail,
        )
        if isinstance(failure, TooManyRequests):
            response.headers["Retry-After"] = str(failure.retry_after_s)
        return response
