"""The one-line text rule every directory name and label goes through, and the search pattern."""

from __future__ import annotations

import pytest

from engine.directory.input_checks import raise_issues
from engine.directory.roles import like, text_issues
from engine.platform.errors import Issue, ValidationFailed


def test_a_text_is_checked_at_both_lengths_and_for_line_breaks() -> None:
    assert text_issues("/name", None, maximum=3) == []
    assert text_issues("/name", "abc", maximum=3) == []
    assert text_issues("/name", " a ", maximum=3) == []
    assert text_issues("/name", "", maximum=3, minimum=0) == []
    assert [(i.code, i.message) for i in text_issues("/name", "abcd", maximum=3)] == [
        ("too_long", "must be at most 3 characters")
    ]
    assert [(i.code, i.message) for i in text_issues("/name", " ", maximum=3)] == [
        ("too_short", "must be at least 1 character(s)")
    ]
    for broken in ("a\nb", "a\rb"):
        assert [(i.path, i.code, i.message) for i in text_issues("/name", broken, maximum=3)] == [
            ("/name", "invalid", "must not contain line breaks")
        ]


def test_a_name_refuses_hidden_characters_and_mixed_scripts_alone() -> None:
    hidden = text_issues("/name", "ad\u200bmin", maximum=100, name=True)
    mixed = text_issues("/name", "p\u0430ypal", maximum=100, name=True)  # a Cyrillic "а"
    assert hidden and mixed and hidden != mixed
    assert all(i.path == "/name" for i in hidden + mixed)
    assert text_issues("/name", "ad\u200bmin", maximum=100) == []


def test_a_search_matches_anywhere_and_its_wildcards_literally() -> None:
    assert like("adm") == "%adm%"
    assert like("50%_a\\b") == "%50\\%\\_a\\\\b%"


def test_every_issue_is_raised_at_once_and_none_raises_nothing() -> None:
    raise_issues([])
    issues = [Issue("/name", "too_long", "must be at most 3 characters"), Issue("/label", "too_short", "x")]
    with pytest.raises(ValidationFailed) as raised:
        raise_issues(issues)
    assert raised.value.detail == "The request is not valid." and raised.value.issues == issues
