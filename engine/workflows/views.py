"""A workflow and a revision as the API and the pages show them (one shape each)."""

from __future__ import annotations

from typing import Any

from engine.workflows.models import Workflow, WorkflowRevision


def workflow_view(workflow: Workflow) -> dict[str, Any]:
    return {
        "id": workflow.id,
        "name": workflow.name,
        "description": workflow.description,
        "owner_id": workflow.owner_id,
        "state": workflow.state,
        "requires_approval": workflow.requires_approval,
        "plugin_id": workflow.plugin_id,
        "published_revision": workflow.published_revision,
        "created_by": workflow.created_by,
        "created_at": workflow.created_at,
        "updated_at": workflow.updated_at,
    }


def revision_view(revision: WorkflowRevision, *, with_definition: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": revision.id,
        "workflow_id": revision.workflow_id,
        "number": revision.number,
        "status": revision.status,
        "hash": revision.hash,
        "author_id": revision.author_id,
        "created_at": revision.created_at,
        "decided_by": revision.decided_by,
        "decided_at": revision.decided_at,
        "decision_comment": revision.decision_comment,
        "published_by": revision.published_by,
        "published_at": revision.published_at,
    }
    if with_definition:
        out["definition"] = revision.authored if revision.authored is not None else revision.definition
    return out
