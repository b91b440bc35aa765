"""The workflow definition contract: JSON Schemas, validation, canonical JSON and diffs.

Pure functions over plain JSON values: no database, no HTTP. The two contracts are packaged
beside this module and served as they are (``contract(name)``).
"""

from __future__ import annotations

from engine.workflows.definitions.canonical import canonical_json, definition_hash, input_version, pretty_json
from engine.workflows.definitions.contract import CONTRACT_NAMES, contract, shared_contract
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
