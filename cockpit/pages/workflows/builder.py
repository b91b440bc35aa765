"""The step builder beside the definition editor: the contract as form fields.

Everything the builder offers comes from ``definition.v1.json``: the menu of step (and trigger)
types is the ``type`` enum of ``$defs/step`` (``$defs/trigger``), and the fields of one type are
the properties of ``$defs/step_<type>`` (``$defs/trigger_<type>``), each shown by what it holds:

- a reference (``$ref`` to ``role_id``, ``group_id``, ``user_id``, ``organization_id``,
  ``subscription_id``): a searchable picker that shows names and writes the id;
- a list of references (an approval's ``approvers``): the chosen names, and a picker to add one;
- an ``enum``: a menu; a list of an ``enum`` (an event trigger's ``event_types``): check boxes;
- a duration: text with the contract's own hint; an integer or a boolean: the matching input;
- anything else (a ``retry`` policy, a schedule's ``select``): its JSON, edited in place.

A new type in the contract appears in the builder on its own. The builder never holds state of
its own: every change is applied to the editor's text (parsed, changed, written back in the
author's key order) and the text is what is saved, so the JSON and the builder cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from engine.workflows.definitions import authored_json, shared_contract

REFERENCE_KINDS = {
    "role_id": "role",
    "group_id": "group",
    "user_id": "user",
    "organization_id": "organization",
    "subscription_id": "subscription",
}
MAX_STEPS = 20
MAX_TRIGGERS = 5


class BuilderError(ValueError):
    """A change the builder cannot make (the text does not parse, a value is not of its kind)."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pointer = pointer


@dataclass(frozen=True)
class FieldSpec:
    """One member of a step or trigger type, as the contract declares it."""

    name: str
    kind: str  # ref | refs | choice | choices | duration | integer | boolean | text | json
    required: bool
    hint: str = ""
    picker: str | None = None  # the kind of object a ref or refs field picks
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


@dataclass(frozen=True)
class TypeSpec:
    name: str
    description: str
    fields: tuple[FieldSpec, ...] = field(default_factory=tuple)


