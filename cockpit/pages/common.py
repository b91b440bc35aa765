"""Shared pieces of the cockpit pages.

Page routes live under ``/realms/{realm}/`` and declare what they need in ``opt`` exactly like
the API (``permission``, ``audience``, ``public``); the same guard checks them. Unsafe requests
carry the session's CSRF token: htmx sends it as ``X-CSRF-Token`` (set on ``<body>``), plain
forms as the hidden ``_csrf`` field (``{{ csrf_field() }}``).

The same URL serves the full page, or for an htmx request (``HX-Request``, not a boosted
navigation) just the fragment named by ``fragment``.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.response import Template

from cockpit.auth import Principal, principal_of
from engine.platform.errors import EngineError


def page(
    request: Request[Any, Any, Any],
    template: str,
    *,
    nav: str | None = None,
    fragment: str | None = None,
    status_code: int = 200,
    **context: Any,
) -> Template:
    """Render ``template`` with the realm, the principal and the CSRF token in its context."""
    principal = request.scope.get("state", {}).get("principal")
    base: dict[str, Any] = {"request": request, "nav": nav}
    if isinstance(principal, Principal):
        base |= {"realm": principal.realm, "principal": principal, "csrf_value": principal.csrf}
    base |= context
    # A boosted navigation (hx-boost) is an htmx request too, but wants the whole page.
    partial = request.headers.get("hx-request") == "true" and request.headers.get("hx-boosted") != "true"
    name = fragment if fragment and partial else template
    return Template(template_name=name, context=base, status_code=status_code)


def form_errors(exc: EngineError) -> dict[str, Any]:
    """What a form template needs to show an engine error: a message and per-field messages."""
    fields: dict[str, str] = {}
    for issue in exc.issues:
        fields[issue.path.lstrip("/").split("/")[0] or "_"] = issue.message
    return {"error": exc.detail, "field_errors": fields, "error_code": exc.code}


def current(request: Request[Any, Any, Any]) -> Principal:
    return principal_of(request)
