"""Two-step verification: enrolling an authenticator app, or verifying a code to upgrade a session.

The secret under enrolment travels in the form encrypted and authenticated with the operator
key, bound to the user and to a deadline, so a secret typed into the form is never accepted as
it is.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import segno
from litestar import Controller, Response, get, post
from litestar.params import URLEncodedBody
from litestar.response import Redirect, Template
from markupsafe import Markup

from cockpit.auth import CurrentPrincipal, Principal, client_address
from cockpit.pages.auth.sessions import CodeForm, safe_next, settings_of, signed_in, start_session
from cockpit.pages.common import page
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory.mfa import enable_totp, new_totp_secret, totp_uri, verify_second_factor
from engine.directory.models import BrowserSession, User
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import Settings
from engine.platform.errors import Forbidden, TooManyRequests, Unauthorized, ValidationFailed

ENROLMENT_TTL = timedelta(minutes=15)
ENROLMENT_PURPOSE = "totp-enrolment"


# --- Secrets under enrolment ----------------------------------------------------------------------


def seal_enrolment(settings: Settings, user_id: str, secret: str) -> str:
    deadline = int((SYSTEM_CLOCK.now() + ENROLMENT_TTL).timestamp())
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
    if data.get("u") != user_id or int(data.get("e", 0)) <= SYSTEM_CLOCK.now().timestamp():
        return None
    secret = data.get("s")
    return secret if isinstance(secret, str) else None


def qr_svg(uri: str) -> Markup:
    svg = segno.make(uri, error="m").svg_inline(scale=5, svgclass="qr", title="QR code for your authenticator app")
    return Markup(svg)  # noqa: S704  (our own SVG, no user input beyond the escaped URI)


def grouped(secret: str) -> str:
    return " ".join(secret[i : i + 4] for i in range(0, len(secret), 4))


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
        mfa_session = principal.audience == "admin"
        if user.totp_enabled_at is None and mfa_session:
            secret = open_enrolment(settings, user.id, sealed) if sealed else None
            if secret is None:
                secret = new_totp_secret()
                sealed = seal_enrolment(settings, user.id, secret)
            uri = totp_uri(secret, user.email, slug)
            extra = {"secret": grouped(secret), "raw_secret": secret, "qr": qr_svg(uri), "sealed": sealed, "uri": uri}
        return page(
            request,
            "pages/auth/mfa.html",
            nav="mfa",
            status_code=status_code,
            user=user,
            enrolled=user.totp_enabled_at is not None,
            mfa_session=mfa_session,
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
        failure: ValidationFailed | Unauthorized | TooManyRequests | Forbidden
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
                await enable_totp(
                    session, ctx.settings.secret_key, user, secret, data.code, mfa_session=principal.audience == "admin"
                )
            elif principal.audience == "admin":
                return Redirect(target, status_code=303)  # verified already
            else:
                await verify_second_factor(
                    session,
                    ctx.settings.secret_key,
                    user,
                    data.code,
                    client_address(request),
                    realm_id=principal.realm.id,
                )
        except (ValidationFailed, Unauthorized, TooManyRequests, Forbidden) as exc:
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