def _ref_name(schema: Mapping[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _field(name: str, schema: Any, required: bool, defs: Mapping[str, Any]) -> FieldSpec:
    if not isinstance(schema, Mapping):
        return FieldSpec(name, "json", required)
    ref = _ref_name(schema)
    target = defs.get(ref, {}) if ref else schema
    hint = str(target.get("title") or target.get("description") or "")
    if ref in REFERENCE_KINDS:
        what = REFERENCE_KINDS[ref]
        return FieldSpec(name, "ref", required, f"Choose the {what} by name; its id goes into the JSON.", picker=what)
    if ref == "duration":
        return FieldSpec(name, "duration", required, hint)
    if "enum" in target:
        return FieldSpec(name, "choice", required, hint, choices=tuple(str(v) for v in target["enum"]))
    kind = target.get("type")
    if kind == "array" and isinstance(target.get("items"), Mapping):
        items = target["items"]
        item_ref = _ref_name(items)
        if item_ref in REFERENCE_KINDS:
            what = REFERENCE_KINDS[item_ref]
            return FieldSpec(
                name, "refs", required, f"Add each {what} by name; their ids go into the JSON.", picker=what
            )
        if "enum" in items:
            return FieldSpec(name, "choices", required, hint, choices=tuple(str(v) for v in items["enum"]))
    if kind == "boolean":
        return FieldSpec(name, "boolean", required, hint)
    if kind == "integer":
        return FieldSpec(name, "integer", required, hint, minimum=target.get("minimum"), maximum=target.get("maximum"))
    if kind == "string":
        return FieldSpec(name, "text", required, hint)
    described = ": ".join(str(t) for t in (target.get("title"), target.get("description")) if t)
    return FieldSpec(name, "json", required, f"{described or name} (as JSON; empty to leave it out).")


def _types(family: str) -> dict[str, TypeSpec]:
    contract = shared_contract("definition.v1.json")
    defs = contract["$defs"]
    out: dict[str, TypeSpec] = {}
    for name in defs[family]["properties"]["type"]["enum"]:
        body = defs.get(f"{family}_{name}", {})
        required = set(body.get("required", []))
        fields = tuple(
            _field(member, schema, member in required, defs)
            for member, schema in body.get("properties", {}).items()
            if member not in ("id", "type")
        )
        # Required members first, in the contract's order; then the optional ones.
        fields = tuple(sorted(fields, key=lambda f: not f.required))
        out[name] = TypeSpec(name, str(body.get("description", "")), fields)
    return out


@cache
def step_types() -> dict[str, TypeSpec]:
    return _types("step")


@cache
def trigger_types() -> dict[str, TypeSpec]:
    return _types("trigger")


def _placeholder(spec: FieldSpec) -> Any:
    """What a required member holds before the author fills it: it fails validation at its field."""
    match spec.kind:
        case "choice":
            return spec.choices[0]
        case "choices" | "refs":
            return []
        case "boolean":
            return False
        case "integer":
            return spec.minimum or 0
        case "json":
            return {}
        case _:
            return ""


def _fresh_id(steps: list[Any], base: str) -> str:
    taken = {s.get("id") for s in steps if isinstance(s, dict)}
    stem = base[:36]
    if stem not in taken:
        return stem
    n = 2
    while f"{stem}-{n}" in taken:
        n += 1
    return f"{stem}-{n}"


def _segments(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise BuilderError("That field is not part of the definition.", pointer)
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _container(document: Any, pointer: str) -> tuple[Any, str | int]:
    """The object or array holding ``pointer``'s last segment, and that segment."""
    parts = _segments(pointer)
    node = document
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise BuilderError("That field is no longer in the definition: the text changed.", pointer)
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise BuilderError("That item is no longer in the definition: the text changed.", pointer)
        return node, int(last)
    if not isinstance(node, dict):
        raise BuilderError("That field is no longer in the definition: the text changed.", pointer)
    return node, last


def spec_at(document: Any, pointer: str) -> FieldSpec | None:
    """The contract's field for ``/steps/<i>/<member>`` or ``/triggers/<i>/<member>``."""
    parts = _segments(pointer)
    if len(parts) != 3 or parts[0] not in ("steps", "triggers") or not parts[1].isdigit():
        return None
    items = document.get(parts[0]) if isinstance(document, dict) else None
    if not isinstance(items, list) or int(parts[1]) >= len(items) or not isinstance(items[int(parts[1])], dict):
        return None
    types = step_types() if parts[0] == "steps" else trigger_types()
    spec = types.get(str(items[int(parts[1])].get("type")))
    if parts[2] == "id" and parts[0] == "steps":
        return FieldSpec("id", "text", True)
    return next((f for f in spec.fields if f.name == parts[2]), None) if spec else None


def coerce(spec: FieldSpec, values: list[str], pointer: str) -> Any:
    """The form's text as the member's JSON value; ``None`` removes an optional member."""
    value = values[-1] if values else ""
    if spec.kind == "choices":
        return [v for v in values if v in spec.choices] or ([] if spec.required else None)
    if spec.kind == "boolean":
        return value in ("true", "on", "1")
    if value.strip() == "" and not spec.required:
        return None
    if spec.kind == "integer":
        try:
            return int(value.strip())
        except ValueError:
            raise BuilderError(f"{spec.name} must be a whole number.", pointer) from None
    if spec.kind == "json":
        try:
            return json.loads(value)
        except ValueError as exc:
            raise BuilderError(f"{spec.name} is not valid JSON: {exc}.", pointer) from None
    return value.strip()


def apply(document: Any, op: str, pointer: str, values: list[str]) -> Any:
    """Apply one builder change to the parsed definition (changed in place; also returned)."""
    if not isinstance(document, dict):
        raise BuilderError("The definition must be a JSON object before the builder can change it.")
    value = values[-1] if values else ""
    if op in ("add_step", "add_trigger"):
        family = "steps" if op == "add_step" else "triggers"
        types = step_types() if op == "add_step" else trigger_types()
        if value not in types:
            raise BuilderError(f"Choose a {family[:-1]} type from the menu.")
        items = document.setdefault(family, [])
        if not isinstance(items, list):
            raise BuilderError(f"{family} must be a list before the builder can add to it.", f"/{family}")
        limit = MAX_STEPS if family == "steps" else MAX_TRIGGERS
        if len(items) >= limit:
            raise BuilderError(f"A definition has at most {limit} {family}.", f"/{family}")
        item: dict[str, Any] = {}
        if family == "steps":
            item["id"] = _fresh_id(items, value)
        item["type"] = value
        for member in types[value].fields:
            if member.required:
                item[member.name] = _placeholder(member)
        # A new step goes before a closing "end" step, where it can run.
        at = len(items)
        if family == "steps" and items and isinstance(items[-1], dict) and items[-1].get("type") == "end":
            at -= 1
        items.insert(at, item)
        return document
    spec = spec_at(document, pointer) if op in ("set", "add_item") else None
    if op == "set":
        if spec is None:
            raise BuilderError("That field is not part of the contract.", pointer)
        holder, key = _container(document, pointer)
        new = coerce(spec, values, pointer)
        if new is None and isinstance(holder, dict):
            holder.pop(str(key), None)
        else:
            holder[key] = new
        return document
    if op == "add_item":
        if spec is None or spec.kind != "refs":
            raise BuilderError("That field does not hold a list of references.", pointer)
        holder, key = _container(document, pointer)
        current = holder.get(key) if isinstance(holder, dict) else None
        current = current if isinstance(current, list) else []
        if value and value not in current:
            current.append(value)
        holder[key] = current
        return document
    if op in ("remove", "up", "down"):
        holder, key = _container(document, pointer)
        if isinstance(holder, list):
            index = int(key)
            if op == "remove":
                del holder[index]
            else:
                other = index - 1 if op == "up" else index + 1
                if 0 <= other < len(holder):
                    holder[index], holder[other] = holder[other], holder[index]
        elif isinstance(holder, dict) and op == "remove":
            holder.pop(str(key), None)
        return document
    raise BuilderError("The builder does not know that change.")


def change_text(text: str, op: str, pointer: str, values: list[str]) -> str:
    """The editor's text after one builder change, in the author's key order."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise BuilderError("The text is not valid JSON: fix it in the editor, then use the builder again.") from None
    return authored_json(apply(document, op, pointer, values)) + "\n"


def field_id(pointer: str) -> str:
    """The HTML id of the builder control for ``pointer`` (``/steps/1/role_id`` → ``b-steps-1-role_id``)."""
    return "b" + "".join(c if c.isalnum() or c in "_" else "-" for c in pointer)


def cards(document: Any) -> dict[str, list[dict[str, Any]]] | None:
    """Steps and triggers as the builder shows them: each with its fields and current values."""
    if not isinstance(document, dict):
        return None
    out: dict[str, list[dict[str, Any]]] = {"triggers": [], "steps": []}
    for family, types in (("triggers", trigger_types()), ("steps", step_types())):
        items = document.get(family)
        for index, item in enumerate(items if isinstance(items, list) else []):
            pointer = f"/{family}/{index}"
            if not isinstance(item, dict):
                out[family].append({"index": index, "pointer": pointer, "type": None, "fields": [], "item": item})
                continue
            spec = types.get(str(item.get("type")))
            fields = []
            for f in spec.fields if spec else ():
                fields.append(
                    {"spec": f, "pointer": f"{pointer}/{f.name}", "value": item.get(f.name), "present": f.name in item}
                )
            out[family].append(
                {
                    "index": index,
                    "pointer": pointer,
                    "type": item.get("type"),
                    "known": spec is not None,
                    "description": spec.description if spec else "",
                    "id": item.get("id"),
                    "fields": fields,
                    "unknown_members": [
                        k
                        for k in item
                        if k not in ("id", "type") and not (spec and any(f.name == k for f in spec.fields))
                    ],
                }
            )
    return out


def field_pointers(document: Any) -> set[str]:
    """Pointers the builder shows a control for (issues link to the nearest of them)."""
    shown = cards(document)
    if shown is None:
        return set()
    pointers: set[str] = set()
    for family in ("triggers", "steps"):
        for card in shown[family]:
            pointers.add(card["pointer"])
            if family == "steps":
                pointers.add(card["pointer"] + "/id")
            pointers.update(f["pointer"] for f in card["fields"])
    return pointers


def nearest_field(pointers: set[str], path: str, prefix: str = "/definition") -> str | None:
    """The builder control an issue at ``path`` belongs to: its own field, or its step's card."""
    if not (path == prefix or path.startswith(prefix + "/")):
        return None
    pointer = path[len(prefix) :]
    while pointer:
        if pointer in pointers:
            return field_id(pointer)
        pointer = pointer.rsplit("/", 1)[0]
    return None
