"""Publication and rollback (seed 000 "Authority and accountability").

- Publishing needs ``realm.workflows.publish`` and passes the delegation ceiling for every step;
  it makes a draft workflow active but never re-enables a disabled one; the previously published
  revision becomes superseded. Rollback republishes an earlier revision under the same checks.
- A workflow that requires approval (or whose realm policy requires it) is published only from
  an approved revision.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import load_authority
from engine.directory.policy import publish_approval_required
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Forbidden, Issue, ValidationFailed
from engine.workflows.delegation import delegation_issues, raise_delegation
from engine.workflows.inputs import comment_issues, prefixed, raise_if
from engine.workflows.lookup import CATEGORY, REVISION_MAX, get_revision, get_workflow, refuse_plugin_managed
from engine.workflows.models import Workflow, WorkflowRevision
from engine.workflows.references import validate_for_realm


@dataclass
class Publication:
    workflow: Workflow
    revision: WorkflowRevision
    superseded: int | None


async def _publish(
    session: AsyncSession,
    actor: Actor,
    workflow: Workflow,
    revision: WorkflowRevision,
    *,
    rollback: bool,
    comment: str | None = None,
) -> Publication:
    if actor.type != "user" or actor.id is None:
        raise Forbidden("Only a user can be accountable for a published revision.")
    authority = await load_authority(session, actor.realm_id, actor.type, actor.id)
    if not authority.holds("realm.workflows.publish"):
        raise Forbidden("Publishing needs the permission realm.workflows.publish.")
    # References may have changed since the revision was staged.
    raise_if(prefixed(await validate_for_realm(session, actor.realm_id, revision.definition), "/definition"))
    raise_delegation(await delegation_issues(session, actor.realm_id, authority, revision.definition))
    superseded: int | None = None
    if workflow.published_revision is not None and workflow.published_revision != revision.number:
        superseded = workflow.published_revision
        await session.execute(
            update(WorkflowRevision)
            .where(col(WorkflowRevision.workflow_id) == workflow.id, col(WorkflowRevision.status) == "published")
            .values(status="superseded")
        )
    revision.status = "published"
    revision.published_by = actor.id
    revision.published_at = SYSTEM_CLOCK.now()
    workflow.published_revision = revision.number
    if workflow.state == "draft":
        workflow.state = "active"
    workflow.updated_at = SYSTEM_CLOCK.now()
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.rolled_back" if rollback else "workflow.published",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={
            "revision": revision.number,
            "superseded": superseded,
            "hash": revision.hash,
            "state": workflow.state,
            "comment": comment,
        },
    )
    return Publication(workflow, revision, superseded)


async def publish_revision(
    session: AsyncSession, actor: Actor, workflow_id: str, number: int, *, comment: str | None = None
) -> Publication:
    raise_if(comment_issues("/comment", comment))
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    refuse_plugin_managed(workflow, "publish")
    revision = await get_revision(session, actor.realm_id, workflow_id, number, lock=True)
    if revision.status == "published":
        raise Conflict("This revision is already published.")
    if revision.status == "superseded":
        raise Conflict("A superseded revision is not published again directly; roll back to it instead.")
    if revision.status == "rejected":
        raise Conflict("A rejected revision cannot be published.")
    if revision.status != "approved" and await approval_needed(session, workflow):
        raise Forbidden("This workflow requires an approved revision before publishing.", code="approval_required")
    return await _publish(session, actor, workflow, revision, rollback=False, comment=comment)


async def approval_needed(session: AsyncSession, workflow: Workflow) -> bool:
    """Whether publishing ``workflow`` needs an approved revision: its own ``requires_approval``, or
    the realm's publish-approval policy, a floor over every workflow of the realm while it is on."""
    return workflow.requires_approval or await publish_approval_required(session, workflow.realm_id)


async def rollback(session: AsyncSession, actor: Actor, workflow_id: str, number: int) -> Publication:
    """Republish an earlier revision (one that was published before) under the same checks."""
    if not 1 <= number <= REVISION_MAX:
        raise ValidationFailed(
            "The request is not valid.", issues=[Issue("/revision", "out_of_range", "is not a revision number")]
        )
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    refuse_plugin_managed(workflow, "roll back")
    revision = await get_revision(session, actor.realm_id, workflow_id, number, lock=True)
    if revision.status == "published":
        raise Conflict("This revision is the published one already.")
    if revision.status != "superseded":
        raise Conflict("Only a revision that was published before can be rolled back to; publish drafts instead.")
    return await _publish(session, actor, workflow, revision, rollback=True)
