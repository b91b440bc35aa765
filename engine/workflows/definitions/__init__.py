"""The workflow definition contract: JSON Schemas, validation, canonical JSON and diffs.

Pure functions over plain JSON values: no database, no HTTP. The two contracts are packaged
beside this module and served as they are (``contract(name)``).
"""

from __future__ import annotations

from engine.workflows.definitions.authority import Requirement, required_authority
from engine.workflows.definitions.canonical import (
    authored_json,
    canonical_json,
    definition_hash,
    input_version,
    pretty_json,
)
from engine.workflows.definitions.contract import CONTRACT_NAMES, contract, shared_contract
from engine.workflows.definitions.diff import line_diff, structured_diff
from engine.workflows.definitions.durations import BOUNDS, Bounds, format_duration, parse_duration
from engine.workflows.definitions.references import ReferenceChecker, References, StaticReferences, collect_references
from engine.workflows.definitions.validation import validate_definition
from engine.workflows.definitions.vocabulary import ISSUE_CODES, MAX_DEFINITION_BYTES

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
    "authored_json",
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
