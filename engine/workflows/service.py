"""Workflows and revisions: staging, approval, publication, rollback, enable, disable, delete.

Seed 000 "Concepts", "Definition", "Limits and validation" and "Authority and accountability"
(publication) are the contract:

- A revision is immutable and numbered per workflow; its canonical JSON and SHA-256 are stored.
- Statuses move draft → (approved) → published → superseded, or draft → rejected.
- The author of a revision cannot approve or reject it. A workflow that requires approval is
  published only from an approved revision.
- Publishing needs ``realm.workflows.publish`` and passes the delegation ceiling for every step;
  it makes a draft workflow active but never re-enables a disabled one; the previously published
  revision becomes superseded. Rollback republishes an earlier revision under the same checks.
- A workflow installed by a plugin (``plugin_id``) cannot be changed through here (409).

Deleting a workflow removes it and its revisions. Runs in flight would lose their definition,
so deletion is refused (409) while any run of the workflow has not finished; disable the
workflow first and let its runs end or cancel them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, cast, func, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import Authority, load_authority
from engine.directory.independence import require_independent
from engine.directory.models import Group, Role, User
from engine.directory.policy import publish_approval_required
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.db import fetch_hot, positional
from engine.platform.errors import (
    Conflict,
    Forbidden,
    GrantCeilingExceeded,
    Issue,
    NotFound,
    ValidationFailed,
    missing_permissions,
)
from engine.platform.ids import new_id
from engine.platform.names import hidden_character_issues, normalize
from engine.platform.pagination import Page, keyset_page
from engine.workflows.definitions.canonical import canonical_json, definition_hash
from engine.workflows.definitions.diff import line_diff, structured_diff
from engine.workflows.definitions.validation import (
    MAX_DEFINITION_BYTES,
    References,
    Requirement,
    StaticReferences,
    collect_references,
    required_authority,
    requirement_problem,
    validate_definition,
)
from engine.workflows.models import Workflow, WorkflowRevision

CATEGORY = "workflow"
SECURITY_ALERT, SECURITY_CATEGORY = "security.alert", "security"  # seed 000: disabling raises security.alert
MAX_NAMED_REFERENCES = 500


# --- Views ----------------------------------------------------------------------------------------


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


# --- Input rules ----------------------------------------------------------------------------------


def name_issues(path: str, name: str | None) -> list[Issue]:
    if name is None:
        return []
    stripped = name.strip()
    if not stripped:
        return [Issue(path, "too_short", "A workflow name has 1 to 100 characters.")]
    if len(stripped) > 100:
        return [Issue(path, "too_long", "A workflow name has at most 100 characters.")]
    if name.splitlines() != [name]:  # any line break, Unicode's included
        return [Issue(path, "invalid", "A workflow name has no line breaks.")]
    if "\x00" in name:
        return [Issue(path, "invalid_character", "A workflow name has no NUL characters.")]
    return hidden_character_issues(path, name)


def description_issues(path: str, description: str | None) -> list[Issue]:
    if description is not None and len(description) > 500:
        return [Issue(path, "too_long", "A description has at most 500 characters.")]
    if description is not None and "\x00" in description:
        return [Issue(path, "invalid_character", "A description has no NUL characters.")]
    return []


def holds_nul(value: Any) -> bool:
    """Is there a NUL character anywhere in the value (text or member name)? A walk without paths;
    a value too large to be a definition (or cyclic) answers True, for :func:`nul_issues` to decide."""
    stack = [value]
    nodes = 0
    while stack:
        nodes += 1
        if nodes > 2 * MAX_DEFINITION_BYTES:
            return True
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            for key, member in item.items():
                if "\x00" in str(key):
                    return True
                stack.append(member)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def nul_issues(value: Any, path: str = "", found: list[Issue] | None = None) -> list[Issue]:
    """NUL characters anywhere in a definition (PostgreSQL cannot store them); at most 20 reported."""
    found = [] if found is None else found
    if len(found) >= 20:
        return found
    if isinstance(value, str):
        if "\x00" in value:
            found.append(Issue(path, "invalid_character", "Text must not contain NUL characters."))
    elif isinstance(value, dict):
        for key, item in value.items():
            segment = str(key).replace("~", "~0").replace("/", "~1")
            if "\x00" in str(key):
                found.append(Issue(f"{path}/{segment}", "invalid_character", "Names must not contain NUL characters."))
            nul_issues(item, f"{path}/{segment}", found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            nul_issues(item, f"{path}/{index}", found)
    return found


def comment_issues(path: str, comment: str | None) -> list[Issue]:
    if comment is not None and len(comment) > 1000:
        return [Issue(path, "too_long", "A comment has at most 1000 characters.")]
    return []


def raise_if(issues: list[Issue]) -> None:
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)


def prefixed(issues: Sequence[Issue], prefix: str) -> list[Issue]:
    return [Issue(prefix + i.path, i.code, i.message) for i in issues]


# --- References and the delegation ceiling --------------------------------------------------------


# Every id a definition names, checked in the realm in one statement: one branch per kind, each
# on its table's primary key (an empty list makes its branch return nothing at once). Sent to
# asyncpg directly when the request only reads (``fetch_hot``): validation is typed live.
_REFERENCES_SQL = positional(
    """
    SELECT 'role', id, boundary FROM roles
     WHERE realm_id = :realm AND id = ANY(CAST(:roles AS varchar[]))
    UNION ALL
    SELECT 'group', id, NULL FROM groups
     WHERE realm_id = :realm AND id = ANY(CAST(:groups AS varchar[]))
    UNION ALL
    SELECT 'approver', id, NULL FROM users
     WHERE realm_id = :realm AND id = ANY(CAST(:approvers AS varchar[])) AND status = 'active' AND NOT guest
    UNION ALL
    SELECT 'organization', id, state FROM organizations
     WHERE realm_id = :realm AND id = ANY(CAST(:organizations AS varchar[]))
    UNION ALL
    SELECT 'webhook', id, NULL FROM webhook_subscriptions
     WHERE realm_id = :realm AND id = ANY(CAST(:webhooks AS varchar[])) AND state <> 'deleted'
    """
)


async def load_references(
    session: AsyncSession, realm_id: str, definition: Any, refs: References | None = None
) -> StaticReferences:
    """The realm's answers for every id the definition names, in one query (none when it names none).

    ``refs``: the definition's references when the caller collected them already."""
    refs = collect_references(definition) if refs is None else refs
    found: dict[str, dict[str, str | None]] = {
        "role": {},
        "group": {},
        "approver": {},
        "organization": {},
        "webhook": {},
    }
    if refs.roles or refs.groups or refs.approvers or refs.organizations or refs.webhooks:
        rows = await fetch_hot(
            session,
            _REFERENCES_SQL,
            {
                "realm": realm_id,
                "roles": sorted(refs.roles),
                "groups": sorted(refs.groups),
                "approvers": sorted(refs.approvers),
                "organizations": sorted(refs.organizations),
                "webhooks": sorted(refs.webhooks),
            },
        )
        for kind, ref_id, detail in rows:
            found[kind][ref_id] = detail
    return StaticReferences(
        known_roles={rid: str(boundary) for rid, boundary in found["role"].items()},
        known_groups=set(found["group"]),
        known_approvers=set(found["approver"]),
        known_organizations={oid: str(state) for oid, state in found["organization"].items()},
        known_webhooks=set(found["webhook"]),
    )


