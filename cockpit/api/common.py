"""Shared pieces of the JSON API: request bodies, pages, the realm path."""

from __future__ import annotations

import re

import msgspec

from engine.platform.errors import Issue, ValidationFailed
from engine.platform.ids import is_id

REALM_BASE = "/api/v1/realms/{realm:str}"
EMAIL_PATTERN = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


class Body(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body: unknown members are refused (422 with their path).

    ``field_issues`` checks the values of the members (an email's form, a name's length); the
    handler raises them, and when the body fails to decode (an unknown member beside a bad email)
    the problem handler reports them together with the decoding issues.
    """

    def field_issues(self) -> list[Issue]:
        """The checks of the members' values; by default, those of its nested bodies, at their paths."""
        return nested_field_issues(self)


def nested_field_issues(body: Body) -> list[Issue]:
    """The ``field_issues`` of every body inside ``body`` (a member, or an item of a list member)."""
    issues: list[Issue] = []
    for field in msgspec.structs.fields(body):
        value = getattr(body, field.name)
        where = "/" + field.encode_name.replace("~", "~0").replace("/", "~1")
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if isinstance(item, Body):
                prefix = where if index is None else f"{where}/{index}"
                issues += [Issue(prefix + i.path, i.code, i.message) for i in item.field_issues()]
    return issues


def check(issues: list[Issue]) -> None:
    """Raise one 422 with every issue found, or nothing."""
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)


def text_issue(
    path: str, value: str | None, *, minimum: int = 1, maximum: int = 200, lines: bool = False
) -> list[Issue]:
    if value is None:
        return []
    stripped = value.strip()
    if len(stripped) < minimum:
        return [Issue(path, "too_short", f"must be at least {minimum} character(s)")]
    if len(value) > maximum:
        return [Issue(path, "too_long", f"must be at most {maximum} characters")]
    if not lines and ("\n" in value or "\r" in value):
        return [Issue(path, "invalid", "must not contain line breaks")]
    return []


def email_issue(path: str, value: str | None) -> list[Issue]:
    if value is None:
        return []
    if len(value) > 254 or not EMAIL_PATTERN.match(value.strip()):
        return [Issue(path, "invalid_email", "must be an email address")]
    return []


def id_issue(path: str, value: str | None, prefix: str) -> list[Issue]:
    if value is None:
        return []
    if not is_id(value, prefix):
        return [Issue(path, "invalid_id", f"must be an id starting with {prefix}_")]
    return []
