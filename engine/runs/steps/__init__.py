"""Step types by name. Adding one: a module here with a StepType subclass, a line below, and its
members in engine/workflows/definitions/definition.v1.json."""

from __future__ import annotations

from engine.runs.steps.assign_role import AssignRole
from engine.runs.steps.base import APPROVAL, EXTERNAL, INTERNAL, WAIT, Outcome, StepContext, StepFailure, StepType
from engine.runs.steps.groups import AddToGroup, RemoveFromGroup
from engine.runs.steps.remove_role import RemoveRole
from engine.runs.steps.simple import End, RemoveMembership, SuspendUser

STEP_TYPES: dict[str, StepType] = {
    step.name: step
    for step in (AssignRole(), RemoveRole(), AddToGroup(), RemoveFromGroup(), RemoveMembership(), SuspendUser(), End())
}

__all__ = [
    "APPROVAL",
    "EXTERNAL",
    "INTERNAL",
    "STEP_TYPES",
    "WAIT",
    "Outcome",
    "StepContext",
    "StepFailure",
    "StepType",
]
