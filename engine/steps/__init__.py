"""Step types by name. Adding one: a module here with a StepType subclass, a line below, and its
members in engine/definitions/definition.v1.json."""

from __future__ import annotations

from engine.steps.assign_role import AssignRole
from engine.steps.base import APPROVAL, EXTERNAL, INTERNAL, WAIT, Outcome, StepContext, StepFailure, StepType
from engine.steps.groups import AddToGroup, RemoveFromGroup
from engine.steps.human import Approval, Notify, Wait
from engine.steps.remove_role import RemoveRole
from engine.steps.simple import End, RemoveMembership, SuspendUser

STEP_TYPES: dict[str, StepType] = {
    step.name: step
    for step in (
        AssignRole(),
        RemoveRole(),
        AddToGroup(),
        RemoveFromGroup(),
        RemoveMembership(),
        SuspendUser(),
        Notify(),
        Approval(),
        Wait(),
        End(),
    )
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
