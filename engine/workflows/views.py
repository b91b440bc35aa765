"""A workflow and a revision as the API and the pages show them (one shape each, declared in
:mod:`engine.workflows.read_models`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from engine.platform.errors import Issue
from engine.workflows import read_models
from engine.workflows.models import Workflow, WorkflowRevision

if TYPE_CHECKING:
    from engine.workflows.publication import Publication


def workflow_view(workflow: Workflow) -> read_models.Workflow:
    return read_models.Workflow(
        id=workflow.id,
        name=workflow.name,
        description=workflow.description,
        owner_id=workflow.owner_id,
        state=workflow.state,
        requires_approval=workflow.requires_approval,
        plugin_id=workflow.plugin_id,
        published_revision=workflow.published_revision,
        created_by=workflow.created_by,
        created_at=workflow.created_at,
        updated_at=workflow.updated_at,
    )


def revision_summary(revision: WorkflowRevision) -> read_models.RevisionSummary:
    """A revision without its definition (as lists show it)."""
    return read_models.RevisionSummary(
        id=revision.id,
        workflow_id=revision.workflow_id,
        number=revision.number,
        status=revision.status,
        hash=revision.hash,
        author_id=revision.author_id,
        created_at=revision.created_at,
        decided_by=revision.decided_by,
        decided_at=revision.decided_at,
        decision_comment=revision.decision_comment,
        published_by=revision.published_by,
        published_at=revision.published_at,
    )


def revision_view(revision: WorkflowRevision) -> read_models.WorkflowRevision:
    """A revision with its definition, as its author wrote it when that is kept."""
    return read_models.WorkflowRevision(
        **msgspec.structs.asdict(revision_summary(revision)),
        definition=revision.authored if revision.authored is not None else revision.definition,
    )


def revision_page(revisions: list[WorkflowRevision]) -> read_models.RevisionPage:
    """Every revision of a workflow, without definitions: one page (``next_cursor`` is null)."""
    return read_models.RevisionPage(items=[revision_summary(r) for r in revisions], next_cursor=None)


def created_view(workflow: Workflow, revision: WorkflowRevision | None) -> read_models.CreatedWorkflow:
    return read_models.CreatedWorkflow(
        **msgspec.structs.asdict(workflow_view(workflow)),
        revision=revision_view(revision) if revision is not None else None,
    )


def publication_view(result: Publication) -> read_models.Publication:
    return read_models.Publication(workflow=workflow_view(result.workflow), revision=revision_view(result.revision))


def validation_view(issues: list[Issue]) -> read_models.DefinitionValidation:
    return read_models.DefinitionValidation(
        valid=not issues, errors=[read_models.Issue(path=i.path, code=i.code, message=i.message) for i in issues]
    )
