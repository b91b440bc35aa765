"""Every issue of a JSON body at once, even when it cannot be decoded.

msgspec stops at the first problem of a body (an unknown member, a wrong type). When that
happens, :func:`all_body_issues` reads the same raw body again member by member: unknown
members, missing required members, members of the wrong type — at any depth, each with its JSON
pointer (``/members/0/email``) — and, for each object whose known members decode, what its own
checks (:meth:`cockpit.api.common.Body.field_issues`) say about their values. So an unknown
member and a bad email beside it come back in one answer, at the top or inside a nested object.
"""

from __future__ import annotations

import json
import re
import types
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
    """Every issue of the request's JSON body, nested members included, or None when it cannot be re-read."""
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
    return struct_issues(document, body_type, "") or None


def struct_issues(document: dict[str, Any], struct: type[msgspec.Struct], path: str) -> list[dict[str, str]]:
    """Every issue of one object read as ``struct``, with the JSON pointers of its members below ``path``.

    Unknown, missing and wrong members are reported where they are, however deep; the members
    that read well are decoded, and when nothing else is wrong with the object, its own value
    checks (``field_issues`` of a :class:`Body`) are added — so a bad email beside an unknown
    member, at any depth, is reported too.
    """
    fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
    issues: list[dict[str, str]] = []
    known: dict[str, Any] = {}
    for name, value in document.items():
        field = fields.get(name)
        if field is None:
            issues.append(_issue(path + _pointer(name), "unknown_member", "is not a known member"))
            continue
        found = value_issues(value, field.type, path + _pointer(name))
        if found:
            issues += found
        else:
            known[name] = value
    missing = [n for n, f in fields.items() if f.required and n not in document]
    issues += [_issue(path + _pointer(n), "required", "is required") for n in missing]
    if not missing and len(known) == len([n for n in document if n in fields]) and issubclass(struct, Body):
        # Everything it has that it knows reads well: its value checks, as a first read would run them.
        try:
            decoded = msgspec.convert(known, struct, strict=True)
        except msgspec.ValidationError:
            decoded = None
        if decoded is not None:
            issues += [_issue(path + i.path, i.code, i.message) for i in decoded.field_issues()]
    return issues


def value_issues(value: Any, annotation: Any, path: str) -> list[dict[str, str]]:
    """The issues of one member's value against its declared type (objects and lists are walked)."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    arms = _arms(annotation)
    if value is None and type(None) in arms:
        return []
    structs = [a for a in arms if isinstance(a, type) and issubclass(a, msgspec.Struct)]
    if isinstance(value, dict) and len(structs) == 1:
        return struct_issues(value, structs[0], path)
    lists = [a for a in arms if typing.get_origin(a) is list]
    if isinstance(value, list) and len(lists) == 1 and not (set(arms) - {*lists, type(None), msgspec.UnsetType}):
        (item_type,) = typing.get_args(lists[0]) or (Any,)
        return [issue for index, item in enumerate(value) for issue in value_issues(item, item_type, f"{path}/{index}")]
    try:
        msgspec.convert(value, annotation, strict=True)
    except msgspec.ValidationError as exc:
        return [_first_read_issue(str(exc), path)]
    return []


def _arms(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _first_read_issue(message: str, path: str) -> dict[str, str]:
    """msgspec's message about a value, as an issue at its path."""
    path += _nested(message)
    bare = _bare(message)
    if (unknown := _UNKNOWN.search(bare)) is not None:
        return _issue(path + _pointer(unknown.group(1)), "unknown_member", "is not a known member")
    if (missing := _MISSING.search(bare)) is not None:
        return _issue(path + _pointer(missing.group(1)), "required", "is required")
    return _issue(path, "wrong_type" if message.startswith("Expected") else "invalid", bare)


def _issue(path: str, code: str, message: str) -> dict[str, str]:
    return {"path": path, "code": code, "message": message}


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
