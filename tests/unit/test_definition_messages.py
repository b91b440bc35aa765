"""Definition validation's words and paths: the messages a person reads, the pointers that say where,
the largest whole number a definition carries, and the grant ceiling's answer (code and what is missing)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.directory.authz import Authority, Grant
from engine.workflows.definitions import (
    Requirement,
    StaticReferences,
    canonical_json,
    required_authority,
    validate_definition,
)
from engine.workflows.definitions.authority import requirement_problem

ORG = "org_" + "1" * 26
ROLE = "rol_" + "1" * 26
GROUP = "grp_" + "1" * 26


def minimal(*steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": list(steps) or [{"id": "done", "type": "end"}],
    }


def messages(raw: Any) -> dict[str, tuple[str, str]]:
    return {issue.path: (issue.code, issue.message) for issue in validate_definition(raw)}


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")

    def __hash__(self) -> int:
        return 1


def test_a_member_name_that_cannot_be_written_as_text_is_shown_as_a_question_mark() -> None:
    assert messages({Unprintable(): 1}) == {"/?": ("not_json", "Member names are text.")}


def test_pointers_of_values_json_cannot_carry_escape_tilde_and_slash() -> None:
    found = messages({"a~b/c": float("nan")})
    assert found == {"/a~0b~1c": ("not_json", "JSON has no NaN or infinite numbers.")}


def test_a_lone_surrogate_is_named_as_such() -> None:
    found = messages({"name": "\ud800"})
    assert found == {"/name": ("not_json", "This text is not valid Unicode (a lone surrogate).")}


@pytest.mark.parametrize("number", [2**63 - 1, -(2**63) + 1])
def test_a_whole_number_of_63_bits_is_carried(number: int) -> None:
    found = messages({**minimal(), "retry": {"max_attempts": number, "backoff": "30s"}})
    assert found["/retry/max_attempts"][0] == "out_of_range"
    assert found["/retry/max_attempts"][1] != "This number is too large."


@pytest.mark.parametrize("number", [2**63, -(2**63)])
def test_a_whole_number_of_64_bits_is_too_large(number: int) -> None:
    found = messages({**minimal(), "retry": {"max_attempts": number, "backoff": "30s"}})
    assert found == {"/retry/max_attempts": ("out_of_range", "This number is too large.")}


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ({"id": "a", "type": "assign_role", "role_id": ROLE, "scope": "realm"}, "an assign_role step"),
        ({"id": "a", "type": "end"}, "an end step"),
        ({"id": "a", "type": "notify", "template": "x", "to": "subject"}, "a notify step"),
        ({"id": "a", "type": "wait", "duration": "1h"}, "a wait step"),
    ],
)
def test_an_unknown_member_of_a_step_names_the_step_type_with_its_article(step: dict[str, Any], words: str) -> None:
    found = messages(minimal({**step, "bogus": 1}))
    assert found["/steps/0/bogus"] == ("unknown_member", f"bogus is not a member of {words}.")


def test_a_text_shorter_than_its_minimum_reads_as_the_expected_form() -> None:
    found = messages(minimal({"id": "", "type": "end"}))
    assert found["/steps/0/id"] == (
        "invalid_value",
        "id must be a step id: a lowercase letter, then up to 39 lowercase letters, digits, _ or -.",
    )


def test_a_role_ceiling_not_held_names_each_permission_missing_where_it_is_missing() -> None:
    authority = Authority("user", "usr_x", [Grant(frozenset({"org.members.read"}), ORG)])
    requirement = Requirement("role_ceiling", "organization", role_id=ROLE, organization_id=ORG)
    role = ("Payroll", ["org.members.read", "org.members.write", "org.groups.write"], "organization")
    issue = requirement_problem(requirement, authority, None, "/steps/0", role=role)
    assert issue is not None
    assert (issue.code, issue.missing) == (
        "grant_ceiling_exceeded",
        (f"org.groups.write in {ORG}", f"org.members.write in {ORG}"),
    )
    held = Authority("user", "usr_x", [Grant(frozenset({"org.*"}), ORG)])
    assert requirement_problem(requirement, held, None, "/steps/0", role=role) is None


def test_a_group_ceiling_not_held_names_the_role_and_each_permission_missing() -> None:
    authority = Authority("user", "usr_x", [Grant(frozenset({"org.groups.write"}), ORG)])
    requirement = Requirement("group_ceiling", "organization", group_id=GROUP)
    roles = [("Readers", ["org.groups.write"], "organization"), ("Admins", ["realm.users.suspend"], "realm")]
    issue = requirement_problem(requirement, authority, None, "/steps/0", group_org=ORG, group_roles=roles)
    assert issue is not None
    assert (issue.code, issue.missing) == ("grant_ceiling_exceeded", ("realm.users.suspend",))
    assert issue.message == "Publishing this step needs every permission of Admins: realm.users.suspend."


def nested(depth: int) -> Any:
    """Objects nested so that the innermost value sits ``depth`` levels below the top."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_objects_nested_32_levels_are_read_and_33_are_too_deep() -> None:
    assert "too_deep" not in {code for code, _ in messages(nested(32)).values()}
    deepest = "/a" * 33
    assert messages(nested(33))[deepest] == ("too_deep", "Values are nested more than 32 levels deep here.")


