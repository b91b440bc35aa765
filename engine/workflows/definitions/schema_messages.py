"""Validation's layer 2, the schema: ``definition.v1.json`` (JSON Schema 2020-12), each schema
error turned into one issue with a JSON pointer, a stable code and a message a person reads; an
unknown member is reported at the member itself (``/steps/0/script``). A compiled check
(:func:`plainly_valid`) passes a plainly valid definition without the reporting validator
(:func:`reporting_validator`); the reporting validator runs only the ``allOf`` branch of an
instance's own type (:func:`dispatch_key`). The three are public so the promises between them
— the compiled check never accepts what the reporting validator refuses, every ``allOf`` of the
contract is dispatched by type — can be checked on their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from engine.platform.errors import Issue
from engine.workflows.definitions.canonical import canonical_json
from engine.workflows.definitions.contract import shared_contract
from engine.workflows.definitions.json_shape import _pointer
from engine.workflows.definitions.vocabulary import (
    MAX_ISSUES,
    NEVER_RETRIED,
    SELECTOR_TYPES,
    STEP_TYPES,
    TRIGGER_TYPES,
    Parts,
)

_ANCHORED: dict[str, re.Pattern[str]] = {}


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """``pattern`` with ECMA-262 anchors: ``$`` is the end of the text (Python's also passes a final line break)."""
    if not validator.is_type(instance, "string"):
        return
    compiled = _ANCHORED.get(pattern)
    if compiled is None:
        compiled = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)
        _ANCHORED[pattern] = compiled
    if not compiled.search(instance):
        yield ValidationError("does not match the pattern")


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """One error per unknown member, with the member's own path."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for key in instance:
        if key in properties or any(re.search(p, key) for p in patterns):
            continue
        if allowed is False:
            yield ValidationError("unknown member", path=[key])
        elif isinstance(allowed, dict):
            yield from validator.descend(instance[key], allowed, path=key)


def _required(validator: Any, required: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """One error per missing member, with the member's own path."""
    if not validator.is_type(instance, "object"):
        return
    for name in required:
        if name not in instance:
            yield ValidationError("required", path=[name])


