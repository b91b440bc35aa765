"""Canonical JSON, the definition hash, input versions, and the two kinds of diff."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from typing import Any

import msgspec
import pytest

from engine.workflows.definitions import (
    canonical_json,
    definition_hash,
    input_version,
    line_diff,
    pretty_json,
    structured_diff,
)


def structured(old: Any, new: Any) -> Any:
    """The step-aware diff as JSON values (the assertions compare whole members)."""
    return msgspec.to_builtins(structured_diff(old, new))


def lines(old: Any, new: Any) -> Any:
    """The runs of lines as JSON values."""
    return msgspec.to_builtins(line_diff(old, new))


def rid(prefix: str, n: int = 0) -> str:
    return f"{prefix}_{n:026d}"


def definition() -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": [
            {"type": "event", "event_types": ["organization.membership.added"], "organization_id": rid("org", 1)},
            {"type": "manual"},
        ],
        "steps": [
            {"id": "approve", "type": "approval", "approvers": [rid("usr", 1)], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": rid("rol", 1), "scope": "organization"},
            {"id": "tell", "type": "notify", "notice": "access_granted"},
            {"id": "done", "type": "end"},
        ],
        "retry": {"max_attempts": 3, "backoff": "30s"},
    }


# ---------------------------------------------------------------------------- canonical JSON and hash


def test_canonical_json_is_sorted_compact_utf8() -> None:
    assert canonical_json({"b": 1, "a": [True, None, "é"], "c": {"z": 0, "y": -2}}) == (
        '{"a":[true,null,"é"],"b":1,"c":{"y":-2,"z":0}}'
    )


def test_hash_is_sha256_of_the_canonical_bytes() -> None:
    value = definition()
    expected = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    assert definition_hash(value) == expected
    assert len(expected) == 64


def test_hash_ignores_key_order_and_whitespace_but_not_content() -> None:
    value = definition()
    reordered = json.loads(json.dumps(value, indent=4, sort_keys=True))
    reordered["steps"][0] = dict(reversed(list(reordered["steps"][0].items())))
    assert definition_hash(reordered) == definition_hash(value)
    changed = copy.deepcopy(value)
    changed["steps"][0]["expires_in"] = "48h"
    assert definition_hash(changed) != definition_hash(value)
    swapped = copy.deepcopy(value)
    swapped["steps"][1], swapped["steps"][2] = swapped["steps"][2], swapped["steps"][1]
    assert definition_hash(swapped) != definition_hash(value)  # list order is meaningful


def test_canonical_json_refuses_nan() -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


def test_pretty_json_is_sorted_with_two_spaces() -> None:
    text = pretty_json({"b": [1], "a": "é"})
    assert text == '{\n  "a": "é",\n  "b": [\n    1\n  ]\n}'
    assert json.loads(text) == {"a": "é", "b": [1]}


def test_input_version() -> None:
    digest = definition_hash(definition())
    assert input_version(3, digest, 1) == f"r3:{digest[:16]}:i1"
    assert input_version(12, digest, "2") == f"r12:{digest[:16]}:i2"


@pytest.mark.parametrize(
    ("revision", "digest", "version"),
    [(0, "a" * 64, 1), (True, "a" * 64, 1), (1, "abc", 1), (1, "A" * 64, 1), (1, "a" * 64, ""), (1, "a" * 64, "1:2")],
)
def test_input_version_refuses_malformed_parts(revision: Any, digest: Any, version: Any) -> None:
    with pytest.raises(ValueError):
        input_version(revision, digest, version)


# ---------------------------------------------------------------------------- structured diff


def test_identical_definitions_have_no_changes() -> None:
    diff = structured(definition(), definition())
    assert diff["changed"] is False
    assert diff["steps"]["added"] == diff["steps"]["removed"] == diff["steps"]["changed"] == []
    assert diff["steps"]["moved"] == []
    assert diff["steps"]["unchanged"] == ["approve", "grant", "tell", "done"]
    assert diff["retry"] is None and diff["schema_version"] is None


def test_steps_are_matched_by_id() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["steps"][0]["expires_in"] = "48h"  # changed
    new["steps"][0]["approvers"].append(rid("usr", 2))
    del new["steps"][2]  # "tell" removed
    new["steps"].insert(1, {"id": "pause", "type": "wait", "duration": "1h"})  # added
    new["steps"][2]["expires_in"] = "720h"  # "grant" gains a member
    diff = structured(old, new)["steps"]

    assert [(s["id"], s["index"]) for s in diff["added"]] == [("pause", 1)]
    assert [(s["id"], s["index"]) for s in diff["removed"]] == [("tell", 2)]
    assert diff["moved"] == []  # shifting by an insertion is not a move
    changed = {c["id"]: c for c in diff["changed"]}
    assert changed["approve"]["changes"] == [
        {"path": "/approvers", "change": "changed", "old": [rid("usr", 1)], "new": [rid("usr", 1), rid("usr", 2)]},
        {"path": "/expires_in", "change": "changed", "old": "72h", "new": "48h"},
    ]
    assert changed["grant"] == {
        "id": "grant",
        "old_index": 1,
        "new_index": 2,
        "changes": [{"path": "/expires_in", "change": "added", "old": None, "new": "720h"}],
    }
    assert diff["unchanged"] == ["done"]
    assert [(s["id"], s["status"]) for s in diff["order"]] == [
        ("approve", "changed"),
        ("pause", "added"),
        ("grant", "changed"),
        ("tell", "removed"),
        ("done", "unchanged"),
    ]


def test_reordered_steps_are_moves() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["steps"] = [new["steps"][2], new["steps"][0], new["steps"][1], new["steps"][3]]
    diff = structured(old, new)
    assert diff["changed"] is True
    assert diff["steps"]["moved"] == [{"id": "tell", "old_index": 2, "new_index": 0}]
    assert diff["steps"]["changed"] == []
    assert [(s["id"], s["status"], s["moved"]) for s in diff["steps"]["order"]] == [
        ("tell", "moved", True),
        ("approve", "unchanged", False),
        ("grant", "unchanged", False),
        ("done", "unchanged", False),
    ]


def test_a_step_that_changes_type_lists_every_member() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["steps"][2] = {"id": "tell", "type": "wait", "duration": "1h"}
    (change,) = structured(old, new)["steps"]["changed"]
    assert [(c["path"], c["change"]) for c in change["changes"]] == [
        ("/duration", "added"),
        ("/notice", "removed"),
        ("/type", "changed"),
    ]


def test_trigger_changes() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["triggers"][0]["event_types"] = ["user.created"]
    new["triggers"].remove({"type": "manual"})
    new["triggers"].append({"type": "schedule", "every": "24h"})
    diff = structured(old, new)["triggers"]
    assert diff["added"] == [{"index": 1, "trigger": {"type": "schedule", "every": "24h"}}]
    assert diff["removed"] == [{"index": 1, "trigger": {"type": "manual"}}]
    assert diff["changed"] == [
        {
            "old_index": 0,
            "new_index": 0,
            "type": "event",
            "changes": [
                {
                    "path": "/event_types",
                    "change": "changed",
                    "old": ["organization.membership.added"],
                    "new": ["user.created"],
                }
            ],
        }
    ]
    assert diff["unchanged"] == []


def test_retry_changes() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["retry"]["backoff"] = "1m"
    assert structured(old, new)["retry"] == {
        "old": {"max_attempts": 3, "backoff": "30s"},
        "new": {"max_attempts": 3, "backoff": "1m"},
        "changes": [{"path": "/backoff", "change": "changed", "old": "30s", "new": "1m"}],
    }
    del new["retry"]
    assert structured(old, new)["retry"]["new"] is None


def test_added_removed_and_kept_steps_are_listed_whole_in_display_order() -> None:
    old = definition()
    new = copy.deepcopy(old)
    tell = new["steps"].pop(2)
    pause = {"id": "pause", "type": "wait", "duration": "1h"}
    new["steps"].insert(0, pause)
    diff = structured(old, new)["steps"]
    assert diff["added"] == [{"id": "pause", "index": 0, "step": pause}]
    assert diff["removed"] == [{"id": "tell", "index": 2, "step": tell}]
    assert diff["order"] == [
        {"id": "pause", "status": "added", "old_index": None, "new_index": 0, "moved": False},
        {"id": "approve", "status": "unchanged", "old_index": 0, "new_index": 1, "moved": False},
        {"id": "grant", "status": "unchanged", "old_index": 1, "new_index": 2, "moved": False},
        {"id": "tell", "status": "removed", "old_index": 2, "new_index": None, "moved": False},
        {"id": "done", "status": "unchanged", "old_index": 3, "new_index": 3, "moved": False},
    ]
    last = copy.deepcopy(old)
    del last["steps"][3]
    assert structured(old, last)["steps"]["order"][-1] == {
        "id": "done",
        "status": "removed",
        "old_index": 3,
        "new_index": None,
        "moved": False,
    }


def test_a_removed_member_keeps_its_old_value_and_names_are_escaped_as_json_pointers() -> None:
    old = {"steps": [{"id": "a", "type": "notify", "notice": "welcome", "a/b~c": 1, "x~1": 1}]}
    new = {"steps": [{"id": "a", "type": "end", "a/b~c": 2, "x~1": 2}]}
    (change,) = structured(old, new)["steps"]["changed"]
    assert change["changes"] == [
        {"path": "/a~1b~0c", "change": "changed", "old": 1, "new": 2},
        {"path": "/notice", "change": "removed", "old": "welcome", "new": None},
        {"path": "/type", "change": "changed", "old": "notify", "new": "end"},
        {"path": "/x~01", "change": "changed", "old": 1, "new": 2},
    ]


def test_steps_without_an_id_or_repeating_one_are_keyed_by_index() -> None:
    steps = [{"type": "end"}, {"id": "a", "type": "end"}, {"id": "a", "type": "end"}, {"id": 7, "type": "end"}]
    diff = structured({"steps": steps}, {"steps": steps})["steps"]
    assert diff["unchanged"] == ["#0", "a", "#2", "#3"]
    assert [s["id"] for s in diff["order"]] == ["#0", "a", "#2", "#3"]


def test_identical_triggers_pair_first_wherever_they_moved() -> None:
    old = definition()
    assert structured(old, old)["triggers"] == {
        "added": [],
        "removed": [],
        "changed": [],
        "unchanged": [{"old_index": 0, "new_index": 0}, {"old_index": 1, "new_index": 1}],
    }
    new = copy.deepcopy(old)
    new["triggers"].reverse()
    assert structured(old, new)["triggers"] == {
        "added": [],
        "removed": [],
        "changed": [],
        "unchanged": [{"old_index": 1, "new_index": 0}, {"old_index": 0, "new_index": 1}],
    }


def test_values_canonical_json_refuses_are_still_compared() -> None:
    old = {"retry": {"backoff": float("inf")}}
    new = {"retry": {"backoff": float("-inf")}}
    diff = structured(old, new)
    assert diff["changed"] is True
    assert diff["retry"]["changes"] == [
        {"path": "/backoff", "change": "changed", "old": float("inf"), "new": float("-inf")}
    ]
    assert structured(old, copy.deepcopy(old))["changed"] is False


def test_schema_version_changes() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["schema_version"] = 2
    assert structured(old, new)["schema_version"] == {
        "old": 1,
        "new": 2,
        "changes": [{"path": "", "change": "changed", "old": 1, "new": 2}],
    }
    assert structured(old, old)["schema_version"] is None


@pytest.mark.parametrize("junk", [None, [], "x", {"steps": "x"}, {"steps": [1, {"id": 2}, {"id": "a"}, {"id": "a"}]}])
def test_structured_diff_reads_anything(junk: Any) -> None:
    diff = structured(junk, definition())
    assert diff["changed"] is True
    assert structured(junk, junk)["changed"] is False


def test_member_names_that_are_not_strings_are_compared_by_their_text() -> None:
    old = {"steps": [{"id": "a", "type": "end", 1: "one", "b": True}]}
    new = {"steps": [{"id": "a", "type": "end", 1: "uno", "b": False}]}
    assert structured(old, new)["steps"]["changed"] == [
        {
            "id": "a",
            "old_index": 0,
            "new_index": 0,
            "changes": [
                {"path": "/1", "change": "changed", "old": "one", "new": "uno"},
                {"path": "/b", "change": "changed", "old": True, "new": False},
            ],
        }
    ]


# ---------------------------------------------------------------------------- line diff


def rebuild(runs: list[dict[str, Any]], side: str) -> list[str]:
    return [line for run in runs for line in run[f"{side}_lines"]]


def test_line_diff_runs_rebuild_both_sides_with_line_numbers() -> None:
    old = definition()
    new = copy.deepcopy(old)
    new["steps"][0]["expires_in"] = "48h"
    new["steps"].insert(2, {"id": "pause", "type": "wait", "duration": "1h"})
    runs = lines(old, new)
    assert rebuild(runs, "old") == pretty_json(old).splitlines()
    assert rebuild(runs, "new") == pretty_json(new).splitlines()
    assert {run["op"] for run in runs} >= {"equal", "replace", "insert"}
    replaced = next(run for run in runs if run["op"] == "replace")
    assert replaced["old_lines"] == ['      "expires_in": "72h",']
    assert replaced["new_lines"] == ['      "expires_in": "48h",']
    old_lines = pretty_json(old).splitlines()
    assert old_lines[replaced["old_start"] - 1] == replaced["old_lines"][0]
    for before, after in itertools.pairwise(runs):
        assert after["old_start"] == before["old_start"] + len(before["old_lines"])
        assert after["new_start"] == before["new_start"] + len(before["new_lines"])


def test_line_diff_of_equal_definitions_is_one_equal_run() -> None:
    runs = lines(definition(), definition())
    assert [run["op"] for run in runs] == ["equal"]
    assert runs[0]["old_start"] == runs[0]["new_start"] == 1


def test_line_diff_of_a_long_definition_pairs_every_repeated_line() -> None:
    old = {"steps": [{"id": f"s{i:02}", "type": "end"} for i in range(80)]}
    new = copy.deepcopy(old)
    new["steps"][40]["id"], new["steps"][41]["id"] = "t40", "t41"
    assert len(pretty_json(old).splitlines()) > 200
    changed = [run for run in lines(old, new) if run["op"] != "equal"]
    assert changed == [
        {
            "op": "replace",
            "old_start": n,
            "new_start": n,
            "old_lines": [f'      "id": "s{i}",'],
            "new_lines": [f'      "id": "t{i}",'],
        }
        for i, n in ((40, 4 + 4 * 40), (41, 4 + 4 * 41))
    ]
