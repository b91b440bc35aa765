"""Who is calling, and may they? One guard for every realm route, API and pages alike.

Each realm route declares in ``opt`` what it needs:

- ``permission``: a catalog permission, checked with the caller's authority; with ``org_param``
  the permission is checked in the organization named by that path parameter;
- ``audience``: ``admin`` (default: an MFA session or an admin token) or ``account`` (any
  credential of a user of the realm: self-service);
- ``public``: no credential at all (sign-in pages);
- ``reads_only``: the route never writes; its session runs without transaction control.

Credentials: ``Authorization: Bearer pat_…`` or the ``cockpit_session`` cookie. A credential of
another realm gets 404, exactly like a realm that does not exist. Unsafe requests made with the
cookie must carry the session's CSRF token (``X-CSRF-Token`` header or ``_csrf`` form field).

The guard reads on the request's connection (:func:`cockpit.state.request_db`), before the
handler's transaction begins: the credential, its holder, its realm and their authorization
epochs in one statement, afresh on every request; the authority from the process's
:class:`~engine.directory.credentials.AuthorityCache` while those epochs stand, else in a second
statement (see :mod:`engine.directory.credentials`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar, Request
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.exceptions import MethodNotAllowedException, NotFoundException
from litestar.handlers.base import BaseRouteHandler
from litestar.utils.path import normalize_path

from cockpit.state import DbSession, context_of, request_db
from engine.directory import credentials
from engine.directory.audit import Actor
from engine.directory.authz import Authority
from engine.directory.credentials import RealmRow
from engine.platform import crypto
from engine.platform.errors import Forbidden, NotFound, Unauthorized

SESSION_COOKIE = "cockpit_session"
PRE_SESSION_COOKIE = "cockpit_pre"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "_csrf"
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


class MfaRequired(Forbidden):
    code = "mfa_required"


@dataclass
class Principal:
    realm: RealmRow  # the realm's row as this request read it (id, slug, name)
    type: str  # user | service_principal
    id: str
    display_name: str
    email: str | None
    audience: str  # admin | account
    via: str  # session | token
    session_id: str | None = None
    csrf: str | None = None
    authority: Authority | None = field(default=None, repr=False)
    caller: credentials.Caller | None = field(default=None, repr=False)

    @property
    def is_user(self) -> bool:
        return self.type == "user"

    def actor(self, request_id: str | None = None) -> Actor:
        mfa_session = self.via == "session" and self.audience == "admin"
        return Actor(type=self.type, id=self.id, realm_id=self.realm.id, request_id=request_id, mfa_session=mfa_session)


def csrf_for_session(operator_key: str, session_id: str) -> str:
    return crypto.sign(operator_key, "csrf", session_id)


def client_address(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    client = connection.client
    return client.host if client else "unknown"


def request_id_of(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    value = connection.scope.get("state", {}).get("request_id")
    return str(value) if value else None


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("The Authorization header must be 'Bearer <token>'.")
    return value.strip()


async def authenticate(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal | None:
    """The caller, or None when no credential was presented; :class:`Unauthorized` for a bad one.

    One statement on the request's connection (:mod:`engine.directory.credentials`): the
    credential, its holder, its realm and their authorization epochs, read afresh every time.
    """
    ctx = context_of(connection.app)
    token = _bearer(connection)
    cookie = None if token else connection.cookies.get(SESSION_COOKIE)
    if not token and not cookie:
        return None
    conn = await request_db(connection).driver()
    if token:
        caller = await credentials.check_token(conn, token)
        if caller is None:
            raise Unauthorized("The token is not valid (unknown, revoked or expired).")
    else:
        assert cookie is not None
        caller = await credentials.check_session(conn, cookie)
        if caller is None:
            raise Unauthorized("Your session has ended. Sign in again.")
    principal = Principal(
        realm=caller.realm,
        type=caller.principal_type,
        id=caller.principal_id,
        display_name=caller.display_name,
        email=caller.email,
        audience=caller.audience,
        via=caller.via,
    )
    principal.caller = caller
    if caller.via == "session":
        principal.session_id = caller.credential_id
        principal.csrf = csrf_for_session(ctx.settings.secret_key, caller.credential_id)
    return principal


async def _authority(connection: ASGIConnection[Any, Any, Any, Any], principal: Principal) -> Authority:
    """The caller's authority: kept by the process while its epochs stand, read otherwise."""
    assert principal.caller is not None
    conn = await request_db(connection).driver()
    return await context_of(connection.app).authorities.authority(conn, principal.caller)


