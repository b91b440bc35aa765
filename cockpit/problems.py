"""RFC 9457 problem details: the one error shape of the API.

Every error the API answers — ours, Litestar's 404/405/validation errors, and unexpected
exceptions (500, without a stack trace) — goes through :func:`problem_handler`. Page routes
get an HTML error page with the same status instead.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

from litestar import MediaType, Request, Response
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    PermissionDeniedException,
    SerializationException,
    ValidationException,
)
from litestar.response import Redirect, Template
from sqlalchemy.exc import DBAPIError, IntegrityError

from cockpit.middleware import loggable_path
from cockpit.pages.common import page_context
from engine.platform.errors import EngineError, TooManyRequests

log = logging.getLogger("cockpit.errors")

PROBLEM_MEDIA_TYPE = "application/problem+json"

# The code a problem answer carries when the error names none, by HTTP status.
DEFAULT_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_failed",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


# Every problem ``code`` the service answers (the document declares them as an enum, so a client
# can branch on them). A test scans the code for codes and fails on one missing here.
PROBLEM_CODES: tuple[str, ...] = (
    "already_a_member",
    "already_resolved",
    "already_started",
    "approval_required",
    "bad_request",
    "builtin_role",
    "conflict",
    "csrf_failed",
    "enrolment_needs_link",
    "error",
    "forbidden",
    "grant_ceiling_exceeded",
    "idempotency_key_in_use",
    "idempotency_key_reused",
    "internal_error",
    "last_admin",
    "malformed_json",
    "method_not_allowed",
    "mfa_enrolled",
    "mfa_not_enrolled",
    "mfa_required",
    "not_a_member",
    "not_compensation_failed",
    "not_found",
    "nothing_waits",
    "organization_inactive",
    "payload_too_large",
    "plugin_managed",
    "precondition_failed",
    "referenced_by_workflows",
    "reserved_name",
    "reviewer_not_independent",
    "role_in_use",
    "run_in_flight",
    "runs_in_flight",
    "self_action",
    "separation_of_duties",
    "subject_missing",
    "target_outranks_actor",
    "too_many_requests",
    "unauthorized",
    "unavailable",
    "unsupported_media_type",
    "user_suspended",
    "validation_failed",
)


@dataclass
class FieldError:
    path: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "code": self.code, "message": self.message}


class ProblemError(Exception):
    """Raise to answer with a problem document (the product's base API exception)."""

    def __init__(
        self,
        status: int,
        code: str | None = None,
        detail: str | None = None,
        *,
        errors: list[FieldError] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.code = code or DEFAULT_CODES.get(status, "error")
        self.detail = detail or HTTPStatus(status).phrase
        self.errors = errors or []
        self.headers = headers or {}
        super().__init__(self.detail)


@dataclass
class Problem:
    status: int
    code: str
    detail: str
    errors: list[dict[str, str]] = field(default_factory=list)
    members: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": f"https://cockpit.invalid/problems/{self.code}",
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "code": self.code,
            "detail": self.detail,
        }
        if self.errors:
            out["errors"] = self.errors
        out.update(self.members)
        return out


_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<where>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"unknown field `(?P<name>[^`]+)`")


def _pointer(where: str) -> str:
    """msgspec's ``$.a.b[2]`` as a JSON pointer ``/a/b/2``."""
    parts = re.findall(r"\.([^.\[]+)|\[(\d+)\]", where)
    return "".join("/" + (name or index).replace("~", "~0").replace("/", "~1") for name, index in parts)


def _validation_errors(exc: ValidationException) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    extra = exc.extra if isinstance(exc.extra, list) else []
    for item in extra:
        if not isinstance(item, dict):
            continue
        raw = str(item.get("message") or "invalid value")
        source = item.get("source")
        source = getattr(source, "value", source)  # Litestar's ParamType enum
        key = str(item.get("key") or "")
        if source == "path" and raw == repr(key):
            # Litestar's signature model reports every path parameter it did not get to convert
            # once the body failed ("'realm'"): not an issue of the request.
            continue
        if source and source != "body":
            out.append({"path": f"{source}:{key}", "code": "invalid", "message": raw})
            continue
        match = _AT.match(raw)
        message = match.group("message") if match else raw
        path = _pointer(match.group("where") or "") if match else ""
        if not path and key and key != "data":
            # Litestar moves msgspec's location (``$.a.b[2]``) from the message into ``key``.
            path = _pointer("." + key)
        code = "invalid"
        unknown = _UNKNOWN.search(message)
        if unknown:
            path, code, message = f"{path}/{unknown.group('name')}", "unknown_member", "is not a known member"
        elif message.startswith("Object missing required field"):
            name = message.split("`")[1] if "`" in message else ""
            path, code, message = f"{path}/{name}", "required", "is required"
        elif message.startswith("Expected"):
            code = "wrong_type"
        out.append({"path": path, "code": code, "message": message})
    if not out:
        out.append({"path": "", "code": "invalid", "message": exc.detail or "The request body is not valid JSON."})
    return out


