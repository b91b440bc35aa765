"""Edges of the definition modules: the sentences a duration check gives, canonical texts, issue order."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engine.directory.authz import Authority, Grant
from engine.platform.errors import Issue
from engine.workflows.definitions import (
    CONTRACT_NAMES,
    Bounds,
    Requirement,
    StaticReferences,
    authored_json,
    canonical_json,
    contract,
    format_duration,
    input_version,
    parse_duration,
    pretty_json,
    required_authority,
    shared_contract,
    validate_definition,
)
from engine.workflows.definitions.authority import requirement_problem
from engine.workflows.definitions.canonical import canonical_bytes
from engine.workflows.definitions.json_shape import json_issues_by_path, plainly_json
from engine.workflows.definitions.schema_messages import _map_error, plainly_valid
from engine.workflows.definitions.validation import _finish, _order
from engine.workflows.definitions.vocabulary import MAX_ISSUES


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (30, "A duration is a string such as 30s, 15m or 72h."),
        ("30 s", "A duration is a whole number followed by s, m or h, such as 30s, 15m or 72h."),
        ("0s", "must be at least 1m."),
        ("59s", "must be at least 1m."),
        ("2h", "must be at most 90m."),
    ],
)
def test_a_duration_check_gives_its_reason_as_a_sentence(text: Any, reason: str) -> None:
    assert Bounds(60, 5400).check(text) == reason


def test_a_duration_within_its_bounds_has_no_reason() -> None:
    bounds = Bounds(60, 5400)
    assert bounds.check("1m") is None
    assert bounds.check("90m") is None
    assert bounds.describe() == "1m to 90m"


def test_parse_and_format_refusals_say_why() -> None:
    with pytest.raises(ValueError, match=r"^A duration must be positive\.$"):
        parse_duration("0h")
    with pytest.raises(ValueError, match=r"^A duration must be a positive whole number of seconds\.$"):
        format_duration(-5)
    with pytest.raises(ValueError):
        format_duration(True)
    with pytest.raises(ValueError):
        format_duration("60")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- canonical texts


def test_authored_json_keeps_the_authors_key_order_with_two_spaces() -> None:
    assert authored_json({"b": [1], "a": "é"}) == '{\n  "b": [\n    1\n  ],\n  "a": "é"\n}'


@pytest.mark.parametrize("render", [canonical_json, pretty_json, authored_json, canonical_bytes])
def test_every_rendering_refuses_infinity(render: Any) -> None:
    with pytest.raises(ValueError):
        render({"x": float("inf")})


def test_canonical_bytes_are_utf8() -> None:
    assert canonical_bytes({"a": "é"}) == '{"a":"é"}'.encode()


@pytest.mark.parametrize(
    ("revision", "digest", "version", "reason"),
    [
        (0, "a" * 16, 1, "The revision number must be a positive integer."),
        (1.0, "a" * 16, 1, "The revision number must be a positive integer."),
        (1, "a" * 15, 1, "The definition hash must be at least 16 lowercase hex digits."),
        (1, 16, 1, "The definition hash must be at least 16 lowercase hex digits."),
        (1, "a" * 16, False, "The run input version must be an integer or a string."),
        (1, "a" * 16, 1.5, "The run input version must be an integer or a string."),
        (1, "a" * 16, "", "The run input version must be non-empty and contain no colon."),
        (1, "a" * 16, "a:b", "The run input version must be non-empty and contain no colon."),
    ],
)
def test_input_version_refusals_say_which_part_is_wrong(revision: Any, digest: Any, version: Any, reason: str) -> None:
    with pytest.raises(ValueError) as raised:
        input_version(revision, digest, version)
    assert str(raised.value) == reason


def test_input_version_takes_a_hash_of_exactly_16_digits_and_the_first_revision() -> None:
    assert input_version(1, "0123456789abcdef", 7) == "r1:0123456789abcdef:i7"
    assert input_version(1, "0123456789abcdef0", "x") == "r1:0123456789abcdef:ix"


# ---------------------------------------------------------------------------- the packaged contracts


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_the_shared_contract_is_the_loaded_one_itself(name: str) -> None:
    shared = shared_contract(name)
    assert shared is shared_contract(name)
    assert shared == contract(name)
    assert contract(name) is not shared
    assert shared["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("name", ["definition.v2.json", "../pyproject.toml", ""])
def test_the_shared_contract_refuses_any_other_name(name: str) -> None:
    with pytest.raises(KeyError):
        shared_contract(name)


# ---------------------------------------------------------------------------- issue order and the cut


def test_issues_sort_by_index_then_by_name_and_long_digit_runs_sort_as_names() -> None:
    paths = ["/b", "/10", "/9", "/a/1", "/", "/0123456789", "/999999999", "/٣"]
    ordered = [issue.path for issue in sorted((Issue(p, "x", "m") for p in paths), key=_order)]
    assert ordered == ["/9", "/10", "/999999999", "/", "/0123456789", "/a/1", "/b", "/٣"]


def test_more_issues_than_the_cap_end_with_one_that_says_so() -> None:
    issues = [Issue(f"/m/{i}", "unknown_member", "m") for i in range(MAX_ISSUES + 1)]
    finished = _finish(issues)
    assert len(finished) == MAX_ISSUES + 1
    assert finished[-1] == Issue(
        "", "too_many_issues", f"Only the first {MAX_ISSUES} issues are listed; fix these first."
    )
    assert _finish(issues[:MAX_ISSUES]) == issues[:MAX_ISSUES]


def test_a_mistyped_member_gets_only_its_type_issue_once() -> None:
    issues = [
        Issue("/a", "out_of_range", "too small"),
        Issue("/a", "wrong_type", "must be a whole number"),
        Issue("/a", "wrong_type", "again"),
        Issue("/b", "out_of_range", "too small"),
    ]
    assert _finish(issues) == [issues[1], issues[3]]


# ---------------------------------------------------------------------------- where authority is needed

ORG, RUN_ORG, GROUP_ORG = "org_" + "1" * 26, "org_" + "2" * 26, "org_" + "3" * 26
ROLE, GROUP = "rol_" + "1" * 26, "grp_" + "1" * 26


def test_a_vanished_group_is_missing_whatever_the_authority() -> None:
    everything = Authority("user", "usr_x", [Grant(frozenset({"*"}), None)])
    for requirement in required_authority({"type": "add_to_group", "group_id": GROUP}):
        assert requirement_problem(requirement, everything, RUN_ORG, "/steps/1", group_exists=False) == Issue(
            "/steps/1", "group_missing", "The step names a group that does not exist."
        )


def test_an_unpinned_permission_is_needed_in_the_runs_organization() -> None:
    requirement = Requirement("permission", "organization", permission="org.members.write")
    in_run_org = Authority("user", "usr_x", [Grant(frozenset({"org.members.write"}), RUN_ORG)])
    assert requirement_problem(requirement, in_run_org, RUN_ORG, "/steps/0") is None
    issue = requirement_problem(requirement, in_run_org, ORG, "/steps/0")
    assert issue is not None and issue.missing == (f"org.members.write in {ORG}",)


def test_a_group_permission_is_needed_in_the_groups_organization() -> None:
    requirement = Requirement("permission", "organization", permission="org.groups.write", group_id=GROUP)
    in_group_org = Authority("user", "usr_x", [Grant(frozenset({"org.groups.write"}), GROUP_ORG)])
    assert requirement_problem(requirement, in_group_org, RUN_ORG, "/steps/0", group_org=GROUP_ORG) is None
    in_run_org = Authority("user", "usr_x", [Grant(frozenset({"org.groups.write"}), RUN_ORG)])
    issue = requirement_problem(requirement, in_run_org, RUN_ORG, "/steps/0", group_org=GROUP_ORG)
    assert issue is not None and issue.missing == (f"org.groups.write in {GROUP_ORG}",)


def test_a_realm_permission_is_needed_realm_wide() -> None:
    requirement = Requirement("permission", "realm", permission="realm.users.suspend")
    in_org = Authority("user", "usr_x", [Grant(frozenset({"realm.users.suspend"}), RUN_ORG)])
    issue = requirement_problem(requirement, in_org, RUN_ORG, "/steps/0")
    assert issue is not None and issue.missing == ("realm.users.suspend",)


def test_a_role_ceiling_follows_the_roles_boundary_then_the_runs_organization() -> None:
    org_role = ("Payroll", ["org.members.write"], "organization")
    realm_role = ("Auditor", ["realm.audit.read"], "realm")
    unpinned = Requirement("role_ceiling", "organization", role_id=ROLE)
    in_run_org = Authority("user", "usr_x", [Grant(frozenset({"org.members.write", "realm.audit.read"}), RUN_ORG)])
    assert requirement_problem(unpinned, in_run_org, RUN_ORG, "/steps/0", role=org_role) is None
    issue = requirement_problem(unpinned, in_run_org, RUN_ORG, "/steps/0", role=realm_role)
    assert issue is not None
    assert (issue.code, issue.message, issue.missing) == (
        "grant_ceiling_exceeded",
        "Publishing this step needs every permission of Auditor: realm.audit.read.",
        ("realm.audit.read",),
    )
    realm_scope = Requirement("role_ceiling", "realm", role_id=ROLE)
    issue = requirement_problem(realm_scope, in_run_org, RUN_ORG, "/steps/0", role=org_role)
    assert issue is not None and issue.missing == ("org.members.write",)


def test_a_group_ceiling_reads_organization_roles_in_the_groups_organization() -> None:
    requirement = Requirement("group_ceiling", "organization", group_id=GROUP)
    roles = [("Readers", ["org.members.read"], "organization")]
    in_group_org = Authority("user", "usr_x", [Grant(frozenset({"org.members.read"}), GROUP_ORG)])
    assert requirement_problem(requirement, in_group_org, RUN_ORG, "/s", group_org=GROUP_ORG, group_roles=roles) is None
    issue = requirement_problem(requirement, in_group_org, RUN_ORG, "/s", group_org=ORG, group_roles=roles)
    assert issue is not None and issue.missing == (f"org.members.read in {ORG}",)


# ---------------------------------------------------------------------------- the two JSON walks


def nested_objects(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "raw",
    [
        [0] * 65535,  # 65,536 nodes: the list and its items
        nested_objects(32),
        {"é": "ü", "a": ["ß", None, True, False, 1.5]},
        [2**63 - 1, -(2**63) + 1],
        None,
    ],
)
def test_the_fast_walk_is_certain_of_plain_json_up_to_the_limits(raw: Any) -> None:
    assert plainly_json(raw) is True
    assert json_issues_by_path(raw) == []


@pytest.mark.parametrize(
    "raw", [[0] * 65536, nested_objects(33), 2**63, {"a": "\ud800"}, {"\ud800": 0}, {1: 0}, float("nan"), {"x": {1}}]
)
def test_the_fast_walk_doubts_past_the_limits_or_outside_plain_json(raw: Any) -> None:
    assert plainly_json(raw) is False


def test_the_walk_by_path_lists_one_issue_more_than_the_cap() -> None:
    issues = json_issues_by_path({f"m{i}": float("nan") for i in range(MAX_ISSUES + 50)})
    assert len(issues) == MAX_ISSUES + 1
    found = validate_definition({f"m{i}": float("nan") for i in range(MAX_ISSUES + 50)})
    assert len(found) == MAX_ISSUES + 1 and found[-1].code == "too_many_issues"


def test_a_large_definition_with_a_member_name_msgspec_cannot_write_is_too_large() -> None:
    raw = {"schema_version": 1, "padding": "x" * 70_000, "x": {None: 1}}
    assert [issue.code for issue in validate_definition(raw)] == ["too_large"]


def test_references_are_not_looked_up_in_a_definition_that_is_not_plain_json() -> None:
    raw = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "a", "type": "assign_role", "role_id": ROLE, "scope": "realm"}],
        "x": float("nan"),
    }
    found = validate_definition(raw, references=StaticReferences(known_roles={ROLE: "realm"}))
    assert found == [Issue("/x", "not_json", "JSON has no NaN or infinite numbers.")]


def test_a_role_ceiling_that_names_no_role_asks_nothing() -> None:
    nobody = Authority("user", "usr_x", [])
    assert requirement_problem(Requirement("role_ceiling", "realm"), nobody, RUN_ORG, "/steps/0") is None
    assert requirement_problem(Requirement("group_ceiling", "organization"), nobody, RUN_ORG, "/steps/0") is None


# --- schema_messages.py ---------------------------------------------------------------------------


def _manual() -> dict[str, Any]:
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


def test_a_selector_without_a_known_type_is_named_as_a_selector() -> None:
    schedule = {"type": "schedule", "every": "24h", "select": {}}
    found = {i.path: i.message for i in validate_definition({**_manual(), "triggers": [schedule]})}
    assert found["/triggers/0/select/type"] == "type is required in a selector."


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        ({"type": "string", "maxLength": 3}, "abcd", "The definition must be at most 3 characters long."),
        ({"type": "string", "minLength": 2}, "a", "The definition must be at least 2 characters long."),
        ({"type": "string", "maxLength": 3, "title": "a code"}, "abcd", "The definition must be a code."),
    ],
)
def test_a_length_bound_without_a_title_says_its_bound(schema: dict[str, Any], value: str, message: str) -> None:
    """Every length bound of the shipped contract has a title; one without gets its bound in words."""
    (error,) = Draft202012Validator(schema).iter_errors(value)
    assert _map_error(error) == Issue("", "invalid_value", message)


def test_the_compiled_check_answers_for_a_plain_valid_definition() -> None:
    """The fast yes of the compiled contract is taken for plain JSON without floats (and only then)."""
    assert plainly_valid(_manual()) is True
    assert plainly_valid({**_manual(), "triggers": [{"type": "manual"}], "x": 1}) is False
    assert plainly_valid({**_manual(), "retry": {"max_attempts": 3.0}}) is False
