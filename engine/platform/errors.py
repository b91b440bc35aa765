"""The engine's one base exception and its kinds; the web layer maps each to a problem document."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Issue:
    """One thing wrong with the input: a JSON pointer into the request, a code and a message."""

    path: str
    code: str
    message: str


class EngineError(Exception):
    code = "error"
    status = 400

    def __init__(self, detail: str, *, issues: list[Issue] | None = None, code: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.issues = issues or []
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
