"""Input rules for workflows and revisions: names, descriptions, comments, NUL characters.

Seed 000 "Limits and validation": a workflow name has 1 to 100 characters and no line break, a
description at most 500, a comment at most 1000; PostgreSQL stores no NUL character.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.platform.errors import Issue, ValidationFailed
from engine.platform.names import hidden_character_issues
from engine.workflows.definitions.vocabulary import MAX_DEFINITION_BYTES


def name_issues(path: str, name: str | None) -> list[Issue]:
    if name is None:
        return []
    stripped = name.strip()
    if not stripped:
        return [Issue(path, "too_short", "A workflow name has 1 to 100 characters.")]
    if len(stripped) > 100:
        return [Issue(path, "too_long", "A workflow name has at most 100 characters.")]
    if name.splitlines() != [name]:  # any line break, Unicode's included
        return [Issue(path, "invalid", "A workflow name has no line breaks.")]
    if "\x00" in name:
        return [Issue(path, "invalid_character", "A workflow name has no NUL characters.")]
    return hidden_character_issues(path, name)


def description_issues(path: str, description: str | None) -> list[Issue]:
    if description is not None and len(description) > 500:
        return [Issue(path, "too_long", "A description has at most 500 characters.")]
    if description is not None and "\x00" in description:
        return [Issue(path, "invalid_character", "A description has no NUL characters.")]
    return []


def holds_nul(value: Any) -> bool:
    """Is there a NUL character anywhere in the value (text or member name)? A walk without paths;
    a value too large to be a definition (or cyclic) answers True, for :func:`nul_issues` to decide."""
    stack = [value]
    nodes = 0
    while stack:
        nodes += 1
        if nodes > 2 * MAX_DEFINITION_BYTES:
            return True
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            for key, member in item.items():
                if "\x00" in str(key):
                    return True
                stack.append(member)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def nul_issues(value: Any, path: str = "", found: list[Issue] | None = None) -> list[Issue]:
    """NUL characters anywhere in a definition (PostgreSQL cannot store them); at most 20 reported."""
    found = [] if found is None else found
    if len(found) >= 20:
        return found
    if isinstance(value, str):
        if "\x00" in value:
            found.append(Issue(path, "invalid_character", "Text must not contain NUL characters."))
    elif isinstance(value, dict):
        for key, item in value.items():
            segment = str(key).replace("~", "~0").replace("/", "~1")
            if "\x00" in str(key):
                found.append(Issue(f"{path}/{segment}", "invalid_character", "Names must not contain NUL characters."))
            nul_issues(item, f"{path}/{segment}", found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            nul_issues(item, f"{path}/{index}", found)
    return found


def comment_issues(path: str, comment: str | None) -> list[Issue]:
    if comment is not None and len(comment) > 1000:
        return [Issue(path, "too_long", "A comment has at most 1000 characters.")]
    return []


def raise_if(issues: list[Issue]) -> None:
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)


def prefixed(issues: Sequence[Issue], prefix: str) -> list[Issue]:
    return [Issue(prefix + i.path, i.code, i.message) for i in issues]
