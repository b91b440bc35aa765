"""What the sign-in pages share: browser sessions, their cookies, CSRF before sign-in.

Sessions. The ``cockpit_session`` cookie (HttpOnly, SameSite=Lax, Path=/, Secure behind TLS)
holds a random value whose SHA-256 names the session row. Every sign-in and every MFA upgrade
makes a new session (a new id and a new cookie) and revokes the one it replaces. A session with
a verified second factor (TOTP or a one-time link) is an MFA session (admin pages); without one
it is an account session (self-service only), and admin pages send it to ``/mfa``.

Forms before sign-in carry a CSRF token too: a random pre-session cookie (``cockpit_pre``) and,
in the form, its keyed digest. After sign-in the guard checks the session's own token.

Between the password and the TOTP code the half-signed-in state is a signed, five-minute cookie
(``cockpit_pending``: user, realm, expiry, where to go next). It is not a session: nothing
accepts it but the TOTP step.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgspec
from litestar import Response
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.auth import PRE_SESSION_COOKIE, SESSION_COOKIE, client_address, request_id_of
from cockpit.state import AnyRequest, context_of
from engine.directory.models import BrowserSession, User
from engine.directory.sessions import open_session, resolve_session
from engine.directory.throttle import UnknownRealmFailures
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import Settings
from engine.platform.errors import Forbidden

PENDING_COOKIE = "cockpit_pending"
PENDING_TTL = timedelta(minutes=5)
UNKNOWN_REALMS_KEY = "unknown_realm_failures"


# --- Small pieces ---------------------------------------------------------------------------------


class CodeForm(msgspec.Struct):
    code: str = ""
    next: str = ""
    enrolment: str = ""
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


def unknown_realms(request: AnyRequest) -> UnknownRealmFailures:
    state = request.app.state
    store = state.get(UNKNOWN_REALMS_KEY)
    if not isinstance(store, UnknownRealmFailures):
        store = UnknownRealmFailures()
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
    expires = int((SYSTEM_CLOCK.now() + PENDING_TTL).timestamp())
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
        if int(data["e"]) <= SYSTEM_CLOCK.now().timestamp():
            return None
        return Pending(user_id=str(data["u"]), realm_id=str(data["r"]), next=str(data["n"]))
    except (ValueError, KeyError, TypeError):
        return None


# --- Sessions -------------------------------------------------------------------------------------


async def current_browser_session(session: AsyncSession, request: AnyRequest) -> BrowserSession | None:
    """The live session this browser holds now (to revoke when a new one replaces it)."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie:
        return None
    live = await resolve_session(session, cookie)
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
    cookie, _ = await open_session(
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
