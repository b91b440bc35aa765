"""Workflows and revisions (SPEC §5 "Workflows"), and the public contracts."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Response, delete, get, patch, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession, context_of, preview_settings
from engine.platform.errors import NotFound
from engine.runs import controls as run_controls
from engine.runs import preview
from engine.runs.read_models import RunPreview
from engine.workflows import publication as workflow_publication
from engine.workflows import read_models
from engine.workflows.catalog import create_workflow, delete_workflow, list_workflows, update_workflow
from engine.workflows.definitions import CONTRACT_NAMES, contract
from engine.workflows.inputs import prefixed
from engine.workflows.lookup import get_revision, get_workflow
from engine.workflows.publication import publish_revision
from engine.workflows.references import validate_for_realm
from engine.workflows.revisions import decide_revision, diff_revisions, list_revisions, stage_revision
from engine.workflows.views import (
    created_view,
    publication_view,
    revision_page,
    revision_view,
    validation_view,
    workflow_view,
)

UNSET: Any = msgspec.UNSET


class CreateWorkflow(Body):
    name: str
    description: str = ""
    owner_id: str | None = None
    requires_approval: bool | None = None
    definition: Any = msgspec.UNSET


class UpdateWorkflow(Body):
    name: str | None = None
    description: str | None = None
    owner_id: str | None = None


class DefinitionBody(Body):
    definition: Any


class DecideRevision(Body):
    comment: str | None = None


class RollbackBody(Body):
    revision: int


class PreviewBody(Body):
    subject_id: str
    organization_id: str | None = None
    revision: int | None = None  # the published one when not given


class WorkflowsController(Controller):
    path = REALM_BASE + "/workflows"
    tags = ["workflows"]

    @post(
        "/validate",
        operation_id="validateWorkflowDefinition",
        status_code=200,
        opt={"permission": "realm.workflows.write", "reads_only": True},
    )
    async def validate(
        self, data: JSONBody[DefinitionBody], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.DefinitionValidation:
        """Validate a definition against the contract and the realm; changes nothing."""
        issues = await validate_for_realm(db_session, principal.realm.id, data.definition)
        return validation_view(prefixed(issues, "/definition"))

    @post(
        "/{workflow_id:str}/preview",
        operation_id="previewWorkflowRun",
        status_code=200,
        opt={"permission": "realm.workflows.run"},
    )
    async def preview(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        data: JSONBody[PreviewBody],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> RunPreview:
        """What a run about one person would do, step by step, judged now; writes nothing.

        The same rules as starting the run by hand (realm.workflows.run, the starter's authority over
        every step and over the subject, never about oneself) and the same decisions as the worker.
        """
        found = await preview.preview_run(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            subject_id=data.subject_id,
            organization_id=data.organization_id,
            revision_number=data.revision,
            settings=preview_settings(context_of(request.app).settings),
        )
        return found

    @post(
        "/", operation_id="createWorkflow", opt={"permission": "realm.workflows.write", "location": "/workflows/{id}"}
    )
    async def create(
        self, request: AnyRequest, data: JSONBody[CreateWorkflow], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.CreatedWorkflow:
        """Create a workflow, optionally with its first revision's definition (staged, not published)."""
        has_definition = data.definition is not msgspec.UNSET
        workflow, revision = await create_workflow(
            db_session,
            principal.actor(request_id_of(request)),
            name=data.name,
            description=data.description,
            owner_id=data.owner_id,
            requires_approval=data.requires_approval,
            definition=data.definition if has_definition else None,
            has_definition=has_definition,
        )
        return created_view(workflow, revision)

    @get("/", operation_id="listWorkflows", opt={"permission": "realm.workflows.read", "reads_only": True})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        workflow_state: Annotated[str | None, QueryParameter(name="state")] = None,
        q: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.WorkflowPage:
        """The realm's workflows; ``q`` searches, ``state`` filters."""
        page = await list_workflows(
            db_session, principal.realm.id, state=workflow_state, q=q, cursor=cursor, limit=limit
        )
        return read_models.WorkflowPage(items=[workflow_view(w) for w in page.items], next_cursor=page.next_cursor)

    @get("/{workflow_id:str}", operation_id="getWorkflow", opt={"permission": "realm.workflows.read"})
    async def show(
        self, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Workflow:
        """One workflow: name, owner, state and its published revision."""
        workflow = await get_workflow(db_session, principal.realm.id, workflow_id)
        return workflow_view(workflow)

    @patch("/{workflow_id:str}", operation_id="updateWorkflow", opt={"permission": "realm.workflows.write"})
    async def update(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        data: JSONBody[UpdateWorkflow],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Workflow:
        """Change a workflow's name, description or owner."""
        workflow = await update_workflow(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            name=data.name,
            description=data.description,
            owner_id=data.owner_id,
        )
        return workflow_view(workflow)

    @delete(
        "/{workflow_id:str}",
        operation_id="deleteWorkflow",
        status_code=204,
        opt={"permission": "realm.workflows.publish"},
    )
    async def remove(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> None:
        """Delete a workflow with no run in flight (409 ``runs_in_flight`` otherwise)."""
        await delete_workflow(db_session, principal.actor(request_id_of(request)), workflow_id)

    @post(
        "/{workflow_id:str}/enable",
        operation_id="enableWorkflow",
        status_code=200,
        opt={"permission": "realm.workflows.publish"},
    )
    async def enable(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Workflow:
        """Enable a disabled workflow again."""
        workflow = await run_controls.set_workflow_enabled(
            db_session, principal.actor(request_id_of(request)), workflow_id, True
        )
        return workflow_view(workflow)

    @post(
        "/{workflow_id:str}/disable",
        operation_id="disableWorkflow",
        status_code=200,
        opt={"permission": "realm.workflows.write"},
    )
    async def disable(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Workflow:
        """Disable a workflow: nothing fires and runs in flight pause (compensation and cancellation go on)."""
        workflow = await run_controls.set_workflow_enabled(
            db_session, principal.actor(request_id_of(request)), workflow_id, False
        )
        return workflow_view(workflow)

    @post(
        "/{workflow_id:str}/revisions",
        operation_id="stageWorkflowRevision",
        opt={"permission": "realm.workflows.write", "location": "/workflows/{workflow_id}/revisions/{number}"},
        responses={
            201: ResponseSpec(read_models.WorkflowRevision, description="Staged as a new draft revision"),
            200: ResponseSpec(
                read_models.WorkflowRevision,
                description="Nothing changed: the latest revision already holds this definition, which "
                "comes back as it is (no new revision, no audit event)",
            ),
        },
    )
    async def stage(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        data: JSONBody[DefinitionBody],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[read_models.WorkflowRevision]:
        """Stage a new revision of the workflow's definition (checked against the contract first)."""
        staged = await stage_revision(db_session, principal.actor(request_id_of(request)), workflow_id, data.definition)
        return Response(revision_view(staged.revision), status_code=200 if staged.unchanged else 201)

    @get(
        "/{workflow_id:str}/revisions", operation_id="listWorkflowRevisions", opt={"permission": "realm.workflows.read"}
    )
    async def revisions(
        self, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.RevisionPage:
        """Every revision, oldest first, without their definitions (one page: ``next_cursor`` is null)."""
        items = await list_revisions(db_session, principal.realm.id, workflow_id)
        return revision_page(items)

    @get(
        "/{workflow_id:str}/revisions/{n:int}",
        operation_id="getWorkflowRevision",
        opt={"permission": "realm.workflows.read"},
    )
    async def revision(
        self, workflow_id: FromPath[str], n: FromPath[int], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.WorkflowRevision:
        """One revision of a workflow, with its definition."""
        revision = await get_revision(db_session, principal.realm.id, workflow_id, n)
        return revision_view(revision)

    @get(
        "/{workflow_id:str}/revisions/{n:int}/diff",
        operation_id="diffWorkflowRevisions",
        opt={"permission": "realm.workflows.read"},
    )
    async def diff(
        self,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
        against: FromQuery[int | None] = None,
    ) -> read_models.RevisionDiff:
        """Step-aware and line-by-line differences; ``against`` defaults to the published revision
        (or the one before when this one is published)."""
        if against is None:
            workflow = await get_workflow(db_session, principal.realm.id, workflow_id)
            published = workflow.published_revision
            against = published if published is not None and published != n else max(n - 1, 1)
        return await diff_revisions(db_session, principal.realm.id, workflow_id, n, against)

    @post(
        "/{workflow_id:str}/revisions/{n:int}/approve",
        operation_id="approveWorkflowRevision",
        status_code=200,
        opt={"permission": "realm.workflows.publish"},
    )
    async def approve(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[DecideRevision | None] = None,
    ) -> read_models.WorkflowRevision:
        """Approve a staged revision for publication (by someone other than its author)."""
        revision = await decide_revision(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            n,
            approve=True,
            comment=data.comment if data else None,
        )
        return revision_view(revision)

    @post(
        "/{workflow_id:str}/revisions/{n:int}/reject",
        operation_id="rejectWorkflowRevision",
        status_code=200,
        opt={"permission": "realm.workflows.publish"},
    )
    async def reject(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[DecideRevision | None] = None,
    ) -> read_models.WorkflowRevision:
        """Reject a staged revision; it is never published."""
        revision = await decide_revision(
            db_session,
            principal.actor(request_id_of(request)),
            workflow_id,
            n,
            approve=False,
            comment=data.comment if data else None,
        )
        return revision_view(revision)

    @post(
        "/{workflow_id:str}/revisions/{n:int}/publish",
        operation_id="publishWorkflowRevision",
        status_code=200,
        opt={"permission": "realm.workflows.publish"},
    )
    async def publish(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[DecideRevision | None] = None,
    ) -> read_models.Publication:
        """Publish a revision: new runs follow it (its steps within the publisher's own authority)."""
        result = await publish_revision(
            db_session, principal.actor(request_id_of(request)), workflow_id, n, comment=data.comment if data else None
        )
        return publication_view(result)

    @post(
        "/{workflow_id:str}/rollback",
        operation_id="rollbackWorkflow",
        status_code=200,
        opt={"permission": "realm.workflows.publish"},
    )
    async def rollback(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        data: JSONBody[RollbackBody],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Publication:
        """Publish an earlier revision again."""
        result = await workflow_publication.rollback(
            db_session, principal.actor(request_id_of(request)), workflow_id, data.revision
        )
        return publication_view(result)


class ContractsController(Controller):
    path = "/api/v1/contracts/workflows"
    tags = ["contracts"]

    @get("/{name:str}", operation_id="getWorkflowContract", opt={"public": True}, media_type="application/schema+json")
    async def get(self, name: FromPath[str]) -> Response[dict[str, Any]]:
        """The JSON Schemas of the definition (``definition.v1.json``) and of a step call (``step-call.v1.json``)."""
        if name not in CONTRACT_NAMES:
            raise NotFound(f"No contract {name!r}; there are {', '.join(CONTRACT_NAMES)}.")
        return Response(contract(name), media_type="application/schema+json")
