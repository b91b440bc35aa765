"""Every issue of a JSON body at once, even when it cannot be decoded.

msgspec stops at the first problem of a body (an unknown member, a wrong type). When that
happens, :func:`all_body_issues` reads the same raw body again member by member: unknown
members, missing required members, members of the wrong type, and — when the known members
decode — what the body's own checks (:meth:`cockpit.api.common.Body.field_issues`) say about
their values. So an unknown member and a bad email beside it come back in one answer.
"""

from __future__ import annotations

import json
import re
import typing
from typing import Any

import msgspec
from litestar import Request
from litestar.utils.scope.state import ScopeState

from cockpit.api.common import Body


def _body_type(request: Request[Any, Any, Any]) -> type[Body] | None:
    try:
        parameter = request.route_handler.parsed_fn_signature.parameters.get("data")
    except Exception:  # no handler, no signature: nothing to say
        return None
    if parameter is None:
        return None
    annotation: Any = parameter.annotation
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation if isinstance(annotation, type) and issubclass(annotation, Body) else None


_UNKNOWN = re.compile(r"unknown field `([^`]+)`")
_MISSING = re.compile(r"missing required field `([^`]+)`")


def _pointer(name: str) -> str:
    return "/" + name.replace("~", "~0").replace("/", "~1")


def all_body_issues(request: Request[Any, Any, Any]) -> list[dict[str, str]] | None:
    """Every top-level issue of the request's JSON body, or None when it cannot be re-read."""
    body_type = _body_type(request)
    raw = ScopeState.from_scope(request.scope).body
    if body_type is None or not isinstance(raw, bytes | bytearray):
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    fields = {f.encode_name: f for f in msgspec.structs.fields(body_type)}
    issues: list[dict[str, str]] = []
    known: dict[str, Any] = {}
    for name, value in document.items():
        field = fields.get(name)
        if field is None:
            issues.append({"path": _pointer(name), "code": "unknown_member", "message": "is not a known member"})
            continue
        try:
            msgspec.convert(value, field.type, strict=True)
        except msgspec.ValidationError as exc:
            message = str(exc)
            path = _pointer(name) + _nested(message)
            bare = _bare(message)
            if (unknown := _UNKNOWN.search(bare)) is not None:
                # A member of a nested object that it does not have: name that member, as a first read does.
                issues.append(
                    {
                        "path": path + _pointer(unknown.group(1)),
                        "code": "unknown_member",
                        "message": "is not a known member",
                    }
                )
            elif (missing := _MISSING.search(bare)) is not None:
                issues.append({"path": path + _pointer(missing.group(1)), "code": "required", "message": "is required"})
            else:
                code = "wrong_type" if message.startswith("Expected") else "invalid"
                issues.append({"path": path, "code": code, "message": bare})
            continue
        known[name] = value
    for name, field in fields.items():
        if field.required and name not in document:
            issues.append({"path": _pointer(name), "code": "required", "message": "is required"})
    if len(known) == len([n for n in document if n in fields]) and all(
        not f.required or n in document for n, f in fields.items()
    ):
        try:
            decoded = msgspec.convert(known, body_type, strict=True)
        except msgspec.ValidationError:
            decoded = None
        if decoded is not None:
            issues += [{"path": i.path, "code": i.code, "message": i.message} for i in decoded.field_issues()]
    return issues or None


def _nested(message: str) -> str:
    """msgspec's ``- at `$.a[0]``` suffix as a pointer below the member."""
    marker = " - at `$"
    if marker not in message:
        return ""
    where = message.split(marker, 1)[1].rstrip("`")
    out = ""
    for part in where.replace("]", "").replace("[", ".").split("."):
        if part:
            out += "/" + part
    return out


def _bare(message: str) -> str:
    return message.split(" - at `$", 1)[0]
