"""A workflow and its revisions as the API shows them: every column of the row, and nothing made up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from engine.platform.errors import Issue
from engine.workflows.models import Workflow, WorkflowRevision
from engine.workflows.publication import Publication
from engine.workflows.views import (
    created_view,
    publication_view,
    revision_page,
    revision_summary,
    revision_view,
    validation_view,
    workflow_view,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _workflow() -> Workflow:
    return Workflow(
        id="wfl_1",
        realm_id="rlm_1",
        name="Onboarding",
        description="New people get their roles",
        owner_id="usr_owner",
        state="active",
        requires_approval=True,
        plugin_id="plugin.hr",
        published_revision=2,
        created_by="usr_creator",
        created_at=T0,
        updated_at=T0 + timedelta(hours=1),
    )


def _revision(number: int, *, authored: bool) -> WorkflowRevision:
    definition = {"schema_version": 1, "steps": [], "triggers": [{"type": "manual"}]}
    return WorkflowRevision(
        id=f"wrv_{number}",
        workflow_id="wfl_1",
        realm_id="rlm_1",
        number=number,
        status="published",
        definition=definition,
        authored={"triggers": [{"type": "manual"}], "steps": [], "schema_version": 1} if authored else None,
        canonical="{}",
        hash=f"{number:064d}",
        author_id="usr_author",
        created_at=T0 + timedelta(minutes=number),
        decided_by="usr_decider",
        decided_at=T0 + timedelta(minutes=number + 1),
        decision_comment="Looks right",
        published_by="usr_publisher",
        published_at=T0 + timedelta(minutes=number + 2),
    )


def _summary(revision: WorkflowRevision) -> dict[str, object]:
    return {
        "id": revision.id,
        "workflow_id": "wfl_1",
        "number": revision.number,
        "status": "published",
        "hash": revision.hash,
        "author_id": "usr_author",
        "created_at": revision.created_at,
        "decided_by": "usr_decider",
        "decided_at": revision.decided_at,
        "decision_comment": "Looks right",
        "published_by": "usr_publisher",
        "published_at": revision.published_at,
    }


WORKFLOW = {
    "id": "wfl_1",
    "name": "Onboarding",
    "description": "New people get their roles",
    "owner_id": "usr_owner",
    "state": "active",
    "requires_approval": True,
    "plugin_id": "plugin.hr",
    "published_revision": 2,
    "created_by": "usr_creator",
    "created_at": T0,
    "updated_at": T0 + timedelta(hours=1),
}


def test_a_workflow_shows_every_column_but_its_realm() -> None:
    assert msgspec.structs.asdict(workflow_view(_workflow())) == WORKFLOW


def test_a_revision_shows_its_decisions_and_the_definition_as_its_author_ordered_it() -> None:
    kept, plain = _revision(1, authored=True), _revision(2, authored=False)
    assert msgspec.structs.asdict(revision_summary(kept)) == _summary(kept)
    shown = revision_view(kept)
    assert list(shown.definition) == ["triggers", "steps", "schema_version"]  # the author's order
    assert msgspec.structs.asdict(shown) == {**_summary(kept), "definition": kept.authored}
    assert msgspec.structs.asdict(revision_view(plain)) == {**_summary(plain), "definition": plain.definition}


def test_the_revisions_page_is_every_revision_without_definitions_on_one_page() -> None:
    revisions = [_revision(1, authored=True), _revision(2, authored=False)]
    page = revision_page(revisions)
    assert page.next_cursor is None
    assert [msgspec.structs.asdict(item) for item in page.items] == [_summary(r) for r in revisions]
    assert revision_page([]).items == []


def test_a_created_workflow_carries_its_first_revision_when_there_is_one() -> None:
    revision = _revision(1, authored=False)
    with_revision = created_view(_workflow(), revision)
    without = created_view(_workflow(), None)
    assert with_revision.revision == revision_view(revision)
    assert {k: v for k, v in msgspec.structs.asdict(with_revision).items() if k != "revision"} == WORKFLOW
    assert msgspec.structs.asdict(without) == {**WORKFLOW, "revision": None}


def test_a_publication_shows_the_workflow_and_the_published_revision() -> None:
    revision = _revision(2, authored=False)
    shown = publication_view(Publication(workflow=_workflow(), revision=revision, superseded=1))
    assert shown.workflow == workflow_view(_workflow())
    assert shown.revision == revision_view(revision)


def test_a_validation_is_valid_only_without_issues_and_lists_each_issue_whole() -> None:
    assert msgspec.to_builtins(validation_view([])) == {"valid": True, "errors": []}
    issues = [
        Issue(path="/steps/0/id", code="required", message="A step needs an id."),
        Issue(path="/triggers", code="too_short", message="At least one trigger."),
    ]
    assert msgspec.to_builtins(validation_view(issues)) == {
        "valid": False,
        "errors": [
            {"path": "/steps/0/id", "code": "required", "message": "A step needs an id."},
            {"path": "/triggers", "code": "too_short", "message": "At least one trigger."},
        ],
    }
