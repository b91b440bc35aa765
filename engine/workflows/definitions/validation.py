"""Validation of workflow definitions: every issue at once, never an exception.

Layers, in order (each in its module beside this one):

1. **Size and JSON**: the canonical JSON is at most 64 KiB; the value is plain JSON (objects with
   string keys, arrays, strings, integers, booleans, null), nested at most 32 levels deep.
   An issue here stops validation: nothing else is worth reading.
2. **Schema**: ``definition.v1.json`` (JSON Schema 2020-12). Each schema error becomes one
   issue with a JSON pointer and a stable code; an unknown member is reported at the member
   itself (``/steps/0/script``).
3. **Semantics**, for every trigger, step and retry policy whose shape is sound: duration
   bounds, unique step ids, one manual trigger, no identical triggers, nothing after an end
   step, no organization on a realm-scope assignment.
4. **References**, when a ``ReferenceChecker`` is given: roles (and their boundary), groups,
   approvers, organizations and webhook subscriptions exist in the realm.

Paths are JSON pointers into the definition; callers that embed the definition in a request
prefix them (``/definition`` + path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.platform.errors import Issue
from engine.workflows.definitions.json_shape import _canonical_size, _json_issues, _plainly_small, _too_large
from engine.workflows.definitions.references import ReferenceChecker, _reference_issues, _reference_sites
from engine.workflows.definitions.schema_messages import _schema_issues
from engine.workflows.definitions.semantics import _semantic_issues
from engine.workflows.definitions.vocabulary import MAX_DEFINITION_BYTES, MAX_ISSUES


def _order(issue: Issue) -> tuple[tuple[int, int, str], ...]:
    key: list[tuple[int, int, str]] = []
    for segment in issue.path.split("/")[1:]:
        key.append(
            (0, int(segment), "") if segment.isascii() and segment.isdigit() and len(segment) < 10 else (1, 0, segment)
        )
    return tuple(key)


def _finish(issues: list[Issue]) -> list[Issue]:
    unique: dict[tuple[str, str], Issue] = {}
    mistyped = {issue.path for issue in issues if issue.code == "wrong_type"}
    for issue in issues:
        if issue.path in mistyped and issue.code != "wrong_type":
            continue  # "must be a whole number" says it all; "must be at least 100" would only add noise
        unique.setdefault((issue.path, issue.code), issue)
    ordered = sorted(unique.values(), key=_order)
    if len(ordered) > MAX_ISSUES:
        ordered = [
            *ordered[:MAX_ISSUES],
            Issue("", "too_many_issues", f"Only the first {MAX_ISSUES} issues are listed; fix these first."),
        ]
    return ordered


def _shape_and_semantics(raw: Any) -> tuple[list[Issue], Callable[[str], bool] | None]:
    """Layers 1 to 3: the issues, and which parts are sound (None when nothing is worth reading)."""
    size = 0 if _plainly_small(raw) else _canonical_size(raw)
    if size is not None and size > MAX_DEFINITION_BYTES:
        return [_too_large(size)], None
    problems = _json_issues(raw)
    if problems:
        return problems, None
    if size is None:  # pragma: no cover - the walk above names every value JSON cannot carry
        return [Issue("", "not_json", "The definition is not a JSON value.")], None
    issues = _schema_issues(raw)
    bad = [issue.path for issue in issues]

    def sound(path: str) -> bool:
        prefix = path + "/"
        return not any(p == path or p.startswith(prefix) for p in bad)

    if isinstance(raw, dict):
        issues.extend(_semantic_issues(raw, sound))
    return issues, sound


def validate_definition(raw: Any, *, references: ReferenceChecker | None = None) -> list[Issue]:
    """Every issue with the definition at once, in document order; an empty list when it is valid.

    Never raises for any input. With ``references``, the ids the definition names are checked
    against the realm (only in parts whose shape is sound).
    """
    try:
        issues, sound = _shape_and_semantics(raw)
        sites = _reference_sites(raw, sound) if references is not None and sound is not None else []
    except Exception:  # an input boundary answers, whatever the value
        return [Issue("", "unreadable", "The definition could not be read.")]
    if references is not None and sites:
        issues.extend(_reference_issues(sites, references))
    return _finish(issues)
