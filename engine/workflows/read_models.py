"""Workflows and revisions as the API answers them and the pages show them (see
:mod:`engine.platform.read_models`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.platform.read_models import Shape


class Workflow(Shape):
    id: str
    name: str
    description: str
    owner_id: str | None
    state: str
    requires_approval: bool
    plugin_id: str | None
    published_revision: int | None
    created_by: str | None
    created_at: datetime
    updated_at: datetime


class WorkflowPage(Shape):
    items: list[Workflow]
    next_cursor: str | None


class RevisionSummary(Shape):
    id: str
    workflow_id: str
    number: int
    status: str
    hash: str
    author_id: str | None
    created_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    decision_comment: str | None
    published_by: str | None
    published_at: datetime | None


class WorkflowRevision(RevisionSummary):
    """A revision with its definition, in the author's key order (see ``definition.v1.json``)."""

    definition: dict[str, Any]


class RevisionPage(Shape):
    items: list[RevisionSummary]
    next_cursor: str | None


class CreatedWorkflow(Workflow):
    """A new workflow, with its first revision when a definition was given."""

    revision: WorkflowRevision | None


class Publication(Shape):
    workflow: Workflow
    revision: WorkflowRevision


class Issue(Shape):
    path: str
    code: str
    message: str


class DefinitionValidation(Shape):
    valid: bool
    errors: list[Issue]


class MemberChange(Shape):
    """One changed member, as a JSON pointer relative to the compared trigger or step."""

    path: str
    change: str
    old: Any
    new: Any


class TopLevelChange(Shape):
    old: Any
    new: Any
    changes: list[MemberChange]


class TriggerAtIndex(Shape):
    index: int
    trigger: Any


class ChangedTrigger(Shape):
    old_index: int
    new_index: int
    type: Any
    changes: list[MemberChange]


class IndexPair(Shape):
    old_index: int
    new_index: int


class TriggerChanges(Shape):
    added: list[TriggerAtIndex]
    removed: list[TriggerAtIndex]
    changed: list[ChangedTrigger]
    unchanged: list[IndexPair]


class StepAtIndex(Shape):
    id: str
    index: int
    step: Any


class ChangedStep(Shape):
    id: str
    old_index: int
    new_index: int
    changes: list[MemberChange]


class MovedStep(Shape):
    id: str
    old_index: int
    new_index: int


class StepInOrder(Shape):
    id: str
    status: str
    old_index: int | None
    new_index: int | None
    moved: bool


class StepChanges(Shape):
    added: list[StepAtIndex]
    removed: list[StepAtIndex]
    changed: list[ChangedStep]
    moved: list[MovedStep]
    unchanged: list[str]
    order: list[StepInOrder]


class StructuredDiff(Shape):
    changed: bool
    triggers: TriggerChanges
    steps: StepChanges
    retry: TopLevelChange | None
    schema_version: TopLevelChange | None


class LineRun(Shape):
    """A run of lines of the two pretty-printed definitions; line numbers start at 1."""

    op: str
    old_start: int
    new_start: int
    old_lines: list[str]
    new_lines: list[str]


class RevisionDiff(Shape):
    revision: int
    against: int
    structured: StructuredDiff
    lines: list[LineRun]
