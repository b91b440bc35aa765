"""The input rules of workflows and revisions (seed 000 "Limits and validation"): a name of 1 to
100 characters without line breaks, a description of at most 500, a comment of at most 1000,
and no NUL character anywhere PostgreSQL would store it."""

from __future__ import annotations

from typing import Any

import pytest

from engine.platform.errors import Issue, ValidationFailed
from engine.workflows.definitions.vocabulary import MAX_DEFINITION_BYTES
from engine.workflows.inputs import (
    comment_issues,
    description_issues,
    holds_nul,
    name_issues,
    nul_issues,
    prefixed,
    raise_if,
)


def test_a_name_has_1_to_100_characters_counted_without_surrounding_spaces() -> None:
    assert name_issues("/name", None) == []
    assert name_issues("/name", "x") == []
    assert name_issues("/name", "  " + "n" * 100 + " ") == []
    assert name_issues("/name", "n" * 101) == [
        Issue("/name", "too_long", "A workflow name has at most 100 characters.")
    ]
    for blank in ("", "   "):
        assert name_issues("/name", blank) == [Issue("/name", "too_short", "A workflow name has 1 to 100 characters.")]


def test_a_name_has_no_line_break_nul_or_hidden_character() -> None:
    for broken in ("two\nlines", "line\u2028separator", "next\u0085line"):
        assert name_issues("/name", broken) == [Issue("/name", "invalid", "A workflow name has no line breaks.")]
    assert name_issues("/name", "a\x00b") == [
        Issue("/name", "invalid_character", "A workflow name has no NUL characters.")
    ]
    hidden = name_issues("/name", "ad\u200bmin")
    assert [(i.path, i.code) for i in hidden] == [("/name", "invisible_character")]


def test_a_description_has_at_most_500_characters_and_no_nul() -> None:
    assert description_issues("/description", None) == []
    assert description_issues("/description", "d" * 500) == []
    assert description_issues("/description", "d" * 501) == [
        Issue("/description", "too_long", "A description has at most 500 characters.")
    ]
    assert description_issues("/description", "a\x00") == [
        Issue("/description", "invalid_character", "A description has no NUL characters.")
    ]


def test_a_comment_has_at_most_1000_characters() -> None:
    assert comment_issues("/comment", None) == []
    assert comment_issues("/comment", "c" * 1000) == []
    assert comment_issues("/comment", "c" * 1001) == [
        Issue("/comment", "too_long", "A comment has at most 1000 characters.")
    ]


def test_nul_issues_name_each_place_by_its_json_pointer() -> None:
    value = {"a/b": ["ok", "x\x00"], "c~d": {"k\x00": 1}, "clean": "text"}
    assert nul_issues(value) == [
        Issue("/a~1b/1", "invalid_character", "Text must not contain NUL characters."),
        Issue("/c~0d/k\x00", "invalid_character", "Names must not contain NUL characters."),
    ]
    assert nul_issues({"steps": ["fine", 1, None, True]}) == []


@pytest.mark.parametrize(("count", "reported"), [(20, 20), (21, 20)])
def test_at_most_twenty_nul_issues_are_reported(count: int, reported: int) -> None:
    found = nul_issues(["\x00"] * count)
    assert len(found) == reported
    assert found[-1].path == f"/{reported - 1}"


def test_the_nul_walk_finds_a_nul_in_text_and_in_names_at_any_depth() -> None:
    assert holds_nul({"a": [{"b": "x\x00"}]})
    assert holds_nul({"a": [{"b\x00": "x"}]})
    assert holds_nul(["ok", ["deeper", "\x00"]])
    assert not holds_nul({"a": ["x", 1, None, {"b": 2.5}]})


def test_the_nul_walk_gives_up_after_twice_the_largest_definition_in_nodes() -> None:
    """The last node allowed is the ``2 * MAX_DEFINITION_BYTES``-th; one more and the walk answers
    True (too large to be a definition), for nul_issues to decide."""
    limit = 2 * MAX_DEFINITION_BYTES
    within: list[Any] = [0] * (limit - 1)  # the list itself is a node too
    beyond: list[Any] = [0] * limit
    assert not holds_nul(within)
    assert holds_nul(beyond)


def test_issues_are_raised_only_when_there_are_some_and_prefixed_by_their_place() -> None:
    raise_if([])
    issue = Issue("/steps/0", "invalid", "bad")
    with pytest.raises(ValidationFailed) as raised:
        raise_if([issue])
    assert raised.value.issues == [issue]
    assert raised.value.detail == "The request is not valid."
    assert prefixed([issue], "/definition") == [Issue("/definition/steps/0", "invalid", "bad")]
