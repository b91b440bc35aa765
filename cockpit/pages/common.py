"""Shared pieces of the cockpit pages.

Page routes live under ``/realms/{realm}/`` and declare what they need in ``opt`` exactly like
the API (``permission``, ``audience``, ``public``); the same guard checks them. Unsafe requests
carry the session's CSRF token: htmx sends it as ``X-CSRF-Token`` (set on ``<body>``), plain
forms as the hidden ``_csrf`` field (``{{ csrf_field() }}``).

The same URL serves the full page, or for an htmx request aimed at one component (``HX-Request``
with ``HX-Target`` naming that component's id) just the component's fragment: a page asks
:func:`targets`, the one place that reads those headers.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.response import Template

from cockpit.auth import Principal, may_request, principal_of, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import accounts as directory_accounts
from engine.directory import principals as directory_principals
from engine.directory.authz import Authority
from engine.directory.role_assignments import create_assignment
from engine.platform.errors import EngineError, invalid

PICKER_LIMIT = 200  # how many choices a page's select offers (people, organizations, workflows)

# Links for sessions without a second factor only (to set one up).
ACCOUNT_ONLY = frozenset({"mfa"})

# The realm's navigation: (key, label, path under the realm). A link is shown
# only where its page's route lets the caller in (:func:`may_open`): no link leads to a 403 or 404.
NAV_ITEMS: tuple[tuple[str, str, str], ...] = (
    ("home", "Home", "/"),
    ("workflows", "Workflows", "/workflows"),
    ("runs", "Runs", "/runs"),
    ("attention", "Needs attention", "/attention"),
    ("approvals", "Approvals", "/approvals"),
    ("notices", "Notices", "/notices"),
    ("users", "Users", "/users"),
    ("service-principals", "Service principals", "/service-principals"),
    ("organizations", "Organizations", "/organizations"),
    ("roles", "Roles", "/roles"),
    ("webhooks", "Webhooks", "/webhooks"),
    ("templates", "Templates", "/templates"),
    ("policy", "Policy", "/policy"),
    ("tokens", "API tokens", "/tokens"),
    ("mfa", "Second factor", "/mfa"),
    ("audit", "Audit log", "/audit"),
)

# Links a wide window folds into the bar's "More" menu, so the bar stays one row from 1280 px on
# (below 1280 px every link is in the one "Menu"). The daily pages stay on the bar.
MORE_ITEMS = frozenset({"notices", "service-principals", "webhooks", "templates", "policy", "tokens", "mfa"})


def may_open(request: Request[Any, Any, Any], principal: Principal, href: str, method: str = "GET") -> bool:
    """Whether ``principal`` may follow ``href`` (a page of this app): the target route's own
    requirements, read from the route, never restated here."""
    return may_request(request.app, principal, href, method)


def nav_items(request: Request[Any, Any, Any], principal: Principal) -> list[dict[str, Any]]:
    """The navigation links this principal may follow; ``more`` marks the ones the wide bar shows
    under its "More" menu. Setting up a second factor is offered only to sessions without one."""
    base = f"/realms/{principal.realm.slug}"
    items: list[dict[str, Any]] = []
    for key, label, path in NAV_ITEMS:
        if key in ACCOUNT_ONLY and principal.audience == "admin":
            continue
        href = base + path
        if may_open(request, principal, href):
            items.append({"key": key, "label": label, "href": href, "more": key in MORE_ITEMS})
    return items


def home_href(request: Request[Any, Any, Any], principal: Principal) -> str:
    """Where "home" is for this principal: the first page of the navigation they may open
    (the realm's home; the approvals page for a session without a second factor)."""
    items = nav_items(request, principal)
    return items[0]["href"] if items else "/"


def page(
    request: Request[Any, Any, Any],
    template: str,
    *,
    nav: str | None = None,
    status_code: int = 200,
    **context: Any,
) -> Template:
    """Render ``template`` with the realm, the principal and the CSRF token in its context."""
    base = page_context(request) | {"nav": nav} | context
    return Template(template_name=template, context=base, status_code=status_code)


def page_context(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """What every page's layout needs: the request and, once the guard has read who is calling,
    the realm, the principal, the CSRF token and the navigation they may follow. Error pages
    (``cockpit/problems.py``) get it too, so a refusal keeps the realm's navigation."""
    principal = request.scope.get("state", {}).get("principal")
    base: dict[str, Any] = {"request": request, "nav": None}
    if isinstance(principal, Principal):
        items = nav_items(request, principal)
        base |= {
            "realm": principal.realm,
            "principal": principal,
            "csrf_value": principal.csrf,
            "nav_items": items,
            "home_href": items[0]["href"] if items else "/",
            "may_open": lambda href, method="GET": may_open(request, principal, href, method),
        }
    return base


def form_errors(exc: EngineError) -> dict[str, Any]:
    """What a form template needs to show an engine error: a message and per-field messages."""
    fields: dict[str, str] = {}
    for issue in exc.issues:
        fields[issue.path.lstrip("/").split("/")[0] or "_"] = issue.message
    return {"error": exc.detail, "field_errors": fields, "error_code": exc.code}


def current(request: Request[Any, Any, Any]) -> Principal:
    return principal_of(request)


def targets(request: AnyRequest, element_id: str) -> bool:
    """An htmx request for one component (not a boosted page load, whose target is the body):
    the page answers with that component's fragment alone."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-target") == element_id


def may(principal: Principal, permission: str, organization_id: str | None = None) -> bool:
    """Whether the caller holds ``permission`` (in the realm, or in ``organization_id``)."""
    return principal.authority is not None and principal.authority.holds(permission, organization_id)


def authority_of(principal: Principal) -> Authority:
    """The caller's authority, loaded by the guard for every route with a permission."""
    assert principal.authority is not None
    return principal.authority


async def form_of(request: AnyRequest) -> Any:
    return await request.form()


def field(form: Any, name: str) -> str:
    """A form's text field, or "" when it is missing or not text."""
    value = form.get(name)
    return value if isinstance(value, str) else ""


def no_user_with(email: str) -> str:
    """What a form says of an email that names no one of the realm."""
    return f"No user with the email {email.strip()} in this realm."


async def user_by_email(db_session: DbSession, realm_id: str, email: str, path: str = "/email") -> str:
    """The id of the realm's user with this email, or a field error at ``path``."""
    if not email.strip():
        raise invalid(path, "Enter the email of a user of the realm.", "required")
    user = await directory_accounts.user_by_email(db_session, realm_id, email)
    if user is None:
        raise invalid(path, no_user_with(email), "not_found")
    return user.id


async def subject_id_of(db_session: DbSession, realm_id: str, subject: str) -> str | None:
    """The user id a form's subject names: an email is looked up in the realm (None when it names
    no one); anything else is taken as a user id."""
    if "@" not in subject:
        return subject
    user = await directory_accounts.user_by_email(db_session, realm_id, subject)
    return user.id if user is not None else None


async def person_named(db_session: DbSession, realm_id: str, user_id: str) -> dict[str, str] | None:
    """A person as pages name them: the display name, and the email beside it (None for an id
    that names no one of the realm). What a run preview's heading shows."""
    user = (await directory_principals.users_by_id(db_session, realm_id, [user_id])).get(user_id)
    if user is None:
        return None
    return {"name": user.display_name or user.email, "email": user.email}


async def assign_role_from_form(
    request: AnyRequest,
    db_session: DbSession,
    principal: Principal,
    form: dict[str, str],
    *,
    user_id: str | None = None,
    service_principal_id: str | None = None,
) -> None:
    """A role assignment posted from a page (a user's or a service principal's): the engine's
    rules (grant ceiling, the holder not above the caller), in a savepoint so a refusal changes
    nothing; an ``EngineError`` is the page's to show."""
    assert principal.authority is not None  # loaded by the guard (the route has a permission)
    async with db_session.begin_nested():
        await create_assignment(
            db_session,
            principal.actor(request_id_of(request)),
            principal.authority,
            role_id=(form.get("role_id") or "").strip(),
            user_id=user_id,
            service_principal_id=service_principal_id,
            organization_id=(form.get("organization_id") or "").strip() or None,
        )
