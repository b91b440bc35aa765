"""A bulk action's input checks (engine/runs/controls.py ``bulk_issues``): every problem at once, each
limit on both sides."""

from __future__ import annotations

from typing import Any

import pytest

from engine.platform.errors import Issue
from engine.runs.controls import BULK_LIMIT, bulk_issues
from engine.runs.run_reads import RunFilter

RUN = "wrn_" + "1" * 26


def found(action: Any = "cancel", ids: Any = None, where: RunFilter | None = None, reason: Any = None) -> list[Issue]:
    return bulk_issues(action, ids, where, reason)


@pytest.mark.parametrize("action", ["cancel", "rerun"])
def test_cancel_and_rerun_by_ids_or_by_a_filter_are_accepted(action: str) -> None:
    assert found(action, ids=[RUN]) == []
    assert found(action, where=RunFilter(state_group="failed_any")) == []


def test_each_problem_is_named_with_its_path_code_and_words() -> None:
    assert found("explode", ids=[RUN]) == [Issue("/action", "invalid", "action is cancel or rerun")]
    assert found("cancel") == [Issue("/ids", "required", "name the runs by ids or by a filter")]
    assert found("cancel", ids=[RUN], where=RunFilter()) == [
        Issue("/filter", "conflict", "give ids or a filter, not both")
    ]
    assert found(ids=RUN) == [Issue("/ids", "invalid", "ids is a list of run ids")]
    assert found(ids=[RUN, 7]) == [Issue("/ids", "invalid", "ids is a list of run ids")]
    assert found(ids=[]) == [Issue("/ids", "too_short", "name at least one run")]
    assert found(where=RunFilter(state_group="nope")) == RunFilter(state_group="nope").issues("/filter/")
    assert found(ids=[RUN], reason=5) == [Issue("/reason", "too_long", "at most 500 characters")]
    assert found("rerun", ids=[RUN], reason="why") == [
        Issue("/reason", "not_allowed", "a reason is given for cancelling only")
    ]


def test_every_problem_is_reported_at_once() -> None:
    issues = found("explode", ids=[RUN] * (BULK_LIMIT + 1), where=RunFilter(state_group="nope"), reason="x" * 501)
    assert [issue.path for issue in issues] == ["/action", "/filter", "/ids", "/filter/state_group", "/reason"]


def test_at_most_1000_runs_by_id() -> None:
    assert BULK_LIMIT == 1000
    assert found(ids=[RUN] * 1000) == []
    assert found(ids=[RUN] * 1001) == [Issue("/ids", "too_long", "at most 1000 runs at once")]


def test_a_reason_of_at_most_500_characters() -> None:
    assert found(ids=[RUN], reason="x" * 500) == []
    assert found(ids=[RUN], reason="x" * 501) == [Issue("/reason", "too_long", "at most 500 characters")]
