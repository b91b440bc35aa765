"""Input checks shared by the directory services: text lengths and characters, search patterns."""

from __future__ import annotations

from engine.platform.errors import Issue, ValidationFailed
from engine.platform.names import hidden_character_issues, mixed_script_issues


def text_issues(path: str, value: str | None, *, maximum: int, minimum: int = 1, name: bool = False) -> list[Issue]:
    """A one-line text of ``minimum``–``maximum`` characters (``None`` means not given).

    A ``name`` also refuses invisible and bidirectional-control characters and Latin mixed
    with Cyrillic or Greek (engine/platform/names.py).
    """
    if value is None:
        return []
    if name and (lookalike := hidden_character_issues(path, value) or mixed_script_issues(path, value)):
        return lookalike
    if len(value.strip()) < minimum:
        return [Issue(path, "too_short", f"must be at least {minimum} character(s)")]
    if len(value) > maximum:
        return [Issue(path, "too_long", f"must be at most {maximum} characters")]
    if "\n" in value or "\r" in value:
        return [Issue(path, "invalid", "must not contain line breaks")]
    return []


def raise_issues(issues: list[Issue]) -> None:
    """One 422 listing every issue, or nothing."""
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)


def like(q: str) -> str:
    """A case-insensitive ``contains`` pattern for ``q`` with LIKE's wildcards escaped."""
    return "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
