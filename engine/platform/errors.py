"""The engine's one base exception and its kinds; the web layer maps each to a problem document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Issue:
    """One thing wrong with the input: a JSON pointer into the request, a code and a message.

    ``missing``: for an issue of authority, the permissions lacked, written ``p`` or ``p in org``
    (see :func:`missing_permissions`); not part of the issue's own shape in a problem document.
    """

    path: str
    code: str
    message: str
    missing: tuple[str, ...] = field(default=(), compare=False)


class EngineError(Exception):
    code = "error"
    status = 400

    def __init__(
        self,
        detail: str,
        *,
        issues: list[Issue] | None = None,
        code: str | None = None,
        members: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.issues = issues or []
        # Typed members of the problem document beside ``detail`` (``missing_permissions``,
        # ``referenced_by``): what a program needs, never only in the prose.
        self.members = members or {}
        if code:
            self.code = code


class ValidationFailed(EngineError):
    code = "validation_failed"
    status = 422


class NotFound(EngineError):
    code = "not_found"
    status = 404


class Unauthorized(EngineError):
    code = "unauthorized"
    status = 401


class Forbidden(EngineError):
    code = "forbidden"
    status = 403


class GrantCeilingExceeded(Forbidden):
    code = "grant_ceiling_exceeded"


def missing_permissions(gaps: list[str]) -> dict[str, Any]:
    """The problem member naming what the caller lacks: each ``permission`` with the
    ``organization_id`` it is lacked in (``None``: realm-wide), from gaps written ``p`` or ``p in org``."""
    out = []
    for gap in gaps:
        permission, _, scope = gap.partition(" in ")
        out.append({"permission": permission, "organization_id": scope or None})
    return {"missing_permissions": out}


class Conflict(EngineError):
    code = "conflict"
    status = 409


class TooManyRequests(EngineError):
    code = "too_many_requests"
    status = 429

    def __init__(self, detail: str, *, retry_after_s: int) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


def invalid(path: str, message: str, code: str = "invalid") -> ValidationFailed:
    """A one-issue validation failure."""
    return ValidationFailed("The request is not valid.", issues=[Issue(path, code, message)])


def error_summary(exc: BaseException, limit: int = 300) -> str:
    """What an unexpected error says, fit for a run's record: the kind of error and its first line.

    A database error's text goes on with the SQL statement, its parameters and a DETAIL line that
    can quote row values; none of that belongs in a record that operators and the API show, so
    only the driver's own first line is kept (the full error goes to the log).
    """
    inner = getattr(exc, "orig", None) or exc
    cause = inner.__cause__
    if cause is not None and type(cause).__module__.startswith("asyncpg"):
        inner = cause  # the driver's own error under SQLAlchemy's adapter: its class names the condition
    text = str(inner).strip()
    first = text.splitlines()[0].strip() if text else ""
    if first.startswith("<class '") and "'>: " in first:  # the asyncpg adapter's "<class 'x.Y'>: message"
        first = first.split("'>: ", 1)[1]
    name = inner.__class__.__name__
    return (f"{name}: {first}" if first else name)[:limit]