async def validate_for_realm(session: AsyncSession, realm_id: str, definition: Any) -> list[Issue]:
    """Schema, semantics and references in the realm: every issue at once, in one pass.

    A definition naming more ids than any valid one could (20 steps) is checked without its
    references first, so junk never turns into large lookups.
    """
    if holds_nul(definition):
        try:
            nul = nul_issues(definition)
        except RecursionError:
            nul = []  # validation reports the nesting itself
        if nul:
            return nul
    refs = collect_references(definition)
    named = len(refs.roles) + len(refs.groups) + len(refs.approvers) + len(refs.organizations) + len(refs.webhooks)
    if named > MAX_NAMED_REFERENCES:
        issues = validate_definition(definition)
        if issues:
            return issues
    references = await load_references(session, realm_id, definition, refs)
    return validate_definition(definition, references=references)


async def _trigger_organization(session: AsyncSession, realm_id: str, definition: Mapping[str, Any]) -> str | None:
    """The organization every trigger pins, when they all pin the same one; otherwise None."""
    pins: list[str | None] = []
    for trigger in definition.get("triggers", []):
        kind = trigger.get("type")
        if kind == "event":
            pins.append(trigger.get("organization_id"))
        elif kind == "schedule":
            select_ = trigger.get("select") or {}
            if select_.get("type") == "organization_members":
                pins.append(select_.get("organization_id"))
            elif select_.get("type") == "group_members":
                group = await session.get(Group, select_.get("group_id"))
                pins.append(group.organization_id if group and group.realm_id == realm_id else None)
            else:
                pins.append(None)
        else:
            pins.append(None)
    if pins and all(p is not None and p == pins[0] for p in pins):
        return pins[0]
    return None


