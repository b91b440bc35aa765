"""The workflow definition contract: JSON Schemas, validation, canonical JSON and diffs.

Pure functions over plain JSON values: no database, no HTTP. The two contracts are packaged
beside this module and served as they are (``contract(name)``).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any

from engine.workflows.definitions.canonical import canonical_json, definition_hash, input_version, pretty_json
from engine.workflows.definitions.diff import line_diff, structured_diff
from engine.workflows.definitions.durations import BOUNDS, Bounds, format_duration, parse_duration
from engine.workflows.definitions.validation import (
    ISSUE_CODES,
    MAX_DEFINITION_BYTES,
    ReferenceChecker,
    References,
    Requirement,
    StaticReferences,
    collect_references,
    required_authority,
    validate_definition,
)

CONTRACT_NAMES = ("definition.v1.json", "step-call.v1.json")


@cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def contract(name: str) -> dict[str, Any]:
    """One of ``CONTRACT_NAMES`` as a JSON object (a copy: callers may change it freely).

    Raises KeyError for any other name.
    """
    if name not in CONTRACT_NAMES:
        raise KeyError(name)
    return copy.deepcopy(_load(name))


def shared_contract(name: str) -> dict[str, Any]:
    """The loaded contract itself, for read-only use inside the engine (no copy)."""
    if name not in CONTRACT_NAMES:
        raise KeyError(name)
    return _load(name)


__all__ = [
    "BOUNDS",
    "CONTRACT_NAMES",
    "ISSUE_CODES",
    "MAX_DEFINITION_BYTES",
    "Bounds",
    "ReferenceChecker",
    "References",
    "Requirement",
    "StaticReferences",
    "canonical_json",
    "collect_references",
    "contract",
    "definition_hash",
    "format_duration",
    "input_version",
    "line_diff",
    "parse_duration",
    "pretty_json",
    "required_authority",
    "shared_contract",
    "structured_diff",
    "validate_definition",
]