def to_problem(exc: Exception, request: Request[Any, Any, Any] | None = None) -> tuple[Problem, dict[str, str]]:
    if isinstance(exc, EngineError):
        headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, TooManyRequests) else {}
        if exc.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        issues = [{"path": i.path, "code": i.code, "message": i.message} for i in exc.issues]
        return Problem(exc.status, exc.code, exc.detail, issues, dict(exc.members)), headers
    if isinstance(exc, RecursionError):
        return Problem(
            422,
            "validation_failed",
            "The request is nested too deeply to read.",
            [{"path": "", "code": "too_deep", "message": "values are nested too deeply"}],
        ), {}
    if isinstance(exc, DBAPIError) and {"22021", "22P05"} & {
        getattr(exc.orig, "sqlstate", None),
        getattr(exc.orig, "pgcode", None),
    }:
        # Text PostgreSQL cannot store (a NUL character): the input's fault, and nothing was changed.
        return Problem(
            422,
            "validation_failed",
            "The request contains a character that cannot be stored (NUL).",
            [{"path": "", "code": "invalid_character", "message": "text must not contain NUL characters"}],
        ), {}
    if isinstance(exc, IntegrityError) and "23505" in (
        getattr(exc.orig, "sqlstate", None),
        getattr(exc.orig, "pgcode", None),
    ):
        # A concurrent change made the same unique value first (checked-then-inserted names).
        return Problem(409, "conflict", "This conflicts with a change made at the same time; reload and retry."), {}
    if isinstance(exc, ProblemError):
        return Problem(exc.status, exc.code, exc.detail, [e.as_dict() for e in exc.errors]), exc.headers
    if isinstance(exc, ValidationException):
        errors = _validation_errors(exc)
        if request is not None and any(e["path"].startswith("/") for e in errors):
            # msgspec stops at the body's first problem: read it again for all of them at once.
            from cockpit.api.body_issues import all_body_issues

            everything = all_body_issues(request)
            if everything:
                errors = [e for e in errors if not e["path"].startswith("/")] + everything
        return Problem(422, "validation_failed", "The request is not valid.", errors), {}
    if isinstance(exc, NotAuthorizedException):
        return Problem(401, "unauthorized", exc.detail or "Credentials are missing or invalid."), dict(
            exc.headers or {}
        )
    if isinstance(exc, PermissionDeniedException):
        return Problem(403, "forbidden", exc.detail or "Forbidden."), {}
    if isinstance(exc, HTTPException) and isinstance(exc.__cause__, SerializationException):
        # The body is not JSON at all (cut short, a stray comma): nothing could be read from it.
        return Problem(
            400,
            "malformed_json",
            "The request body is not valid JSON.",
            [{"path": "", "code": "malformed_json", "message": str(exc.__cause__)}],
        ), {}
    if isinstance(exc, HTTPException):
        status = exc.status_code
        detail = exc.detail if exc.detail and status < 500 else HTTPStatus(status).phrase
        return Problem(status, DEFAULT_CODES.get(status, "error"), detail), dict(exc.headers or {})
    return Problem(500, "internal_error", "An unexpected error occurred; it has been logged."), {}


def wants_html(request: Request[Any, Any, Any]) -> bool:
    path = request.url.path
    if path.startswith("/api/") or path in {"/healthz", "/readyz", "/metrics"} or path.startswith("/schema"):
        return False
    return "text/html" in (request.headers.get("accept") or "") or request.headers.get("hx-request") == "true"


def _page_redirect(request: Request[Any, Any, Any], problem: Problem) -> Response[Any] | None:
    """Pages send people where they can fix it: sign in, or add a second factor.

    An htmx request keeps its status (401, or 403 for a missing second factor) with
    ``HX-Redirect``: htmx then loads the whole page there instead of swapping in a fragment.
    """
    slug = request.path_params.get("realm") if request.scope.get("path_params") else None
    path = request.url.path  # without its trailing slash: the realm home is /realms/{slug}
    if not slug or not (path == f"/realms/{slug}" or path.startswith(f"/realms/{slug}/")):
        return None
    if problem.status == 401:
        target = f"/realms/{slug}/sign-in?next={quote(request.url.path)}"
    elif problem.code == "mfa_required":
        target = f"/realms/{slug}/mfa?next={quote(request.url.path)}"
    else:
        return None
    if request.headers.get("hx-request") == "true":
        return Response(
            content="", status_code=problem.status, media_type=MediaType.TEXT, headers={"HX-Redirect": target}
        )
    return Redirect(target, status_code=303)


def problem_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    problem, headers = to_problem(exc, request)
    if problem.status >= 500:
        log.error("unhandled error", exc_info=exc, extra={"path": loggable_path(request.url.path)})
    if wants_html(request):
        redirect = _page_redirect(request, problem)
        if redirect is not None:
            return redirect
        return Template(
            template_name="pages/error.html",
            context=page_context(request) | {"problem": problem.body()},
            status_code=problem.status,
            headers=headers,
            media_type=MediaType.HTML,
        )
    return Response(content=problem.body(), status_code=problem.status, media_type=PROBLEM_MEDIA_TYPE, headers=headers)
