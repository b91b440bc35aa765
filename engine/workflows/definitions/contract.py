"""The two JSON contracts packaged beside this module (``definition.v1.json``, ``step-call.v1.json``),
loaded once and served as they are."""

from __future__ import annotations

import copy
import json
from functools import cache
from importlib import resources
from typing import Any

CONTRACT_NAMES = ("definition.v1.json", "step-call.v1.json")


@cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files(__package__ or __name__).joinpath(name).read_text(encoding="utf-8")
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
