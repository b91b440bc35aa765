"""Reading one workflow or one revision of the realm, and the refusal to change a plugin's workflow.

A workflow installed by a plugin (``plugin_id``) cannot be changed through the engine's own
functions (409 ``plugin_managed``).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.platform.errors import Conflict, NotFound
from engine.workflows.models import Workflow, WorkflowRevision

CATEGORY = "workflow"


async def get_workflow(session: AsyncSession, realm_id: str, workflow_id: str, *, lock: bool = False) -> Workflow:
    query = select(Workflow).where(col(Workflow.id) == workflow_id, col(Workflow.realm_id) == realm_id)
    if lock:
        query = query.with_for_update()
    workflow = (await session.execute(query)).scalar_one_or_none()
    if workflow is None:
        raise NotFound("No such workflow.")
    return workflow


def refuse_plugin_managed(workflow: Workflow, verb: str) -> None:
    if workflow.plugin_id:
        raise Conflict(
            f"This workflow was installed by the plugin {workflow.plugin_id}; {verb} it through the plugin.",
            code="plugin_managed",
        )


REVISION_MAX = 2**31 - 1  # revision numbers are PostgreSQL integers


async def get_revision(
    session: AsyncSession, realm_id: str, workflow_id: str, number: int, *, lock: bool = False
) -> WorkflowRevision:
    if not 1 <= number <= REVISION_MAX:
        raise NotFound("No such revision.")
    query = select(WorkflowRevision).where(
        col(WorkflowRevision.workflow_id) == workflow_id,
        col(WorkflowRevision.realm_id) == realm_id,
        col(WorkflowRevision.number) == number,
    )
    if lock:
        query = query.with_for_update()
    revision = (await session.execute(query)).scalar_one_or_none()
    if revision is None:
        raise NotFound("No such revision.")
    return revision