def _json_key(value: Any) -> str:
    # booleans and integers stay distinct: true and 1 are different JSON values
    return canonical_json(value)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """One error per repeated item, at the repetition; linear time."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        key = _json_key(item)  # the value is plain JSON by now (layer 1)
        if key in seen:
            yield ValidationError(f"repeats item {seen[key]}", path=[index])
        else:
            seen[key] = index


def dispatch_key(branch: Any) -> str | None:
    """The ``type`` a branch of the form ``{"if": {type is X}, "then": ...}`` applies to, else None."""
    if not isinstance(branch, dict) or set(branch) != {"if", "then"}:
        return None
    condition = branch["if"]
    if (
        not isinstance(condition, dict)
        or condition.get("required") != ["type"]
        or set(condition)
        != {
            "properties",
            "required",
        }
    ):
        return None
    properties = condition["properties"]
    if not isinstance(properties, dict) or set(properties) != {"type"}:
        return None
    test = properties["type"]
    if isinstance(test, dict) and set(test) == {"const"} and isinstance(test["const"], str):
        return test["const"]
    return None


_DISPATCH: dict[int, list[str | None]] = {}


def _all_of(validator: Any, branches: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """``allOf``; when every branch is "if type is X then ...", only the branch of the instance's type runs.

    Same outcome as evaluating every ``if`` (the others cannot hold), an order of magnitude faster.
    """
    keys = _DISPATCH.get(id(branches))
    if keys is None:
        keys = [dispatch_key(branch) for branch in branches]
        _DISPATCH[id(branches)] = keys  # the schema lives as long as the process
    if all(key is not None for key in keys):
        kind = instance.get("type") if isinstance(instance, dict) else None
        for index, (key, branch) in enumerate(zip(keys, branches, strict=True)):
            if isinstance(kind, str) and key == kind:
                yield from validator.descend(instance, branch["then"], schema_path=index)
        return
    for index, branch in enumerate(branches):
        yield from validator.descend(instance, branch, schema_path=index)


def _is_integer(checker: Any, instance: Any) -> bool:
    # 3.0 is not an integer here: definitions carry whole numbers only
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def reporting_validator() -> Any:
    """The contract's validator with our messages' extensions: every error, each with its path."""
    cls = extend(
        Draft202012Validator,
        validators={
            "pattern": _pattern,
            "additionalProperties": _additional_properties,
            "required": _required,
            "uniqueItems": _unique_items,
            "allOf": _all_of,
        },
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
    )
    return cls(_inline_refs(shared_contract("definition.v1.json")))


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each local ``{"$ref": "#/$defs/name"}`` replaced by its target (the contract has no
    cycles): the same meaning, without a reference lookup at every step of validation."""
    definitions = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and set(node) == {"$ref"}:
                return resolve(definitions[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    inlined: dict[str, Any] = resolve({key: value for key, value in schema.items() if key != "$defs"})
    return inlined


_TYPE_WORDS = {
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "array": "a list",
    "object": "an object",
    "boolean": "true or false",
    "null": "null",
}
_NOUNS = {"triggers": "trigger", "steps": "step", "approvers": "approver", "event_types": "event type"}


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _label(parts: Parts) -> str:
    if not parts:
        return "The definition"
    last = parts[-1]
    if isinstance(last, int):
        parent = parts[-2] if len(parts) > 1 else "item"
        return f"{_short(str(parent))}[{last}]"
    return _short(last)


def _what(parts: Parts, instance: Any) -> str:
    """The object a member belongs to, in words: "an assign_role step", "a retry policy"."""
    kind = instance.get("type") if isinstance(instance, dict) else None
    if not parts:
        return "a definition"
    if parts[-1] == "retry":
        return "a retry policy"
    if parts[-1] == "select":
        return f"{_article(kind)} {kind} selector" if kind in SELECTOR_TYPES else "a selector"
    if len(parts) == 2 and parts[0] == "triggers":
        return f"{_article(kind)} {kind} trigger" if kind in TRIGGER_TYPES else "a trigger"
    if len(parts) == 2 and parts[0] == "steps":
        return f"{_article(kind)} {kind} step" if kind in STEP_TYPES else "a step"
    return "this object"


@cache
def _step_members() -> dict[str, frozenset[str]]:
    defs = shared_contract("definition.v1.json")["$defs"]
    return {kind: frozenset(defs[f"step_{kind}"]["properties"]) for kind in STEP_TYPES}


def _unknown_member_message(member: str, parts: Parts, instance: Any) -> str:
    what = _what(parts, instance)
    name = _short(member)
    message = f"{name} is not a member of {what}."
    if len(parts) == 2 and parts[0] == "steps" and isinstance(instance, dict):
        kind = instance.get("type")
        if member == "retry" and kind in NEVER_RETRIED:
            return f"retry does not belong to {what}: approvals, waits and end steps are never retried."
        owners = [k for k, members in _step_members().items() if member in members and k != kind]
        if owners:
            return f"{name} does not belong to {what} (it is a member of {', '.join(owners)} steps)."
    if member in ("script", "expression", "condition", "code", "if", "when", "loop"):
        return message + " Definitions carry no code, expressions, conditions or loops."
    return message


def _map_error(error: ValidationError) -> Issue:
    parts: Parts = tuple(error.absolute_path)
    path = _pointer(parts)
    keyword = error.validator
    value = error.validator_value
    label = _label(parts)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if keyword == "additionalProperties":
        member = str(parts[-1])
        return Issue(path, "unknown_member", _unknown_member_message(member, parts[:-1], error.instance))
    if keyword == "required":
        return Issue(path, "required", f"{label} is required in {_what(parts[:-1], error.instance)}.")
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        words = " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kinds)
        return Issue(path, "wrong_type", f"{label} must be {words}.")
    if keyword == "enum":
        return Issue(path, "invalid_value", f"{label} must be one of: {', '.join(str(v) for v in value)}.")
    if keyword == "const":
        return Issue(path, "invalid_value", f"{label} must be {value}.")
    if keyword in ("pattern", "minLength", "maxLength", "format"):
        title = schema.get("title")
        if keyword in ("minLength", "maxLength") and not title:
            bound = "at least" if keyword == "minLength" else "at most"
            return Issue(path, "invalid_value", f"{label} must be {bound} {value} characters long.")
        return Issue(path, "invalid_value", f"{label} must be {title or 'in the expected format'}.")
    if keyword in ("minimum", "exclusiveMinimum"):
        return Issue(path, "out_of_range", f"{label} must be at least {value}.")
    if keyword in ("maximum", "exclusiveMaximum"):
        return Issue(path, "out_of_range", f"{label} must be at most {value}.")
    if keyword in ("minItems", "maxItems"):
        noun = _NOUNS.get(str(parts[-1]), "item") if parts else "item"
        plural = noun if value == 1 else noun + "s"
        if keyword == "minItems":
            return Issue(path, "too_few", f"{label} needs at least {value} {plural}.")
        return Issue(path, "too_many", f"{label} takes at most {value} {plural}.")
    if keyword == "uniqueItems":
        return Issue(path, "duplicate", f"{label} {error.message}: each item may appear once.")
    return Issue(path, "invalid_value", f"{label} is not valid here.")


@cache
def _compiled_check() -> Any | None:
    """The contract compiled by jsonschema-rs: a yes/no answer in microseconds.

    It only ever short-cuts the valid case. An instance it accepts is one the reporting validator
    above accepts too, because (a) the contract's patterns are ASCII classes with ``^…$``
    anchors, read alike by both engines, (b) its ``uniqueItems`` keeps ``true`` and ``1`` apart
    like ours, and (c) the one place the two differ — the standard counts ``3.0`` as an integer,
    we do not — is kept away by :func:`_has_float`. Everything it refuses, and every error
    message, comes from the reporting validator.
    """
    try:
        import jsonschema_rs

        return jsonschema_rs.Draft202012Validator(shared_contract("definition.v1.json"))
    except Exception:  # pragma: no cover - the reporting validator alone gives the same answers
        return None


def _has_float(raw: Any) -> bool:
    stack = [raw]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def plainly_valid(raw: Any) -> bool:
    """True only when the compiled check accepts ``raw`` and no float could make it disagree."""
    check = _compiled_check()
    if check is None or _has_float(raw):
        return False
    try:
        return bool(check.is_valid(raw))
    except Exception:  # a value it cannot take (a huge integer, a lone surrogate): ask the other one
        return False


def _schema_issues(raw: Any) -> list[Issue]:
    if plainly_valid(raw):
        return []
    issues: list[Issue] = []
    for error in reporting_validator().iter_errors(raw):
        issues.append(_map_error(error))
        if len(issues) > MAX_ISSUES:
            break
    return issues