async def _group_role_permissions(
    session: AsyncSession, group_id: str
) -> tuple[str | None, list[tuple[str, list[str], str]]]:
    """The group's organization and every role it grants, its ancestors' included."""
    rows = await session.execute(
        text(
            """
            WITH RECURSIVE chain AS (
                SELECT id, parent_id, organization_id FROM groups WHERE id = :g
                UNION
                SELECT g.id, g.parent_id, g.organization_id FROM groups g JOIN chain c ON g.id = c.parent_id
            )
            SELECT r.name, r.permissions, r.boundary FROM chain c
              JOIN group_roles gr ON gr.group_id = c.id JOIN roles r ON r.id = gr.role_id
            """
        ),
        {"g": group_id},
    )
    group = await session.get(Group, group_id)
    return (group.organization_id if group else None), [(n, list(p or []), b) for n, p, b in rows]


async def delegation_issues(
    session: AsyncSession,
    realm_id: str,
    authority: Authority,
    definition: Mapping[str, Any],
    *,
    prefix: str = "/definition",
) -> list[Issue]:
    """Each step must pass the check that performing it directly would (seed 000)."""
    issues: list[Issue] = []
    trigger_org = await _trigger_organization(session, realm_id, definition)
    for index, step in enumerate(definition.get("steps", [])):
        path = f"{prefix}/steps/{index}"
        pinned = step.get("organization_id") if isinstance(step.get("organization_id"), str) else None
        for requirement in required_authority(step):
            issue = await requirement_issue(session, realm_id, authority, requirement, pinned or trigger_org, path)
            if issue is not None:
                issues.append(issue)
                break
    return issues


async def requirement_issue(
    session: AsyncSession,
    realm_id: str,
    authority: Authority,
    requirement: Requirement,
    run_org: str | None,
    path: str,
) -> Issue | None:
    """:func:`requirement_problem` on the facts read now."""
    role: tuple[str, list[str], str] | None = None
    group_exists, group_org = True, None
    group_roles: list[tuple[str, list[str], str]] = []
    if requirement.group_id:
        group = await session.get(Group, requirement.group_id)
        group_exists = group is not None and group.realm_id == realm_id
        if group_exists:
            group_org, group_roles = await _group_role_permissions(session, requirement.group_id)
    if requirement.kind == "role_ceiling" and requirement.role_id:
        found = await session.get(Role, requirement.role_id)
        if found is not None and found.realm_id == realm_id:
            role = (found.name, list(found.permissions), found.boundary)
    return requirement_problem(
        requirement,
        authority,
        run_org,
        path,
        role=role,
        group_exists=group_exists,
        group_org=group_org,
        group_roles=group_roles,
    )


def raise_delegation(issues: list[Issue]) -> None:
    """403, naming each step: grant_ceiling_exceeded when any step exceeds a ceiling, else forbidden."""
    if not issues:
        return
    detail = "The publisher lacks the authority some steps need: " + ", ".join(
        i.path.replace("/definition/steps/", "definition.steps[").replace("/", ".") + "]" for i in issues
    )
    # What is lacked across the steps, each once, as the typed member a program reads.
    members = missing_permissions(list(dict.fromkeys(gap for i in issues for gap in i.missing)))
    if any(i.code == "grant_ceiling_exceeded" for i in issues):
        raise GrantCeilingExceeded(detail, issues=issues, members=members)
    raise Forbidden(detail, issues=issues, members=members)


