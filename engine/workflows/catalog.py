"""Workflows themselves: create, list, rename, delete, enable and disable.

Deleting a workflow removes it and its revisions. Runs in flight would lose their definition,
so deletion is refused (409) while any run of the workflow has not finished; disable the
workflow first and let its runs end or cancel them. Disabling raises ``security.alert``
(seed 000).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.models import User
from engine.directory.policy import publish_approval_required
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Issue, ValidationFailed
from engine.platform.ids import new_id
from engine.platform.names import normalize
from engine.platform.pagination import Page, keyset_page
from engine.workflows.inputs import description_issues, name_issues, prefixed, raise_if
from engine.workflows.lookup import CATEGORY, get_workflow, refuse_plugin_managed
from engine.workflows.models import WORKFLOW_STATES, Workflow, WorkflowRevision
from engine.workflows.references import validate_for_realm
from engine.workflows.revisions import add_revision

SECURITY_ALERT, SECURITY_CATEGORY = "security.alert", "security"  # seed 000: disabling raises security.alert


async def _name_taken(session: AsyncSession, realm_id: str, name: str, other_than: str | None = None) -> bool:
    query = (
        select(func.count())
        .select_from(Workflow)
        .where(col(Workflow.realm_id) == realm_id, func.lower(col(Workflow.name)) == name.lower())
    )
    if other_than:
        query = query.where(col(Workflow.id) != other_than)
    return bool(await session.scalar(query))


async def _owner_issue(session: AsyncSession, realm_id: str, owner_id: str | None, path: str) -> list[Issue]:
    if owner_id is None:
        return []
    owner = await session.get(User, owner_id)
    if owner is None or owner.realm_id != realm_id:
        return [Issue(path, "not_found", "There is no such user in this realm.")]
    if owner.status != "active":
        return [Issue(path, "inactive", "The owner must be an active user.")]
    return []


async def create_workflow(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    description: str = "",
    owner_id: str | None = None,
    requires_approval: bool | None = None,
    definition: Any = None,
    has_definition: bool = False,
) -> tuple[Workflow, WorkflowRevision | None]:
    issues = name_issues("/name", name) + description_issues("/description", description)
    issues += await _owner_issue(session, actor.realm_id, owner_id, "/owner_id")
    policy_floor = await publish_approval_required(session, actor.realm_id)
    if policy_floor and requires_approval is False:
        # The realm policy is a floor: a request may turn approval on, never off.
        issues.append(
            Issue(
                "/requires_approval",
                "required_by_policy",
                "the realm policy requires approval before publishing; it cannot be turned off",
            )
        )
    if has_definition:
        issues += prefixed(await validate_for_realm(session, actor.realm_id, definition), "/definition")
    raise_if(issues)
    name = normalize(name)
    if await _name_taken(session, actor.realm_id, name):
        raise Conflict("A workflow with this name already exists in the realm.")
    if requires_approval is None:
        requires_approval = policy_floor
    workflow = Workflow(
        id=new_id("wfl"),
        realm_id=actor.realm_id,
        name=name,
        description=description,
        owner_id=owner_id or (actor.id if actor.type == "user" else None),
        requires_approval=requires_approval,
        created_by=actor.id,
    )
    session.add(workflow)
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.created",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={"name": name, "requires_approval": requires_approval},
    )
    revision = await add_revision(session, actor, workflow, definition) if has_definition else None
    return workflow, revision


async def list_workflows(
    session: AsyncSession,
    realm_id: str,
    *,
    state: str | None = None,
    q: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[Workflow]:
    query = select(Workflow).where(col(Workflow.realm_id) == realm_id)
    if state:
        if state not in WORKFLOW_STATES:
            raise ValidationFailed(
                "The request is not valid.",
                issues=[Issue("query:state", "invalid", "state is draft, active or disabled")],
            )
        query = query.where(col(Workflow.state) == state)
    if q:
        escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(col(Workflow.name).ilike("%" + escaped + "%"))
    return await keyset_page(session, query, col(Workflow.id), cursor=cursor, limit=limit)


async def revisions_waiting_for_review(
    session: AsyncSession, realm_id: str, workflow_ids: Sequence[str], reviewer_id: str
) -> dict[str, list[int]]:
    """Per workflow, the draft revisions newer than the published one that need an approval the
    reviewer may give (a revision's author never reviews it)."""
    if not workflow_ids:
        return {}
    rows = await session.execute(
        select(col(WorkflowRevision.workflow_id), col(WorkflowRevision.number))
        .join(Workflow, col(Workflow.id) == col(WorkflowRevision.workflow_id))
        .where(
            col(WorkflowRevision.realm_id) == realm_id,
            col(WorkflowRevision.workflow_id).in_(list(workflow_ids)),
            col(WorkflowRevision.status) == "draft",
            col(Workflow.requires_approval).is_(True),
            col(WorkflowRevision.number) > func.coalesce(col(Workflow.published_revision), 0),
            or_(col(WorkflowRevision.author_id).is_(None), col(WorkflowRevision.author_id) != reviewer_id),
        )
        .order_by(col(WorkflowRevision.number))
    )
    out: dict[str, list[int]] = {}
    for workflow_id, number in rows:
        out.setdefault(str(workflow_id), []).append(int(number))
    return out


async def update_workflow(
    session: AsyncSession,
    actor: Actor,
    workflow_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    owner_id: str | None = None,
) -> Workflow:
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    issues = name_issues("/name", name) + description_issues("/description", description)
    issues += await _owner_issue(session, actor.realm_id, owner_id, "/owner_id")
    raise_if(issues)
    changed: dict[str, Any] = {}
    if name is not None and normalize(name) != workflow.name:
        if await _name_taken(session, actor.realm_id, normalize(name), other_than=workflow.id):
            raise Conflict("A workflow with this name already exists in the realm.")
        changed["name"] = workflow.name = normalize(name)
    if description is not None and description != workflow.description:
        changed["description"] = workflow.description = description
    if owner_id is not None and owner_id != workflow.owner_id:
        changed["owner_id"] = workflow.owner_id = owner_id
    if changed:
        workflow.updated_at = SYSTEM_CLOCK.now()
        await session.flush()
        await record_audit(
            session,
            actor,
            "workflow.updated",
            category=CATEGORY,
            subject_type="workflow",
            subject_id=workflow.id,
            details={"changed": sorted(changed)},
        )
    return workflow


async def runs_in_flight(session: AsyncSession, workflow_id: str) -> int:
    """Runs of the workflow that have not finished (0 until the run tables exist)."""
    exists = await session.scalar(text("SELECT to_regclass('workflow_runs') IS NOT NULL"))
    if not exists:
        return 0
    count = await session.scalar(
        text(
            "SELECT count(*) FROM workflow_runs WHERE workflow_id = :w AND state NOT IN "
            "('succeeded', 'failed', 'compensated', 'compensation_failed', 'cancelled')"
        ),
        {"w": workflow_id},
    )
    return int(count or 0)


async def delete_workflow(session: AsyncSession, actor: Actor, workflow_id: str) -> None:
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    refuse_plugin_managed(workflow, "delete")
    if await runs_in_flight(session, workflow.id):
        raise Conflict(
            "Runs of this workflow have not finished; disable it and let them end, or cancel them.",
            code="runs_in_flight",
        )
    await record_audit(
        session,
        actor,
        "workflow.deleted",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={"name": workflow.name},
    )
    await session.delete(workflow)
    await session.flush()


async def set_enabled(session: AsyncSession, actor: Actor, workflow_id: str, enabled: bool) -> Workflow:
    """Disable: nothing fires. Enable: active again (draft without a published revision).

    Its runs in flight pause and resume with it: call ``engine.runs.controls.set_workflow_enabled``,
    which owns the run table."""
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    refuse_plugin_managed(workflow, "enable" if enabled else "disable")
    if enabled:
        if workflow.state != "disabled":
            raise Conflict("The workflow is not disabled.")
        workflow.state = "active" if workflow.published_revision is not None else "draft"
    else:
        if workflow.state == "disabled":
            raise Conflict("The workflow is already disabled.")
        workflow.state = "disabled"
    workflow.updated_at = SYSTEM_CLOCK.now()
    await session.flush()
    await record_audit(
        session,
        actor,
        "workflow.enabled" if enabled else "workflow.disabled",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={"state": workflow.state},
    )
    if not enabled:
        # Seed 000: disabling a workflow raises a security alert. Runs in flight pause and
        # triggers stop firing, which an attacker could use to hold back offboarding.
        await record_audit(
            session,
            actor,
            SECURITY_ALERT,
            category=SECURITY_CATEGORY,
            subject_type="workflow",
            subject_id=workflow.id,
            details={"reason": "workflow_disabled", "workflow_id": workflow.id, "name": workflow.name},
        )
    return workflow