def test_objects_nested_beside_a_value_json_cannot_carry_are_too_deep_from_33_levels() -> None:
    assert messages({"nan": float("nan"), "a": nested(31)}) == {
        "/nan": ("not_json", "JSON has no NaN or infinite numbers.")
    }
    found = messages({"nan": float("nan"), "a": nested(32)})
    assert found["/a" * 33][0] == "too_deep"


def test_a_value_of_65536_nodes_is_walked_and_one_of_65537_is_too_large() -> None:
    walked = messages([0] * 65534 + [{1}])  # the list and its 65,535 items
    assert walked == {"/65534": ("not_json", "A set is not a JSON value.")}
    too_many = messages([0] * 65535 + [{1}])
    assert [code for code, _ in too_many.values()] == ["too_large"]


def test_a_long_member_name_is_cut_to_60_characters_in_the_message() -> None:
    name = "m" * 100
    found = messages({**minimal(), name: 1})
    assert found["/" + name] == ("unknown_member", f"{'m' * 59}… is not a member of a definition.")
    assert messages({**minimal(), "m" * 60: 1})["/" + "m" * 60][1].startswith("m" * 60 + " is not")


def test_an_item_of_a_list_is_named_by_its_list_and_index() -> None:
    assert messages({**minimal(), "steps": [5]})["/steps/0"] == ("wrong_type", "steps[0] must be an object.")


def test_an_unknown_member_of_a_trigger_or_a_selector_names_it() -> None:
    schedule = {
        "type": "schedule",
        "every": "24h",
        "select": {"type": "role_holders", "role_id": ROLE, "granted_before": "48h", "bogus": 1},
        "bogus": 2,
    }
    found = messages({**minimal(), "triggers": [schedule]})
    assert found["/triggers/0/bogus"] == ("unknown_member", "bogus is not a member of a schedule trigger.")
    assert found["/triggers/0/select/bogus"] == ("unknown_member", "bogus is not a member of a role_holders selector.")


def test_a_permission_not_held_is_forbidden_and_names_where() -> None:
    lacking = Authority("user", "usr_x", [Grant(frozenset({"org.members.read"}), ORG)])
    requirement = Requirement("permission", "organization", permission="org.members.write", organization_id=ORG)
    issue = requirement_problem(requirement, lacking, None, "/steps/0")
    assert issue is not None
    assert (issue.code, issue.message, issue.missing) == (
        "forbidden",
        "Publishing this step needs org.members.write.",
        (f"org.members.write in {ORG}",),
    )
    holding = Authority("user", "usr_x", [Grant(frozenset({"org.members.write"}), ORG)])
    assert requirement_problem(requirement, holding, None, "/steps/0") is None


def test_a_role_that_does_not_exist_is_not_found_whatever_the_authority() -> None:
    everything = Authority("user", "usr_x", [Grant(frozenset({"*"}), None)])
    requirement = Requirement("role_ceiling", "realm", role_id=ROLE)
    issue = requirement_problem(requirement, everything, None, "/steps/0", role=None)
    assert issue is not None and issue.code == "not_found"


def test_a_fixed_value_is_named_in_the_message() -> None:
    assert messages({**minimal(), "schema_version": 2})["/schema_version"] == (
        "invalid_value",
        "schema_version must be 1.",
    )


def test_too_few_and_too_many_items_are_counted_in_words() -> None:
    assert messages({**minimal(), "triggers": []})["/triggers"] == ("too_few", "triggers needs at least 1 trigger.")
    six = [{"type": "manual"}] + [{"type": "event", "event_types": [f"user.e{i}"]} for i in range(5)]
    assert messages({**minimal(), "triggers": six})["/triggers"] == ("too_many", "triggers takes at most 5 triggers.")


