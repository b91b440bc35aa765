"""The workflow definition in the OpenAPI document agrees with its JSON Schema contract: every
definition the contract accepts, the document's ``WorkflowDefinition`` accepts, and a step or a
trigger of a type the contract does not know, or with a member its type does not have, neither."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings

from cockpit.openapi_definition import definition_components
from engine.workflows.definitions.contract import contract
from testing.definitions import pinned_definitions, unpinned_definitions

COMPONENTS = definition_components()
DOCUMENT = {"$ref": "#/components/schemas/WorkflowDefinition", "components": {"schemas": COMPONENTS}}
IN_DOCUMENT = jsonschema.Draft202012Validator(DOCUMENT)
CONTRACT = jsonschema.Draft202012Validator(contract("definition.v1.json"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definition=unpinned_definitions | pinned_definitions())
def test_what_the_contract_accepts_the_document_accepts(definition: dict[str, Any]) -> None:
    assert CONTRACT.is_valid(definition)
    assert list(IN_DOCUMENT.iter_errors(definition)) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["steps"][0].update(type="run_script"),
        lambda d: d["steps"][0].update(colour="red"),
        lambda d: d["triggers"][0].update(type="webhook"),
        lambda d: d.update(schema_version=2),
        lambda d: d["steps"][0].pop("id"),
    ],
)
def test_what_the_contract_refuses_the_document_refuses(change: Any) -> None:
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    assert IN_DOCUMENT.is_valid(definition) and CONTRACT.is_valid(definition)
    broken = copy.deepcopy(definition)
    change(broken)
    assert not CONTRACT.is_valid(broken)
    assert not IN_DOCUMENT.is_valid(broken)


def test_every_step_and_trigger_type_of_the_contract_is_a_variant() -> None:
    defs = contract("definition.v1.json")["$defs"]
    assert set(COMPONENTS["DefinitionStep"]["discriminator"]["mapping"]) == set(
        defs["step"]["properties"]["type"]["enum"]
    )
    assert set(COMPONENTS["DefinitionTrigger"]["discriminator"]["mapping"]) == set(
        defs["trigger"]["properties"]["type"]["enum"]
    )
