"""The server's serialization of a definition, its hash, and the input version of a step attempt.

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8 without escaping non-ASCII
characters, integers written as integers. Definitions never contain floats (the schema refuses
them), so the canonical form is unambiguous. A revision stores this text and its SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

_HEX = re.compile(r"[0-9a-f]{16,}")


def canonical_json(definition: Any) -> str:
    """Sorted keys, compact separators, non-ASCII kept as is. Raises ValueError for NaN or infinity."""
    return json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(definition: Any) -> bytes:
    return canonical_json(definition).encode("utf-8")


def definition_hash(definition: Any) -> str:
    """SHA-256 of the canonical UTF-8 bytes, as 64 lowercase hex digits."""
    return hashlib.sha256(canonical_bytes(definition)).hexdigest()


def pretty_json(definition: Any) -> str:
    """Sorted keys, two-space indentation: what the editor shows and line diffs compare."""
    return json.dumps(definition, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)


def input_version(revision_number: int, definition_hash: str, run_input_version: int | str) -> str:
    """``r<revision>:<first 16 hex digits of the hash>:i<run input version>``, e.g. ``r3:9f86d081884c7d65:i1``.

    The run input version is the event's event_version for event triggers and the definition's
    schema_version for schedule and manual runs.
    """
    if isinstance(revision_number, bool) or not isinstance(revision_number, int) or revision_number < 1:
        raise ValueError("The revision number must be a positive integer.")
    if not isinstance(definition_hash, str) or not _HEX.fullmatch(definition_hash):
        raise ValueError("The definition hash must be at least 16 lowercase hex digits.")
    if isinstance(run_input_version, bool) or not isinstance(run_input_version, int | str):
        raise ValueError("The run input version must be an integer or a string.")
    if str(run_input_version) == "" or ":" in str(run_input_version):
        raise ValueError("The run input version must be non-empty and contain no colon.")
    return f"r{revision_number}:{definition_hash[:16]}:i{run_input_version}"
