"""Revisions: staging, listing, approval or rejection, and diffs.

Seed 000 "Concepts" and "Definition" are the contract:

- A revision is immutable and numbered per workflow; its canonical JSON and SHA-256 are stored.
- Statuses move draft → (approved) → published → superseded, or draft → rejected.
- The author of a revision cannot approve or reject it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.independence import require_independent
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Forbidden
from engine.platform.ids import new_id
from engine.workflows import read_models
from engine.workflows.definitions.canonical import canonical_json, definition_hash
from engine.workflows.definitions.diff import line_diff, structured_diff
from engine.workflows.inputs import comment_issues, prefixed, raise_if
from engine.workflows.lookup import CATEGORY, get_revision, get_workflow, refuse_plugin_managed
from engine.workflows.models import Workflow, WorkflowRevision
from engine.workflows.references import validate_for_realm


async def add_revision(session: AsyncSession, actor: Actor, workflow: Workflow, definition: Any) -> WorkflowRevision:
    number = (
        await session.scalar(
            select(func.coalesce(func.max(col(WorkflowRevision.number)), 0)).where(
                col(WorkflowRevision.workflow_id) == workflow.id
            )
        )
        or 0
    ) + 1
    canonical = canonical_json(definition)
    revision = WorkflowRevision(
        id=new_id("wrv"),
        workflow_id=workflow.id,
        realm_id=workflow.realm_id,
        number=number,
        definition=definition,
        authored=definition,
        canonical=canonical,
        hash=definition_hash(definition),
        author_id=actor.id,
    )
    session.add(revision)
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.revision.staged",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={"revision": number, "hash": revision.hash},
    )
    return revision


@dataclass(frozen=True)
class Staged:
    """What saving a definition did: ``unchanged`` when the latest revision already holds exactly
    this definition (same hash), and ``revision`` is that revision; otherwise a new draft."""

    revision: WorkflowRevision
    unchanged: bool = False


async def stage_revision(session: AsyncSession, actor: Actor, workflow_id: str, definition: Any) -> Staged:
    """Stage ``definition`` as a new draft revision, unless it is identical to the latest revision:
    then nothing is written and the latest revision comes back marked ``unchanged`` (the API answers
    200 with it, the editor says "nothing changed")."""
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    refuse_plugin_managed(workflow, "change")
    raise_if(prefixed(await validate_for_realm(session, actor.realm_id, definition), "/definition"))
    latest = await session.scalar(
        select(WorkflowRevision)
        .where(col(WorkflowRevision.workflow_id) == workflow.id, col(WorkflowRevision.realm_id) == workflow.realm_id)
        .order_by(col(WorkflowRevision.number).desc())
        .limit(1)
    )
    if latest is not None and latest.hash == definition_hash(definition):
        return Staged(latest, unchanged=True)
    return Staged(await add_revision(session, actor, workflow, definition))


async def list_revisions(session: AsyncSession, realm_id: str, workflow_id: str) -> list[WorkflowRevision]:
    await get_workflow(session, realm_id, workflow_id)
    rows = await session.execute(
        select(WorkflowRevision)
        .where(col(WorkflowRevision.workflow_id) == workflow_id, col(WorkflowRevision.realm_id) == realm_id)
        .order_by(col(WorkflowRevision.number).desc())
    )
    return list(rows.scalars())


async def decide_revision(
    session: AsyncSession, actor: Actor, workflow_id: str, number: int, *, approve: bool, comment: str | None
) -> WorkflowRevision:
    """Approve or reject a draft revision; never by its author (separation of duties), only by an
    independent second person (engine/directory/independence.py)."""
    raise_if(comment_issues("/comment", comment))
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    refuse_plugin_managed(workflow, "approve" if approve else "reject")
    revision = await get_revision(session, actor.realm_id, workflow_id, number, lock=True)
    if revision.author_id is not None and revision.author_id == actor.id:
        raise Forbidden("The author of a revision cannot approve or reject it.", code="separation_of_duties")
    await require_independent(
        session,
        actor,
        revision.author_id,
        lambda authority: authority.holds("realm.workflows.publish"),
        refused_event="workflow.revision.review_refused",
        subject_type="workflow",
        subject_id=workflow.id,
        details={"revision": number, "decision": "approve" if approve else "reject"},
    )
    if revision.status != "draft":
        raise Conflict(
            f"Only a draft revision can be {'approved' if approve else 'rejected'}; this one is {revision.status}."
        )
    revision.status = "approved" if approve else "rejected"
    revision.decided_by = actor.id
    revision.decided_at = SYSTEM_CLOCK.now()
    revision.decision_comment = comment
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.revision.approved" if approve else "workflow.revision.rejected",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={"revision": number, "comment": comment},
    )
    return revision


async def diff_revisions(
    session: AsyncSession, realm_id: str, workflow_id: str, number: int, against: int
) -> read_models.RevisionDiff:
    new = await get_revision(session, realm_id, workflow_id, number)
    old = await get_revision(session, realm_id, workflow_id, against)
    return read_models.RevisionDiff(
        revision=number,
        against=against,
        structured=structured_diff(old.definition, new.definition),
        lines=line_diff(old.definition, new.definition),
    )