# --- Workflows ------------------------------------------------------------------------------------


async def workflows_referencing(session: AsyncSession, realm_id: str, object_id: str) -> list[Workflow]:
    """Workflows not deleted whose published revision names ``object_id`` (a role, group, subscription…).

    Ids are unique prefixed strings, so a quoted id anywhere in the definition is a reference.
    """
    needle = "%" + json.dumps(object_id).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = await session.execute(
        select(Workflow)
        .join(
            WorkflowRevision,
            (WorkflowRevision.workflow_id == Workflow.id) & (WorkflowRevision.status == "published"),
        )
        .where(
            Workflow.realm_id == realm_id,
            Workflow.state != "deleted",
            cast(WorkflowRevision.definition, Text).like(needle),
        )
        .order_by(Workflow.name)
    )
    return list(rows.scalars().unique().all())


async def refuse_if_referenced(session: AsyncSession, realm_id: str, object_id: str, what: str, force: bool) -> None:
    """409 ``referenced_by_workflows`` naming the workflows that use ``object_id``, unless ``force``."""
    if force:
        return
    using = await workflows_referencing(session, realm_id, object_id)
    if using:
        names = ", ".join(w.name for w in using)
        raise Conflict(
            f"The {what} is used by the published revision of {len(using)} workflow(s): {names}. "
            "Their runs would fail at that step. Change those workflows first, or delete anyway with force=true.",
            code="referenced_by_workflows",
            issues=[Issue("", "referenced_by", f"workflow {w.name} ({w.id})") for w in using],
            members={"referenced_by": [{"workflow_id": w.id, "name": w.name} for w in using]},
        )


async def get_workflow(session: AsyncSession, realm_id: str, workflow_id: str, *, lock: bool = False) -> Workflow:
    query = select(Workflow).where(Workflow.id == workflow_id, Workflow.realm_id == realm_id)
    if lock:
        query = query.with_for_update()
    workflow = (await session.execute(query)).scalar_one_or_none()
    if workflow is None:
        raise NotFound("No such workflow.")
    return workflow


def _not_plugin(workflow: Workflow, verb: str) -> None:
    if workflow.plugin_id:
        raise Conflict(
            f"This workflow was installed by the plugin {workflow.plugin_id}; {verb} it through the plugin.",
            code="plugin_managed",
        )


async def _name_taken(session: AsyncSession, realm_id: str, name: str, other_than: str | None = None) -> bool:
    query = (
        select(func.count())
        .select_from(Workflow)
        .where(Workflow.realm_id == realm_id, func.lower(Workflow.name) == name.lower())
    )
    if other_than:
        query = query.where(Workflow.id != other_than)
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
    revision = await _stage(session, actor, workflow, definition) if has_definition else None
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
    query = select(Workflow).where(Workflow.realm_id == realm_id)
    if state:
        if state not in ("draft", "active", "disabled"):
            raise ValidationFailed(
                "The request is not valid.",
                issues=[Issue("query:state", "invalid", "state is draft, active or disabled")],
            )
        query = query.where(Workflow.state == state)
    if q:
        escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(Workflow.name.ilike("%" + escaped + "%"))  # type: ignore[attr-defined]
    return await keyset_page(session, query, Workflow.id, cursor=cursor, limit=limit)