def test_issues_come_in_document_order_with_indexes_of_up_to_nine_digits_as_numbers() -> None:
    issues = validate_definition({**minimal(), "!": 1, "999999999": 2, "1000000000": 3})
    assert [issue.path for issue in issues] == ["/999999999", "/!", "/1000000000"]


class Unreadable(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("cannot be read")


def test_a_value_that_breaks_while_it_is_read_is_unreadable_never_an_exception() -> None:
    assert messages(Unreadable(a=1)) == {"": ("unreadable", "The definition could not be read.")}


def test_a_definition_too_large_says_its_size_and_the_limit() -> None:
    raw = {**minimal(), "padding": "x" * 70_000}
    size = len(canonical_json(raw).encode("utf-8"))
    assert messages(raw) == {
        "": (
            "too_large",
            f"The definition is {size:,} bytes as canonical JSON; at most 65,536 bytes (64 KiB) are allowed.",
        )
    }


def test_removing_a_role_needs_its_ceiling_where_the_step_pins_it() -> None:
    step = {"id": "a", "type": "remove_role", "role_id": ROLE, "organization_id": ORG}
    assert required_authority(step) == [Requirement("role_ceiling", "role", role_id=ROLE, organization_id=ORG)]


def test_the_ids_of_a_trigger_whose_shape_is_wrong_are_not_looked_up() -> None:
    trigger = {"type": "event", "event_types": ["user.created"], "organization_id": ORG, "bogus": 1}
    found = validate_definition({**minimal(), "triggers": [trigger]}, references=StaticReferences())
    assert [(issue.path, issue.code) for issue in found] == [("/triggers/0/bogus", "unknown_member")]
    trigger.pop("bogus")
    found = validate_definition({**minimal(), "triggers": [trigger]}, references=StaticReferences())
    assert [(issue.path, issue.code) for issue in found] == [("/triggers/0/organization_id", "not_found")]


def test_an_unknown_member_of_a_retry_policy_names_it() -> None:
    found = messages({**minimal(), "retry": {"max_attempts": 2, "backoff": "30s", "bogus": 1}})
    assert found["/retry/bogus"] == ("unknown_member", "bogus is not a member of a retry policy.")


def test_the_plain_walk_passes_a_value_nested_32_levels_and_doubts_33() -> None:
    from engine.workflows.definitions import json_shape

    assert json_shape.plainly_json(nested(32))
    assert not json_shape.plainly_json(nested(33))


def all_ofs(node: Any) -> list[list[Any]]:
    if isinstance(node, dict):
        found = [node["allOf"]] if isinstance(node.get("allOf"), list) else []
        return found + [branches for value in node.values() for branches in all_ofs(value)]
    if isinstance(node, list):
        return [branches for value in node for branches in all_ofs(value)]
    return []


def test_every_all_of_of_the_contract_is_dispatched_by_type_and_nothing_else_is() -> None:
    """The schema's "if type is X then …" branches run only for their type (the validator's speed
    depends on it); a branch of any other form is evaluated as the standard says."""
    from engine.workflows.definitions import schema_messages

    lists = all_ofs(schema_messages.reporting_validator().schema)
    assert lists
    for branches in lists:
        keys = [schema_messages.dispatch_key(branch) for branch in branches]
        assert keys == [branch["if"]["properties"]["type"]["const"] for branch in branches]
    typed = {"if": {"properties": {"type": {"const": "wait"}}, "required": ["type"]}, "then": {}}
    assert schema_messages.dispatch_key(typed) == "wait"
    for other in (
        {**typed, "else": {}},
        {"if": {"properties": {"type": {"enum": ["wait"]}}, "required": ["type"]}, "then": {}},
        {"if": {"properties": {"type": {"const": 1}}, "required": ["type"]}, "then": {}},
        {"if": {"properties": {"type": {"const": "wait"}, "id": {}}, "required": ["type"]}, "then": {}},
        {"if": {"properties": {"type": {"const": "wait"}}, "required": ["id"]}, "then": {}},
        {"if": {"properties": {"type": {"const": "wait"}}}, "then": {}},
        {"if": {"properties": "type", "required": ["type"]}, "then": {}},
        {"if": "type", "then": {}},
        "branch",
    ):
        assert schema_messages.dispatch_key(other) is None, other