async def _check_csrf(connection: ASGIConnection[Any, Any, Any, Any], principal: Principal) -> None:
    if principal.via != "session" or connection.scope.get("method") not in UNSAFE_METHODS:
        return
    presented = connection.headers.get(CSRF_HEADER)
    if not presented:
        content_type = connection.headers.get("content-type", "")
        if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
            request: Request[Any, Any, Any] = Request(connection.scope, connection.receive)
            form = await request.form()
            value = form.get(CSRF_FIELD)
            presented = value if isinstance(value, str) else None
    if not presented or not principal.csrf or not crypto.constant_time_equal(presented, principal.csrf):
        raise Forbidden(
            "The request is missing its CSRF token, or the token does not match this session.", code="csrf_failed"
        )


def _is_page_read(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    return connection.scope.get("method") == "GET" and not connection.scope.get("path", "").startswith("/api/")


async def realm_guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    opt = handler.opt
    slug = connection.path_params.get("realm")
    if opt.get("public") or slug is None:
        # Routes outside a realm (health, start page, static files, schema) carry no realm data.
        return
    if opt.get("reads_only"):
        request_db(connection).reads_only = True
    principal = await authenticate(connection)
    if principal is None:
        raise Unauthorized("Sign in or present a bearer token.")
    if principal.realm.slug != slug:
        raise NotFound("Not found.")
    connection.scope.setdefault("state", {})["principal"] = principal
    if not audience_admits(opt, principal):
        if opt.get("audience", "admin") == "account":
            raise Forbidden("Self-service routes are for users of the realm.")
        if principal.via == "session":
            raise MfaRequired("This needs a session with a verified second factor.")
        raise Forbidden("This needs an admin-audience credential.")
    await _check_csrf(connection, principal)
    needed = required_permission(opt, connection.path_params)
    if not needed and principal.audience == "admin" and _is_page_read(connection):
        # A page shows only the navigation and controls its caller may use: it needs the authority.
        principal.authority = await _authority(connection, principal)
    if needed:
        authority = await _authority(connection, principal)
        principal.authority = authority
        if not authority.holds(*needed):
            raise Forbidden(f"This needs the permission {needed[0]}.")


def audience_admits(opt: Mapping[str, Any], principal: Principal) -> bool:
    """Whether the route's ``audience`` lets this principal in (before any permission)."""
    if opt.get("audience", "admin") == "account":
        return principal.type == "user"
    return principal.audience == "admin"


def required_permission(opt: Mapping[str, Any], path_params: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """The permission a route declares and the organization it is checked in (None: the realm)."""
    permission = opt.get("permission")
    if not permission:
        return None
    organization_id = path_params.get(opt["org_param"]) if opt.get("org_param") else None
    return permission, organization_id


def may_request(app: Litestar, principal: Principal, path: str, method: str = "GET") -> bool:
    """Whether ``method path`` reaches a route and the guard would let ``principal`` through.

    It reads the target route's own ``opt``, so a link or button asks exactly what its page
    checks. Permissions need the principal's authority (loaded by the guard for page reads)."""
    try:
        _, handler, _, params, _ = app.asgi_router.handle_routing(
            path=normalize_path(path.split("?")[0]), method=method
        )
    except (NotFoundException, MethodNotAllowedException):
        return False
    opt = handler.opt
    slug = params.get("realm")
    if opt.get("public") or slug is None:
        return True
    if slug != principal.realm.slug or not audience_admits(opt, principal):
        return False
    needed = required_permission(opt, params)
    return needed is None or (principal.authority is not None and principal.authority.holds(*needed))


def principal_of(request: Request[Any, Any, Any]) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    if not isinstance(principal, Principal):
        raise Unauthorized("Sign in or present a bearer token.")
    return principal


async def provide_principal(request: Request[Any, Any, Any], db_session: DbSession) -> Principal:
    """The guard's principal. It names ``db_session`` (unused) only to be resolved after it: two
    dependencies of one level are resolved in a task group, which cost a request more than both."""
    del db_session
    return principal_of(request)


CurrentPrincipal = NamedDependency[Principal]
"""Handler parameter ``principal: CurrentPrincipal``: who is calling (set by the guard)."""
