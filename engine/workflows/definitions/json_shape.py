"""Validation's layer 1, size and JSON: the canonical JSON is at most 64 KiB; the value is plain
JSON (objects with string keys, arrays, strings, integers, booleans, null), nested at most 32
levels deep. An issue here stops validation.

Two walks give the same verdict: :func:`plainly_json`, fast, says only "certainly plain", and
:func:`json_issues_by_path` finds every issue with its path; validation asks the second only when
the first doubts. Both are public so the promise that the fast walk never passes what the other
reports can be checked on its own.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from engine.platform.errors import Issue
from engine.workflows.definitions.canonical import canonical_json
from engine.workflows.definitions.vocabulary import MAX_DEFINITION_BYTES, MAX_DEPTH, MAX_ISSUES, Parts


def _pointer(parts: Parts) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _safe_key(key: object) -> str:
    try:
        text = str(key)
    except Exception:
        return "?"
    return text if _encodable(text) else "?"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _canonical_size(raw: Any) -> int | None:
    """Bytes of the canonical JSON, or None when the value cannot be serialized."""
    try:
        return len(canonical_json(raw).encode("utf-8"))
    except Exception:
        return None


def _plainly_small(raw: Any) -> bool:
    """Whether the canonical JSON is surely within the limit, told from msgspec's encoding.

    msgspec writes the same compact JSON as the canonical form in a tenth of the time, key order
    aside (which does not change the size), except for a float's exponent: ``1e-7`` for ``1e-07``,
    ``1e16`` for ``1e+16`` — one byte less per float, and every float takes at least three bytes
    and a separator. So the canonical size is at most a third more than msgspec's; within that
    margin of the limit, the exact size is worked out the slow way.
    """
    try:
        size = len(msgspec.json.encode(raw))
    except Exception:
        return False
    return size + size // 3 < MAX_DEFINITION_BYTES


def _too_large(size: int | None) -> Issue:
    limit = f"at most {MAX_DEFINITION_BYTES:,} bytes (64 KiB) are allowed"
    if size is None:
        return Issue("", "too_large", f"The definition is larger than its canonical JSON may be: {limit}.")
    return Issue("", "too_large", f"The definition is {size:,} bytes as canonical JSON; {limit}.")


def plainly_json(raw: Any) -> bool:
    """True when :func:`json_issues_by_path` certainly finds nothing: the same walk without the paths (a
    few times cheaper), giving up at the first doubt — anything but the plain JSON types included."""
    stack: list[tuple[Any, int]] = [(raw, 0)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_DEFINITION_BYTES or depth > MAX_DEPTH:
            return False
        kind = type(value)
        if kind is str:
            if not value.isascii() and not _encodable(value):
                return False
        elif kind is dict:
            for key, item in value.items():
                if type(key) is not str or (not key.isascii() and not _encodable(key)):
                    return False
                stack.append((item, depth + 1))
        elif kind is list:
            stack.extend((item, depth + 1) for item in value)
        elif kind is int:
            if value.bit_length() > 63:
                return False
        elif kind is float:
            if not math.isfinite(value):
                return False
        elif value is not None and kind is not bool:
            return False
    return True


def _json_issues(raw: Any) -> list[Issue]:
    """Values JSON cannot carry and nesting too deep, found without recursion.

    Every node takes at least one byte of canonical JSON, so a value with more nodes than the
    byte limit is too large whatever it holds.
    """
    return [] if plainly_json(raw) else json_issues_by_path(raw)


def json_issues_by_path(raw: Any) -> list[Issue]:
    """Every value JSON cannot carry and every nesting too deep, each at its JSON pointer."""
    issues: list[Issue] = []
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    nodes = 0
    while stack:
        value, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_DEFINITION_BYTES:
            return [_too_large(None)]
        if depth > MAX_DEPTH:
            issues.append(Issue(path, "too_deep", f"Values are nested more than {MAX_DEPTH} levels deep here."))
            continue
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            if value.bit_length() > 63:
                issues.append(Issue(path, "out_of_range", "This number is too large."))
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                issues.append(Issue(path, "not_json", "JSON has no NaN or infinite numbers."))
            continue
        if isinstance(value, str):
            if not _encodable(value):
                issues.append(Issue(path, "not_json", "This text is not valid Unicode (a lone surrogate)."))
            continue
        if isinstance(value, dict):
            children: list[tuple[Any, str, int]] = []
            for key, item in value.items():
                if not isinstance(key, str):
                    issues.append(Issue(path + "/" + _escape(_safe_key(key)), "not_json", "Member names are text."))
                    continue
                if not _encodable(key):
                    issues.append(Issue(path, "not_json", "A member name is not valid Unicode (a lone surrogate)."))
                    continue
                children.append((item, path + "/" + _escape(key), depth + 1))
            stack.extend(reversed(children))
            continue
        if isinstance(value, list):
            stack.extend(reversed([(item, f"{path}/{i}", depth + 1) for i, item in enumerate(value)]))
            continue
        issues.append(Issue(path, "not_json", f"A {type(value).__name__} is not a JSON value."))
    return issues[: MAX_ISSUES + 1]


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")
