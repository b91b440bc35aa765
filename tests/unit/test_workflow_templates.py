"""The workflow templates: each follows the definition contract but for the references it leaves
for the author to choose, and validation names every one of those."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest

from engine.workflows.definitions import contract, validate_definition
from engine.workflows.templates import TEMPLATE_KEYS, workflow_template, workflow_templates

pytestmark = pytest.mark.unit

# A reference member and a made-up id of its kind, syntactically right.
REFERENCES = {
    "role_id": "rol_" + "a" * 26,
    "group_id": "grp_" + "b" * 26,
    "subscription_id": "whk_" + "c" * 26,
    "approvers": ["usr_" + "d" * 26],
}


def unfilled(value: Any, path: str = "") -> list[str]:
    """The JSON pointers of the reference members still empty."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, member in value.items():
            if key in REFERENCES and member in ("", []):
                found.append(f"{path}/{key}")
            else:
                found += unfilled(member, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += unfilled(item, f"{path}/{index}")
    return found


def filled(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REFERENCES[k] if k in REFERENCES and v in ("", []) else filled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [filled(v) for v in value]
    return value


def test_the_four_scenarios_are_offered_in_order() -> None:
    assert [t.key for t in workflow_templates()] == list(TEMPLATE_KEYS)
    assert len(TEMPLATE_KEYS) == 4
    assert workflow_template("no-such-template") is None
    # A copy: changing what one caller got changes nothing for the next.
    first = workflow_template("onboarding")
    assert first is not None
    first.definition["steps"].clear()
    again = workflow_template("onboarding")
    assert again is not None and again.definition["steps"]


@pytest.mark.parametrize("key", TEMPLATE_KEYS)
def test_a_template_follows_the_contract_once_its_references_are_chosen(key: str) -> None:
    template = workflow_template(key)
    assert template is not None and template.name and template.title and template.summary
    definition = template.definition
    holes = unfilled(definition)
    assert holes, "a template leaves the realm's own objects for the author to choose"
    complete = filled(copy.deepcopy(definition))
    jsonschema.validate(complete, contract("definition.v1.json"))
    assert validate_definition(complete) == []
    # As shipped, validation names every reference still to fill, and nothing else.
    issues = validate_definition(definition)
    paths = {issue.path for issue in issues}
    assert paths == set(holes), json.dumps([issue.__dict__ for issue in issues], indent=1)
    assert all(issue.message for issue in issues)


def test_each_scenario_holds_its_steps() -> None:
    kinds = {
        t.key: ([tr["type"] for tr in t.definition["triggers"]], [s["type"] for s in t.definition["steps"]])
        for t in workflow_templates()
    }
    assert kinds["onboarding"] == (["event"], ["assign_role", "add_to_group", "notify", "end"])
    assert kinds["access-expiry"] == (["schedule"], ["remove_role", "notify", "end"])
    assert kinds["approved-access"] == (["manual"], ["approval", "assign_role", "notify", "end"])
    assert kinds["offboarding"] == (["event"], ["remove_role", "remove_from_group", "notify", "call_webhook", "end"])