async def revisions_waiting_for_review(
    session: AsyncSession, realm_id: str, workflow_ids: Sequence[str], reviewer_id: str
) -> dict[str, list[int]]:
    """Per workflow, the draft revisions newer than the published one that need an approval the
    reviewer may give (a revision's author never reviews it)."""
    if not workflow_ids:
        return {}
    rows = await session.execute(
        select(WorkflowRevision.workflow_id, WorkflowRevision.number)
        .join(Workflow, Workflow.id == WorkflowRevision.workflow_id)  # type: ignore[arg-type]
        .where(
            WorkflowRevision.realm_id == realm_id,
            WorkflowRevision.workflow_id.in_(list(workflow_ids)),  # type: ignore[attr-defined]
            WorkflowRevision.status == "draft",
            Workflow.requires_approval.is_(True),  # type: ignore[attr-defined]
            WorkflowRevision.number > func.coalesce(Workflow.published_revision, 0),
            or_(WorkflowRevision.author_id.is_(None), WorkflowRevision.author_id != reviewer_id),  # type: ignore[union-attr]
        )
        .order_by(WorkflowRevision.number)
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
    _not_plugin(workflow, "delete")
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
    _not_plugin(workflow, "enable" if enabled else "disable")
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


# --- Revisions ------------------------------------------------------------------------------------


async def _stage(session: AsyncSession, actor: Actor, workflow: Workflow, definition: Any) -> WorkflowRevision:
    number = (
        await session.scalar(
            select(func.coalesce(func.max(WorkflowRevision.number), 0)).where(
                WorkflowRevision.workflow_id == workflow.id
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
    _not_plugin(workflow, "change")
    raise_if(prefixed(await validate_for_realm(session, actor.realm_id, definition), "/definition"))
    latest = await session.scalar(
        select(WorkflowRevision)
        .where(WorkflowRevision.workflow_id == workflow.id, WorkflowRevision.realm_id == workflow.realm_id)
        .order_by(WorkflowRevision.number.desc())  # type: ignore[attr-defined]
        .limit(1)
    )
    if latest is not None and latest.hash == definition_hash(definition):
        return Staged(latest, unchanged=True)
    return Staged(await _stage(session, actor, workflow, definition))


REVISION_MAX = 2**31 - 1  # revision numbers are PostgreSQL integers


async def get_revision(
    session: AsyncSession, realm_id: str, workflow_id: str, number: int, *, lock: bool = False
) -> WorkflowRevision:
    if not 1 <= number <= REVISION_MAX:
        raise NotFound("No such revision.")
    query = select(WorkflowRevision).where(
        WorkflowRevision.workflow_id == workflow_id,
        WorkflowRevision.realm_id == realm_id,
        WorkflowRevision.number == number,
    )
    if lock:
        query = query.with_for_update()
    revision = (await session.execute(query)).scalar_one_or_none()
    if revision is None:
        raise NotFound("No such revision.")
    return revision


async def list_revisions(session: AsyncSession, realm_id: str, workflow_id: str) -> list[WorkflowRevision]:
    await get_workflow(session, realm_id, workflow_id)
    rows = await session.execute(
        select(WorkflowRevision)
        .where(WorkflowRevision.workflow_id == workflow_id, WorkflowRevision.realm_id == realm_id)
        .order_by(WorkflowRevision.number.desc())  # type: ignore[attr-defined]
    )
    return list(rows.scalars())


async def decide_revision(
    session: AsyncSession, actor: Actor, workflow_id: str, number: int, *, approve: bool, comment: str | None
) -> WorkflowRevision:
    """Approve or reject a draft revision; never by its author (separation of duties), only by an
    independent second person (engine/directory/independence.py)."""
    raise_if(comment_issues("/comment", comment))
    workflow = await get_workflow(session, actor.realm_id, workflow_id, lock=True)
    _not_plugin(workflow, "approve" if approve else "reject")
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
            .where(WorkflowRevision.workflow_id == workflow.id, WorkflowRevision.status == "published")
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
    _not_plugin(workflow, "publish")
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
    _not_plugin(workflow, "roll back")
    revision = await get_revision(session, actor.realm_id, workflow_id, number, lock=True)
    if revision.status == "published":
        raise Conflict("This revision is the published one already.")
    if revision.status != "superseded":
        raise Conflict("Only a revision that was published before can be rolled back to; publish drafts instead.")
    return await _publish(session, actor, workflow, revision, rollback=True)


async def diff_revisions(
    session: AsyncSession, realm_id: str, workflow_id: str, number: int, against: int
) -> dict[str, Any]:
    new = await get_revision(session, realm_id, workflow_id, number)
    old = await get_revision(session, realm_id, workflow_id, against)
    return {
        "revision": number,
        "against": against,
        "structured": structured_diff(old.definition, new.definition),
        "lines": line_diff(old.definition, new.definition),
    }
