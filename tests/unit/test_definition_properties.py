"""Properties of validation, canonical JSON and diffs over generated definitions and arbitrary values."""

from __future__ import annotations

import copy
import json
import math
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.platform.errors import Issue
from engine.workflows.definitions import (
    ISSUE_CODES,
    StaticReferences,
    canonical_json,
    definition_hash,
    line_diff,
    pretty_json,
    structured_diff,
    validate_definition,
)
from testing.definitions import MEMBER_NAMES, pinned_definitions

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


definitions = pinned_definitions()

# ---------------------------------------------------------------------------- anything at all

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.sampled_from(["30s", "1h", "approval", "manual", "end", "rol_" + "0" * 26, "usr_" + "1" * 26]),
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=6)
        | st.dictionaries(st.one_of(st.sampled_from(MEMBER_NAMES), st.text(max_size=8)), children, max_size=6)
    ),
    max_leaves=40,
)
python_values = st.recursive(
    json_scalars | st.binary(max_size=4) | st.frozensets(st.integers(), max_size=3) | st.complex_numbers(),
    lambda children: (
        st.lists(children, max_size=5)
        | st.tuples(children, children)
        | st.dictionaries(st.one_of(st.text(max_size=5), st.integers(), st.none(), st.booleans()), children, max_size=5)
    ),
    max_leaves=30,
)


def assert_well_formed(issues: Any) -> None:
    assert isinstance(issues, list)
    for issue in issues:
        assert isinstance(issue, Issue)
        assert issue.path == "" or issue.path.startswith("/")
        assert issue.code in ISSUE_CODES
        assert issue.code != "unreadable", issue  # the last-resort answer would hide a defect
        assert isinstance(issue.message, str) and issue.message


@SETTINGS
@given(json_values)
def test_any_json_value_gets_issues_never_an_exception(raw: Any) -> None:
    assert_well_formed(validate_definition(raw))
    assert_well_formed(validate_definition(raw, references=StaticReferences()))


@SETTINGS
@given(python_values)
def test_any_python_value_gets_issues_never_an_exception(raw: Any) -> None:
    issues = validate_definition(raw)
    assert_well_formed(issues)
    assert isinstance(raw, dict) or issues


# ---------------------------------------------------------------------------- mutations of valid definitions


def containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for key, item in value.items():
            found.extend(containers(item, (*path, key)))
    elif isinstance(value, list):
        found.append(path)
        for index, item in enumerate(value):
            found.extend(containers(item, (*path, index)))
    return found


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    definition: dict[str, Any] = copy.deepcopy(draw(definitions))
    for _ in range(draw(st.integers(1, 4))):
        target = at(definition, draw(st.sampled_from(containers(definition))))
        operation = draw(st.sampled_from(["delete", "insert", "swap", "duplicate"]))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if operation == "delete" and keys:
            del target[draw(st.sampled_from(keys))]
        elif operation == "insert":
            value = draw(json_values)
            if isinstance(target, dict):
                target[draw(st.sampled_from(MEMBER_NAMES))] = value
            else:
                target.insert(draw(st.integers(0, len(target))), value)
        elif operation == "swap" and keys:
            key = draw(st.sampled_from(keys))
            old = target[key]
            target[key] = draw(json_values.filter(lambda v, old=old: type(v) is not type(old)))
        elif operation == "duplicate" and keys:
            item = copy.deepcopy(target[draw(st.sampled_from(keys))])
            if isinstance(target, list):
                target.append(item)
            else:
                target[draw(st.sampled_from(MEMBER_NAMES))] = item
    return definition


@SETTINGS
@given(mutated())
def test_mutated_definitions_get_issues_never_an_exception(raw: dict[str, Any]) -> None:
    issues = validate_definition(raw, references=StaticReferences())
    assert_well_formed(issues)
    structured_diff(raw, copy.deepcopy(raw))
    if not any(i.code == "not_json" for i in issues):  # NaN has no line to show
        line_diff(raw, {})


# ---------------------------------------------------------------------------- valid definitions


def shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = [(key, shuffled(item, rng)) for key, item in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [shuffled(item, rng) for item in value]
    return value


@SETTINGS
@given(definitions, st.randoms(use_true_random=False))
def test_generated_definitions_are_valid_and_canonical_json_round_trips(
    definition: dict[str, Any], rng: random.Random
) -> None:
    assert validate_definition(definition) == []
    text = canonical_json(definition)
    assert json.loads(text) == definition
    assert canonical_json(json.loads(text)) == text
    assert json.loads(pretty_json(definition)) == definition
    reordered = shuffled(definition, rng)
    assert definition_hash(reordered) == definition_hash(definition)
    assert canonical_json(reordered) == text


@settings(SETTINGS, max_examples=100)  # two definitions per example
@given(definitions, definitions)
def test_diffs_describe_any_two_valid_definitions(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert structured_diff(old, old).changed is False
    diff = structured_diff(old, new)
    assert diff.changed == (canonical_json(old) != canonical_json(new))
    old_ids = [s["id"] for s in old["steps"]]
    new_ids = [s["id"] for s in new["steps"]]
    order = diff.steps.order
    assert [e.id for e in order if e.status != "removed"] == new_ids
    assert sorted(e.id for e in order if e.status != "added") == sorted(old_ids)
    runs = line_diff(old, new)
    assert [line for run in runs for line in run.old_lines] == pretty_json(old).splitlines()
    assert [line for run in runs for line in run.new_lines] == pretty_json(new).splitlines()


# ---------------------------------------------------------------------------- the compiled check


def reporting_issues(raw: Any) -> list[Any]:
    """The schema layer as it reports, without the compiled short cut."""
    from engine.workflows.definitions.schema_messages import reporting_validator

    return [e for e in reporting_validator().iter_errors(raw)]


@SETTINGS
@given(st.one_of(mutated(), definitions))
def test_the_compiled_check_never_accepts_what_the_reporting_validator_refuses(raw: dict[str, Any]) -> None:
    from engine.workflows.definitions.schema_messages import plainly_valid

    if plainly_valid(raw):
        assert reporting_issues(raw) == []


@SETTINGS
@given(definitions)
def test_the_compiled_check_accepts_the_valid_definitions(raw: dict[str, Any]) -> None:
    from engine.workflows.definitions.schema_messages import plainly_valid

    assert reporting_issues(raw) == []
    assert plainly_valid(raw)


def test_whole_floats_are_left_to_the_reporting_validator() -> None:
    from engine.workflows.definitions.schema_messages import plainly_valid

    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "done", "type": "end"}],
        "retry": {"max_attempts": 3.0, "backoff": "30s"},
    }
    assert not plainly_valid(definition)
    assert [i.path for i in validate_definition(definition)] == ["/retry/max_attempts"]


# ---------------------------------------------------------------------------- the walks without paths

deep_values = st.recursive(
    json_scalars | st.sampled_from(["a\x00b", "\ud800", 2**70, -(2**63) - 1, 2**63 - 1]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.one_of(st.text(max_size=4), st.sampled_from(["\x00", "k\ud800"])), children, max_size=3)
    ),
    max_leaves=60,
)


@SETTINGS
@given(st.one_of(json_values, python_values, deep_values, mutated(), definitions))
def test_the_plain_json_walk_never_passes_what_the_walk_by_path_reports(raw: Any) -> None:
    from engine.workflows.definitions.json_shape import json_issues_by_path, plainly_json

    if plainly_json(raw):
        assert json_issues_by_path(raw) == []


def test_the_plain_json_walk_passes_a_plain_definition_and_stops_at_each_doubt() -> None:
    from engine.workflows.definitions.json_shape import json_issues_by_path, plainly_json

    plain = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "é", "type": "end", "n": 2.5}]}
    assert plainly_json(plain)
    nested: Any = "leaf"
    for _ in range(40):
        nested = [nested]
    for doubtful in ({1: "x"}, {"x": 2**64}, {"x": math.inf}, {"x": "\ud800"}, {"x": b"y"}, nested):
        assert not plainly_json(doubtful)
        assert json_issues_by_path(doubtful)


@SETTINGS
@given(st.one_of(json_values, python_values, deep_values, mutated()))
def test_the_nul_walk_agrees_with_the_nul_issues(raw: Any) -> None:
    from engine.workflows.inputs import holds_nul, nul_issues

    assert holds_nul(raw) == bool(nul_issues(raw))
