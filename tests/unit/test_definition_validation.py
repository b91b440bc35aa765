"""TestWorkflowValidation: the definition contract, its limits at their boundaries, and reference checks."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engine.platform.errors import Issue
from engine.workflows.definitions import (
    BOUNDS,
    CONTRACT_NAMES,
    ISSUE_CODES,
    MAX_DEFINITION_BYTES,
    ReferenceChecker,
    References,
    Requirement,
    StaticReferences,
    canonical_json,
    collect_references,
    contract,
    format_duration,
    parse_duration,
    required_authority,
    validate_definition,
)


def rid(prefix: str, n: int = 0) -> str:
    return f"{prefix}_{n:026d}"


ORG, ORG2 = rid("org", 1), rid("org", 2)
ORG_ROLE, REALM_ROLE = rid("rol", 1), rid("rol", 2)
GROUP = rid("grp", 1)
ALICE, BOB = rid("usr", 1), rid("usr", 2)
HOOK = rid("whk", 1)


def seed_definition() -> dict[str, Any]:
    """The example definition of the product documentation, with real-looking ids."""
    return {
        "schema_version": 1,
        "triggers": [
            {"type": "event", "event_types": ["organization.membership.added"], "organization_id": ORG},
            {
                "type": "schedule",
                "every": "720h",
                "select": {"type": "role_holders", "role_id": ORG_ROLE, "granted_before": "2160h"},
            },
            {"type": "manual"},
        ],
        "steps": [
            {"id": "approve", "type": "approval", "approvers": [ALICE], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": ORG_ROLE, "scope": "organization", "expires_in": "720h"},
            {"id": "team", "type": "add_to_group", "group_id": GROUP},
            {"id": "tell", "type": "notify", "notice": "access_granted"},
            {
                "id": "sync",
                "type": "call_webhook",
                "subscription_id": HOOK,
                "compensate": True,
                "retry": {"max_attempts": 5, "backoff": "30s"},
            },
            {"id": "done", "type": "end"},
        ],
        "retry": {"max_attempts": 3, "backoff": "30s"},
    }


def minimal(*steps: dict[str, Any], triggers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": triggers if triggers is not None else [{"type": "manual"}],
        "steps": list(steps) or [{"id": "done", "type": "end"}],
    }


MINIMAL_STEPS: dict[str, dict[str, Any]] = {
    "approval": {"type": "approval", "approvers": [ALICE], "expires_in": "72h"},
    "wait": {"type": "wait", "duration": "1h"},
    "assign_role": {"type": "assign_role", "role_id": ORG_ROLE, "scope": "organization"},
    "remove_role": {"type": "remove_role", "role_id": ORG_ROLE},
    "add_to_group": {"type": "add_to_group", "group_id": GROUP},
    "remove_from_group": {"type": "remove_from_group", "group_id": GROUP},
    "remove_membership": {"type": "remove_membership"},
    "suspend_user": {"type": "suspend_user"},
    "notify": {"type": "notify", "notice": "welcome"},
    "call_webhook": {"type": "call_webhook", "subscription_id": HOOK},
    "end": {"type": "end"},
}


def step(kind: str, step_id: str = "s", **members: Any) -> dict[str, Any]:
    return {"id": step_id, **MINIMAL_STEPS[kind], **members}


def codes(issues: list[Issue]) -> set[tuple[str, str]]:
    return {(i.path, i.code) for i in issues}


def assert_only(issues: list[Issue], *expected: tuple[str, str]) -> None:
    assert codes(issues) == set(expected), issues


# ---------------------------------------------------------------------------- the contract


def test_seed_example_is_valid() -> None:
    assert validate_definition(seed_definition()) == []


@pytest.mark.parametrize("kind", sorted(MINIMAL_STEPS))
def test_every_step_type_with_its_required_members_only_is_valid(kind: str) -> None:
    assert validate_definition(minimal(step(kind))) == []


@pytest.mark.parametrize("name", CONTRACT_NAMES)
def test_contracts_are_strict_json_schema_2020_12(name: str) -> None:
    schema = contract(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"

    def objects(node: Any) -> list[dict[str, Any]]:
        found = []
        if isinstance(node, dict):
            if node.get("type") == "object":
                found.append(node)
            for value in node.values():
                found.extend(objects(value))
        elif isinstance(node, list):
            for value in node:
                found.extend(objects(value))
        return found

    for obj in objects(schema):
        # closed itself, or by every branch chosen on "type"
        branches = [schema_of(schema, entry["then"]) for entry in obj.get("allOf", [])]
        closed = obj.get("additionalProperties") is False or (
            bool(branches) and all(b.get("additionalProperties") is False for b in branches)
        )
        assert closed, obj


def schema_of(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return dict(target)


def test_contract_is_a_copy_and_unknown_names_are_refused() -> None:
    first = contract("definition.v1.json")
    first["title"] = "changed"
    assert contract("definition.v1.json")["title"] != "changed"
    with pytest.raises(KeyError):
        contract("../pyproject.toml")


def test_step_call_contract_accepts_the_documented_body_and_nothing_more() -> None:
    validator = Draft202012Validator(contract("step-call.v1.json"))
    body = {
        "type": "workflow.step",
        "contract_version": 1,
        "action": "execute",
        "realm_id": rid("rlm"),
        "organization_id": ORG,
        "workflow_id": rid("wfl"),
        "revision": 3,
        "run_id": rid("wrn"),
        "step_id": "sync",
        "attempt": 1,
        "idempotency_key": f"{rid('wrn')}.sync",
        "subject": {"type": "user", "id": ALICE},
        "trigger": {"type": "event", "event_type": "organization.membership.added", "event_id": rid("obx")},
        "sent_at": "2026-10-11T09:00:00Z",
    }
    assert list(validator.iter_errors(body)) == []
    compensation = {
        **body,
        "action": "compensate",
        "organization_id": None,
        "idempotency_key": f"{rid('wrn')}.sync.compensate",
        "trigger": {"type": "manual"},
    }
    assert list(validator.iter_errors(compensation)) == []
    assert not validator.is_valid({**body, "payload": {"email": "a@example.com"}})
    assert not validator.is_valid({**body, "subject": {"type": "user", "id": ALICE, "email": "a@example.com"}})
    assert not validator.is_valid({**body, "trigger": {"type": "manual", "event_id": rid("obx")}})
    assert not validator.is_valid({**body, "action": "rollback"})


DOCS = Path(__file__).parents[2] / "docs" / "definitions.md"


def test_issue_codes_used_are_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for code in ISSUE_CODES:
        assert f"| `{code}` |" in text, code


def test_the_documented_examples_are_valid() -> None:
    text = DOCS.read_text(encoding="utf-8")
    complete = text.split("## A complete example", 1)[1].split("```json", 1)[1].split("```", 1)[0]
    assert validate_definition(json.loads(complete)) == []
    steps = [json.loads(block.split("```", 1)[0]) for block in text.split("```json")[1:]]
    examples = [s for s in steps if isinstance(s, dict) and isinstance(s.get("id"), str)]
    assert len(examples) == 11
    assert validate_definition(minimal(*examples[:-1], examples[-1])) == []


# ---------------------------------------------------------------------------- limits at their boundaries


def test_one_to_five_triggers() -> None:
    events = [
        {"type": "event", "event_types": [kind]}
        for kind in (
            "user.created",
            "user.suspended",
            "user.reactivated",
            "organization.membership.added",
            "organization.membership.removed",
            "role.assignment.expired",
        )
    ]
    assert validate_definition(minimal(triggers=events[:1])) == []
    assert validate_definition(minimal(triggers=events[:5])) == []
    assert_only(validate_definition(minimal(triggers=events[:6])), ("/triggers", "too_many"))
    assert_only(validate_definition(minimal(triggers=[])), ("/triggers", "too_few"))


def test_one_to_twenty_steps() -> None:
    steps = [step("notify", f"s{i}") for i in range(21)]
    assert validate_definition(minimal(*steps[:20])) == []
    assert_only(validate_definition(minimal(*steps[:21])), ("/steps", "too_many"))
    definition = minimal()
    definition["steps"] = []
    assert_only(validate_definition(definition), ("/steps", "too_few"))


@pytest.mark.parametrize("step_id", ["a", "a" * 40, "z9", "grant-access", "grant_access", "a-_-0"])
def test_step_ids_that_fit_the_pattern(step_id: str) -> None:
    assert validate_definition(minimal(step("end", step_id))) == []


@pytest.mark.parametrize(
    "step_id", ["a" * 41, "", "A", "Grant", "1a", "_a", "-a", "a b", "a.b", "ä", "a\n", "a/b", "grant!"]
)
def test_step_ids_outside_the_pattern(step_id: str) -> None:
    assert_only(validate_definition(minimal(step("end", step_id))), ("/steps/0/id", "invalid_value"))


def test_step_id_of_the_wrong_type() -> None:
    assert_only(validate_definition(minimal(step("end", 7))), ("/steps/0/id", "wrong_type"))


def test_duplicate_step_ids_are_reported_at_each_later_one() -> None:
    issues = validate_definition(minimal(step("notify", "a"), step("wait", "b"), step("notify", "a"), step("end", "a")))
    assert_only(issues, ("/steps/2/id", "duplicate"), ("/steps/3/id", "duplicate"))
    assert "steps[0]" in issues[0].message


def padded_to(size: int) -> dict[str, Any]:
    """A definition (with one unknown member) whose canonical JSON is exactly ``size`` bytes."""
    definition = minimal()
    definition["padding"] = ""
    filler = size - len(canonical_json(definition).encode())
    definition["padding"] = "x" * filler
    assert len(canonical_json(definition).encode()) == size
    return definition


def test_sixty_four_kib_exactly_is_read_and_one_byte_more_is_too_large() -> None:
    at_limit = validate_definition(padded_to(MAX_DEFINITION_BYTES))
    assert_only(at_limit, ("/padding", "unknown_member"))
    over = validate_definition(padded_to(MAX_DEFINITION_BYTES + 1))
    assert [(i.path, i.code) for i in over] == [("", "too_large")]


def test_size_counts_utf8_bytes_of_the_canonical_form() -> None:
    definition = minimal()
    definition["padding"] = "é" * (MAX_DEFINITION_BYTES // 2)  # two bytes each
    assert [i.code for i in validate_definition(definition)] == ["too_large"]
    spaced = json.loads(json.dumps(padded_to(MAX_DEFINITION_BYTES), indent=8))  # whitespace does not count
    assert "too_large" not in {i.code for i in validate_definition(spaced)}


@pytest.mark.parametrize("attempts", [1, 2, 5, 10])
def test_retry_one_to_ten_attempts(attempts: int) -> None:
    definition = minimal(step("notify", retry={"max_attempts": attempts, "backoff": "30s"}))
    definition["retry"] = {"max_attempts": attempts, "backoff": "30s"}
    assert validate_definition(definition) == []


@pytest.mark.parametrize("attempts", [0, 11, -1, 1000])
def test_retry_attempts_out_of_range(attempts: int) -> None:
    definition = minimal(step("notify", retry={"max_attempts": attempts, "backoff": "30s"}))
    definition["retry"] = {"max_attempts": attempts, "backoff": "30s"}
    assert_only(
        validate_definition(definition),
        ("/retry/max_attempts", "out_of_range"),
        ("/steps/0/retry/max_attempts", "out_of_range"),
    )


@pytest.mark.parametrize("attempts", ["3", 3.0, True, None, [3]])
def test_retry_attempts_of_the_wrong_type(attempts: Any) -> None:
    definition = minimal()
    definition["retry"] = {"max_attempts": attempts, "backoff": "30s"}
    assert_only(validate_definition(definition), ("/retry/max_attempts", "wrong_type"))


@pytest.mark.parametrize("backoff", ["1s", "59s", "1m", "30m", "60m", "3600s", "1h"])
def test_backoff_from_one_second_to_one_hour(backoff: str) -> None:
    definition = minimal(step("call_webhook", retry={"max_attempts": 3, "backoff": backoff}))
    definition["retry"] = {"max_attempts": 3, "backoff": backoff}
    assert validate_definition(definition) == []


@pytest.mark.parametrize("backoff", ["0s", "0m", "0h", "3601s", "61m", "2h"])
def test_backoff_out_of_range(backoff: str) -> None:
    definition = minimal(step("call_webhook", retry={"max_attempts": 3, "backoff": backoff}))
    definition["retry"] = {"max_attempts": 3, "backoff": backoff}
    assert_only(
        validate_definition(definition),
        ("/retry/backoff", "out_of_range"),
        ("/steps/0/retry/backoff", "out_of_range"),
    )


def test_retry_needs_both_members() -> None:
    definition = minimal()
    definition["retry"] = {"max_attempts": 3}
    assert_only(validate_definition(definition), ("/retry/backoff", "required"))


@pytest.mark.parametrize("text", ["30s", "15m", "72h", "720h", "1s", "9999999999h"])
def test_duration_formats_accepted(text: str) -> None:
    assert parse_duration(text) > 0


@pytest.mark.parametrize(
    "text",
    ["", "30", "h", "1.5h", "-1h", "+1h", "1d", "1w", "030s", " 30s", "30s ", "30s\n", "30 s", "1H", "1h30m", "٣s"],
)
def test_duration_formats_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
    assert_only(
        validate_definition(minimal(step("wait", duration=text))),
        ("/steps/0/duration", "invalid_value"),
    )


def test_duration_of_the_wrong_type() -> None:
    assert_only(validate_definition(minimal(step("wait", duration=30))), ("/steps/0/duration", "wrong_type"))


def test_durations_parse_and_format() -> None:
    assert parse_duration("30s") == 30
    assert parse_duration("15m") == 900
    assert parse_duration("72h") == 72 * 3600
    with pytest.raises(ValueError):
        parse_duration("0s")
    assert format_duration(3600) == "1h"
    assert format_duration(5400) == "90m"
    assert format_duration(61) == "61s"
    with pytest.raises(ValueError):
        format_duration(0)


# where each bounded duration sits in a definition
DURATION_SITES: dict[str, tuple[str, Any]] = {
    "retry.backoff": ("/retry/backoff", lambda d: {**minimal(), "retry": {"max_attempts": 2, "backoff": d}}),
    "approval.expires_in": ("/steps/0/expires_in", lambda d: minimal(step("approval", expires_in=d))),
    "wait.duration": ("/steps/0/duration", lambda d: minimal(step("wait", duration=d))),
    "assign_role.expires_in": ("/steps/0/expires_in", lambda d: minimal(step("assign_role", expires_in=d))),
    "schedule.every": (
        "/triggers/0/every",
        lambda d: minimal(
            triggers=[
                {"type": "schedule", "every": d, "select": {"type": "organization_members", "organization_id": ORG}}
            ]
        ),
    ),
    "role_holders.granted_before": (
        "/triggers/0/select/granted_before",
        lambda d: minimal(
            triggers=[
                {
                    "type": "schedule",
                    "every": "24h",
                    "select": {"type": "role_holders", "role_id": ORG_ROLE, "granted_before": d},
                }
            ]
        ),
    ),
}


def test_every_bounded_duration_is_exercised() -> None:
    assert set(DURATION_SITES) == set(BOUNDS)


@pytest.mark.parametrize("where", sorted(BOUNDS))
def test_duration_bounds_at_their_edges(where: str) -> None:
    path, build = DURATION_SITES[where]
    bounds = BOUNDS[where]

    assert validate_definition(build(format_duration(bounds.minimum))) == []
    assert validate_definition(build(format_duration(bounds.maximum))) == []
    assert validate_definition(build(f"{bounds.maximum}s")) == []
    assert_only(validate_definition(build(f"{bounds.minimum - 1}s")), (path, "out_of_range"))
    assert_only(validate_definition(build(f"{bounds.maximum + 1}s")), (path, "out_of_range"))


@pytest.mark.parametrize("timeout", [100, 5000, 30000])
def test_timeout_ms_within_bounds(timeout: int) -> None:
    assert validate_definition(minimal(step("call_webhook", timeout_ms=timeout))) == []


@pytest.mark.parametrize("timeout", [99, 0, 30001, -5])
def test_timeout_ms_out_of_range(timeout: int) -> None:
    assert_only(
        validate_definition(minimal(step("call_webhook", timeout_ms=timeout))), ("/steps/0/timeout_ms", "out_of_range")
    )


def test_timeout_ms_must_be_a_whole_number() -> None:
    assert_only(
        validate_definition(minimal(step("call_webhook", timeout_ms=150.0))), ("/steps/0/timeout_ms", "wrong_type")
    )


def test_approvers_one_to_twenty_distinct() -> None:
    users = [rid("usr", n) for n in range(21)]
    assert validate_definition(minimal(step("approval", approvers=users[:20]))) == []
    assert_only(validate_definition(minimal(step("approval", approvers=users))), ("/steps/0/approvers", "too_many"))
    assert_only(validate_definition(minimal(step("approval", approvers=[]))), ("/steps/0/approvers", "too_few"))
    assert_only(
        validate_definition(minimal(step("approval", approvers=[ALICE, BOB, ALICE, ALICE]))),
        ("/steps/0/approvers/2", "duplicate"),
        ("/steps/0/approvers/3", "duplicate"),
    )
    assert_only(
        validate_definition(minimal(step("approval", approvers=["alice@example.com"]))),
        ("/steps/0/approvers/0", "invalid_value"),
    )


def test_event_types_from_the_allowed_list_only() -> None:
    trigger = {"type": "event", "event_types": ["user.created", "user.signed_in", "user.created"]}
    assert_only(
        validate_definition(minimal(triggers=[trigger])),
        ("/triggers/0/event_types/1", "invalid_value"),
        ("/triggers/0/event_types/2", "duplicate"),
    )
    assert_only(
        validate_definition(minimal(triggers=[{"type": "event", "event_types": []}])),
        ("/triggers/0/event_types", "too_few"),
    )


def test_notices_from_the_fixed_list_only() -> None:
    assert_only(validate_definition(minimal(step("notify", notice="Hello!"))), ("/steps/0/notice", "invalid_value"))
    for notice in (
        "welcome",
        "access_granted",
        "access_expiring",
        "access_removed",
        "approval_requested",
        "account_suspended",
        "offboarding",
    ):
        assert validate_definition(minimal(step("notify", notice=notice))) == []


def test_at_most_one_manual_trigger_and_no_identical_triggers() -> None:
    event = {"type": "event", "event_types": ["user.created"]}
    issues = validate_definition(minimal(triggers=[{"type": "manual"}, event, {"type": "manual"}, dict(event)]))
    assert_only(issues, ("/triggers/2", "duplicate"), ("/triggers/3", "duplicate"))


def test_steps_after_an_end_step_would_never_run() -> None:
    issues = validate_definition(minimal(step("end", "stop"), step("notify", "late"), step("end", "again")))
    assert_only(issues, ("/steps/1", "unreachable"))


def test_realm_scope_assignment_takes_no_organization() -> None:
    issues = validate_definition(minimal(step("assign_role", scope="realm", organization_id=ORG)))
    assert_only(issues, ("/steps/0/organization_id", "not_allowed"))
    assert validate_definition(minimal(step("assign_role", scope="realm", role_id=REALM_ROLE))) == []
    assert_only(validate_definition(minimal(step("assign_role", scope="tenant"))), ("/steps/0/scope", "invalid_value"))


def test_schema_version_is_one() -> None:
    definition = minimal()
    definition["schema_version"] = 2
    assert_only(validate_definition(definition), ("/schema_version", "invalid_value"))
    definition["schema_version"] = True
    assert_only(validate_definition(definition), ("/schema_version", "wrong_type"))
    del definition["schema_version"]
    assert_only(validate_definition(definition), ("/schema_version", "required"))


# ---------------------------------------------------------------------------- strictness


@pytest.mark.parametrize("member", ["script", "expression", "condition", "when", "loop", "description"])
def test_unknown_members_are_refused_at_the_member(member: str) -> None:
    definition = minimal(step("notify"))
    definition[member] = "x"
    definition["steps"][0][member] = "x"
    definition["triggers"][0][member] = "x"
    assert_only(
        validate_definition(definition),
        (f"/{member}", "unknown_member"),
        (f"/steps/0/{member}", "unknown_member"),
        (f"/triggers/0/{member}", "unknown_member"),
    )


def test_misplaced_members_are_refused_with_their_path() -> None:
    issues = validate_definition(
        minimal(
            step("assign_role", "grant", approvers=[ALICE]),
            step("wait", "pause", retry={"max_attempts": 2, "backoff": "1s"}),
            step("approval", "ask", retry={"max_attempts": 2, "backoff": "1s"}),
            step("end", "done", notice="welcome"),
        )
    )
    assert_only(
        issues,
        ("/steps/0/approvers", "unknown_member"),
        ("/steps/1/retry", "unknown_member"),
        ("/steps/2/retry", "unknown_member"),
        ("/steps/3/notice", "unknown_member"),
    )
    assert "approval" in issues[0].message
    assert "never retried" in issues[1].message


def all_members() -> dict[str, set[str]]:
    defs = contract("definition.v1.json")["$defs"]
    return {kind: set(defs[f"step_{kind}"]["properties"]) for kind in MINIMAL_STEPS}


@pytest.mark.parametrize("kind", sorted(MINIMAL_STEPS))
def test_each_step_type_has_exactly_its_own_members(kind: str) -> None:
    members = all_members()
    own = members[kind]
    assert {"id", "type", "organization_id"} <= own
    assert ("retry" in own) == (kind not in ("approval", "wait", "end"))
    foreign = set().union(*members.values()) - own
    definition = minimal(step(kind, **dict.fromkeys(foreign, "x")))
    assert_only(validate_definition(definition), *[(f"/steps/0/{m}", "unknown_member") for m in foreign])


@pytest.mark.parametrize("kind", sorted(MINIMAL_STEPS))
def test_required_members_of_each_step_type(kind: str) -> None:
    minimal_step = step(kind)
    for member in set(minimal_step) - {"type"}:
        broken = {k: v for k, v in minimal_step.items() if k != member}
        assert_only(validate_definition(minimal(broken)), (f"/steps/0/{member}", "required"))


def test_trigger_and_selector_members() -> None:
    triggers = [
        {"type": "schedule", "every": "24h", "select": {"type": "group_members", "group_id": GROUP, "role_id": "x"}},
        {"type": "schedule", "every": "24h", "select": {"type": "organization_members"}},
        {"type": "schedule", "every": "24h", "select": {"type": "everyone"}},
        {"type": "event", "event_types": ["user.created"], "every": "24h"},
        {"type": "webhook"},
    ]
    assert_only(
        validate_definition(minimal(triggers=triggers)),
        ("/triggers/0/select/role_id", "unknown_member"),
        ("/triggers/1/select/organization_id", "required"),
        ("/triggers/2/select/type", "invalid_value"),
        ("/triggers/3/every", "unknown_member"),
        ("/triggers/4/type", "invalid_value"),
    )
    assert_only(
        validate_definition(minimal(triggers=[{"type": "schedule", "every": "24h"}])),
        ("/triggers/0/select", "required"),
    )  # a schedule always names its population
    valid = [
        {
            "type": "schedule",
            "every": "24h",
            "select": {"type": "role_holders", "role_id": ORG_ROLE, "granted_before": "24h"},
        },
        {"type": "schedule", "every": "24h", "select": {"type": "group_members", "group_id": GROUP}},
        {"type": "schedule", "every": "24h", "select": {"type": "organization_members", "organization_id": ORG}},
    ]
    assert validate_definition(minimal(triggers=valid)) == []


def test_unknown_step_type() -> None:
    assert_only(
        validate_definition(minimal({"id": "x", "type": "run_script", "script": "rm -rf /"})),
        ("/steps/0/type", "invalid_value"),
    )
    assert_only(validate_definition(minimal({"id": "x"})), ("/steps/0/type", "required"))


def test_ids_must_be_ids_of_their_kind() -> None:
    issues = validate_definition(
        minimal(
            step("assign_role", "a", role_id=GROUP),
            step("add_to_group", "b", group_id="grp_short"),
            step("call_webhook", "c", subscription_id=HOOK + "\n"),
            step("end", "d", organization_id=ORG.upper()),
        )
    )
    assert_only(
        issues,
        ("/steps/0/role_id", "invalid_value"),
        ("/steps/1/group_id", "invalid_value"),
        ("/steps/2/subscription_id", "invalid_value"),
        ("/steps/3/organization_id", "invalid_value"),
    )


def test_every_issue_is_returned_at_once_in_document_order() -> None:
    definition = seed_definition()
    definition["steps"][0]["script"] = "x"
    definition["steps"][1]["expires_in"] = "1y"
    definition["steps"][2]["id"] = "approve"
    definition["steps"][4]["retry"]["backoff"] = "2h"
    definition["triggers"].append({"type": "manual"})
    definition["retry"]["max_attempts"] = 0
    issues = validate_definition(definition)
    assert [(i.path, i.code) for i in issues] == [
        ("/retry/max_attempts", "out_of_range"),
        ("/steps/0/script", "unknown_member"),
        ("/steps/1/expires_in", "invalid_value"),
        ("/steps/2/id", "duplicate"),
        ("/steps/4/retry/backoff", "out_of_range"),
        ("/triggers/3", "duplicate"),
    ]
    assert all(isinstance(i, Issue) and i.message.endswith(".") for i in issues)


def test_member_names_are_escaped_in_pointers() -> None:
    definition = minimal()
    definition["a/b~c"] = 1
    definition["²"] = 2  # a digit to str.isdigit, not to int()
    definition["7"] = 3
    assert_only(
        validate_definition(definition),
        ("/a~1b~0c", "unknown_member"),
        ("/²", "unknown_member"),
        ("/7", "unknown_member"),
    )


# ---------------------------------------------------------------------------- anything at all


@pytest.mark.parametrize("raw", [None, True, 0, 1.5, "definition", [], [1, 2], b"{}"])
def test_a_definition_is_an_object(raw: Any) -> None:
    issues = validate_definition(raw)
    assert len(issues) == 1 and issues[0].path == ""
    assert issues[0].code in ("wrong_type", "not_json")


def test_values_json_cannot_carry() -> None:
    raw = {
        1: "x",
        "nan": float("nan"),
        "inf": [float("inf")],
        "surrogate": "\ud800",
        "set": {1, 2},
        "big": 10**5000,
        "tuple": (1, 2),
        "\udfff": 1,
    }
    assert_only(
        validate_definition(raw),
        ("/1", "not_json"),
        ("/nan", "not_json"),
        ("/inf/0", "not_json"),
        ("/surrogate", "not_json"),
        ("/set", "not_json"),
        ("/big", "out_of_range"),
        ("/tuple", "not_json"),
        ("", "not_json"),
    )


def test_deep_nesting_and_cycles() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    issues = validate_definition({"schema_version": 1, "steps": deep})
    assert [i.code for i in issues] == ["too_deep"]
    assert issues[0].path.startswith("/steps/0/0/0")
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    assert [i.code for i in validate_definition(cycle)] == ["too_deep"]


def test_huge_inputs_stop_at_the_size_check() -> None:
    assert [i.code for i in validate_definition(list(range(1_000_000)))] == ["too_large"]
    assert [i.code for i in validate_definition({"steps": [{"x": float("nan")}] * 100_000})] == ["too_large"]
    many = {f"m{i}": i for i in range(4000)}
    issues = validate_definition({**minimal(), **many})
    assert len(issues) == 1001 and issues[-1].code == "too_many_issues"


def test_float_integers_are_not_integers() -> None:
    definition = minimal()
    definition["schema_version"] = 1.0
    assert_only(validate_definition(definition), ("/schema_version", "wrong_type"))


# ---------------------------------------------------------------------------- references


class FakeRealm:
    """An in-memory realm: the declared input of reference checking, recording each bulk question."""

    def __init__(self) -> None:
        self.role_boundaries = {ORG_ROLE: "organization", REALM_ROLE: "realm"}
        self.group_ids = {GROUP}
        self.approver_ids = {ALICE, BOB}
        self.organization_states = {ORG: "active", ORG2: "inactive"}
        self.webhook_ids = {HOOK}
        self.asked: list[tuple[str, frozenset[str]]] = []

    def roles(self, ids: AbstractSet[str]) -> Mapping[str, str]:
        self.asked.append(("roles", frozenset(ids)))
        return {i: self.role_boundaries[i] for i in ids if i in self.role_boundaries}

    def groups(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        self.asked.append(("groups", frozenset(ids)))
        return ids & self.group_ids

    def eligible_approvers(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        self.asked.append(("approvers", frozenset(ids)))
        return ids & self.approver_ids

    def organizations(self, ids: AbstractSet[str]) -> Mapping[str, str]:
        self.asked.append(("organizations", frozenset(ids)))
        return {i: self.organization_states[i] for i in ids if i in self.organization_states}

    def webhooks(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        self.asked.append(("webhooks", frozenset(ids)))
        return ids & self.webhook_ids


def test_references_that_exist_pass_and_each_kind_is_asked_once() -> None:
    realm = FakeRealm()
    checker: ReferenceChecker = realm
    assert validate_definition(seed_definition(), references=checker) == []
    assert sorted(kind for kind, _ in realm.asked) == ["approvers", "groups", "organizations", "roles", "webhooks"]
    assert dict(realm.asked)["roles"] == {ORG_ROLE}


def test_missing_references() -> None:
    ghost_role, ghost_group, ghost_org, ghost_hook = rid("rol", 9), rid("grp", 9), rid("org", 9), rid("whk", 9)
    definition = minimal(
        step("assign_role", "a", role_id=ghost_role),
        step("add_to_group", "b", group_id=ghost_group),
        step("call_webhook", "c", subscription_id=ghost_hook),
        step("approval", "d", approvers=[ALICE, rid("usr", 9)]),
        step("suspend_user", "e", organization_id=ghost_org),
        triggers=[
            {"type": "event", "event_types": ["user.created"], "organization_id": ORG2},
            {"type": "schedule", "every": "24h", "select": {"type": "group_members", "group_id": ghost_group}},
            {"type": "schedule", "every": "48h", "select": {"type": "organization_members", "organization_id": ORG2}},
            {
                "type": "schedule",
                "every": "72h",
                "select": {"type": "role_holders", "role_id": ghost_role, "granted_before": "1h"},
            },
        ],
    )
    assert_only(
        validate_definition(definition, references=FakeRealm()),
        ("/steps/0/role_id", "not_found"),
        ("/steps/1/group_id", "not_found"),
        ("/steps/2/subscription_id", "not_found"),
        ("/steps/3/approvers/1", "not_eligible"),
        ("/steps/4/organization_id", "not_found"),
        ("/triggers/0/organization_id", "inactive"),
        ("/triggers/1/select/group_id", "not_found"),
        ("/triggers/2/select/organization_id", "inactive"),
        ("/triggers/3/select/role_id", "not_found"),
    )


def test_role_boundaries() -> None:
    definition = minimal(
        step("assign_role", "a", role_id=REALM_ROLE, scope="organization"),
        step("assign_role", "b", role_id=ORG_ROLE, scope="realm"),
        step("assign_role", "c", role_id=REALM_ROLE, scope="realm"),
        step("remove_role", "d", role_id=REALM_ROLE, organization_id=ORG),
        step("remove_role", "e", role_id=REALM_ROLE),
        step("remove_role", "f", role_id=ORG_ROLE, organization_id=ORG),
        triggers=[
            # a selector checks existence only, whatever the boundary
            {
                "type": "schedule",
                "every": "24h",
                "select": {"type": "role_holders", "role_id": REALM_ROLE, "granted_before": "24h"},
            }
        ],
    )
    assert_only(
        validate_definition(definition, references=FakeRealm()),
        ("/steps/0/role_id", "boundary_mismatch"),
        ("/steps/1/role_id", "boundary_mismatch"),
        ("/steps/3/role_id", "boundary_mismatch"),
    )


def test_references_are_checked_only_where_the_shape_is_sound_and_only_when_asked() -> None:
    definition = minimal(step("add_to_group", "a", group_id=rid("grp", 9), extra=1), step("notify", "b"))
    realm = FakeRealm()
    assert_only(validate_definition(definition, references=realm), ("/steps/0/extra", "unknown_member"))
    assert realm.asked == []
    assert validate_definition(minimal(step("add_to_group", group_id=rid("grp", 9)))) == []


def test_static_references_and_collect_references() -> None:
    definition = seed_definition()
    refs = collect_references(definition)
    assert refs.roles == {ORG_ROLE}
    assert refs.groups == {GROUP}
    assert refs.approvers == {ALICE}
    assert refs.organizations == {ORG}
    assert refs.webhooks == {HOOK}
    loaded = StaticReferences(
        known_roles={ORG_ROLE: "organization"},
        known_groups={GROUP},
        known_approvers={ALICE},
        known_organizations={ORG: "active"},
        known_webhooks={HOOK},
    )
    assert validate_definition(definition, references=loaded) == []
    unknown = validate_definition(definition, references=StaticReferences())
    assert sorted(i.code for i in unknown) == ["not_eligible"] + ["not_found"] * 5
    for junk in (
        None,
        [],
        "x",
        {"steps": "x", "triggers": [1, None]},
        {"steps": [{"type": "approval", "approvers": 5}]},
    ):
        assert collect_references(junk) == References()


def test_validation_leaves_the_definition_untouched() -> None:
    definition = seed_definition()
    before = copy.deepcopy(definition)
    validate_definition(definition, references=FakeRealm())
    assert definition == before


# ---------------------------------------------------------------------------- authority


def test_required_authority_per_step_type() -> None:
    assert required_authority(step("assign_role", scope="organization", organization_id=ORG)) == [
        Requirement("role_ceiling", "organization", role_id=ORG_ROLE, organization_id=ORG)
    ]
    assert required_authority(step("assign_role", role_id=REALM_ROLE, scope="realm")) == [
        Requirement("role_ceiling", "realm", role_id=REALM_ROLE)
    ]
    assert required_authority(step("remove_role")) == [Requirement("role_ceiling", "role", role_id=ORG_ROLE)]
    for kind in ("add_to_group", "remove_from_group"):
        assert required_authority(step(kind)) == [
            Requirement("permission", "organization", permission="org.groups.write", group_id=GROUP),
            Requirement("group_ceiling", "organization", group_id=GROUP),
        ]
    assert required_authority(step("remove_membership", organization_id=ORG)) == [
        Requirement("permission", "organization", permission="org.members.write", organization_id=ORG)
    ]
    assert required_authority(step("suspend_user")) == [
        Requirement("permission", "realm", permission="realm.users.suspend")
    ]
    assert required_authority(step("call_webhook")) == [
        Requirement("permission", "realm", permission="realm.webhooks.write")
    ]
    for kind in ("approval", "wait", "notify", "end"):
        assert required_authority(step(kind)) == []
