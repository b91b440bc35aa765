"""Workflow templates: the four lifecycle scenarios a new workflow can start from, as JSON files
packaged beside this module (shipped in the wheel with the code, like the contracts).

Each file holds ``name`` (the new workflow's suggested name), ``title``, ``summary`` and a
``definition`` that follows ``definition.v1.json`` except for its references to the realm's own
objects (roles, groups, approvers, endpoint subscriptions): those are left empty (``""``, or ``[]``
for a list) for the author to choose, so validation names each one still to fill. The order of
:data:`TEMPLATE_KEYS` is the order they are offered in.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

TEMPLATE_KEYS = ("onboarding", "approved-access", "access-expiry", "offboarding")


@dataclass(frozen=True)
class WorkflowTemplate:
    key: str
    name: str
    title: str
    summary: str
    definition: dict[str, Any]


@cache
def _load(key: str) -> WorkflowTemplate:
    text = resources.files(__package__ or __name__).joinpath(f"{key}.json").read_text(encoding="utf-8")
    raw = json.loads(text)
    return WorkflowTemplate(key, raw["name"], raw["title"], raw["summary"], raw["definition"])


def workflow_templates() -> list[WorkflowTemplate]:
    return [_load(key) for key in TEMPLATE_KEYS]


def workflow_template(key: str) -> WorkflowTemplate | None:
    """The template named ``key``, its definition a copy the caller may change; None when unknown."""
    if key not in TEMPLATE_KEYS:
        return None
    found = _load(key)
    return WorkflowTemplate(found.key, found.name, found.title, found.summary, copy.deepcopy(found.definition))
