"""The workflow definition in the OpenAPI document, taken from its JSON Schema contract.

``definition.v1.json`` is the one source: each of its ``$defs`` becomes a component named
``Definition<Name>`` and the contract itself ``WorkflowDefinition``. A generator reads OpenAPI's
subset of JSON Schema better than the contract's ``allOf`` of ``if``/``then`` branches, so a member
chosen by its ``type`` (a step, a trigger, a selector) is stated as a ``oneOf`` of its variants,
each a closed object whose ``type`` has one value, with a discriminator. A type added to the
contract appears in the document with no change here.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.workflows.definitions.contract import contract as load_contract

PREFIX = "#/components/schemas/"


def _component(name: str) -> str:
    return "Definition" + "".join(part.title() for part in name.split("_"))


def _rewrite(node: Any) -> Any:
    """Refs into ``$defs`` as refs to components; ``const`` as a one-value ``enum``; enums typed."""
    if isinstance(node, list):
        return [_rewrite(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            out[key] = PREFIX + _component(value.removeprefix("#/$defs/"))
        elif key == "const":
            out["enum"] = [value]
        elif key == "title" and isinstance(value, str):
            # Generators name classes after a title: the component's name names it instead.
            described = node.get("description")
            out["description"] = f"{value[:1].upper()}{value[1:]}." + (f" {described}" if described else "")
            continue
        elif key == "description" and "title" in node:
            continue  # joined with the title above
        else:
            out[key] = _rewrite(value)
    if "enum" in out and "type" not in out and all(isinstance(v, str) for v in out["enum"]):
        out["type"] = "string"
    return out


def _variants(base: dict[str, Any], defs: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """The ``then`` branches of a member chosen by ``type``: their names and the discriminator mapping."""
    names: list[str] = []
    mapping: dict[str, str] = {}
    for branch in base.get("allOf", []):
        value = branch["if"]["properties"]["type"]["const"]
        target = branch["then"]["$ref"].removeprefix("#/$defs/")
        assert target in defs
        names.append(target)
        mapping[value] = PREFIX + _component(target)
    return names, mapping


def definition_components() -> dict[str, dict[str, Any]]:
    """Every component of the definition, by name: ``WorkflowDefinition`` and its ``Definition…``."""
    contract = load_contract("definition.v1.json")
    defs: dict[str, Any] = contract["$defs"]
    components: dict[str, dict[str, Any]] = {}
    chosen: set[str] = set()
    for name, schema in defs.items():
        if "allOf" not in schema:
            continue
        names, mapping = _variants(schema, defs)
        base_properties = {k: v for k, v in schema.get("properties", {}).items() if k != "type"}
        for (value, ref), variant in zip(mapping.items(), names, strict=True):
            own = defs[variant]
            properties = {"type": {"type": "string", "enum": [value]}} | copy.deepcopy(base_properties)
            properties |= {k: v for k, v in own.get("properties", {}).items() if v is not True}
            required = list(dict.fromkeys([*schema.get("required", []), *own.get("required", [])]))
            shape = {
                "type": "object",
                "title": f"{schema.get('title', name)}: {value}",
                "description": own.get("description", ""),
                "required": required,
                "properties": properties,
                "additionalProperties": False,
            }
            components[ref.removeprefix(PREFIX)] = _rewrite(shape)
            chosen.add(variant)
        components[_component(name)] = {
            "description": f"{schema.get('title', name)}, by its type",
            "oneOf": [{"$ref": ref} for ref in mapping.values()],
            "discriminator": {"propertyName": "type", "mapping": mapping},
        }
    for name, schema in defs.items():
        if name not in chosen and _component(name) not in components:
            components[_component(name)] = _rewrite(schema)
    top = {k: v for k, v in contract.items() if k not in ("$schema", "$id", "$defs")}
    top["description"] = (
        f"{top.get('description', '')} The JSON Schema of this contract: "
        "GET /api/v1/contracts/workflows/definition.v1.json."
    ).strip()
    components["WorkflowDefinition"] = _rewrite(top)
    return components


__all__ = ["definition_components"]
