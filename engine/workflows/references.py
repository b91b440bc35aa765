"""The ids a definition names, checked in its realm, and the workflows that name an object.

A definition is validated against the realm's roles, groups, approvers, organizations and webhook
subscriptions in one statement. Deleting an object a published revision names is refused (409
``referenced_by_workflows``) unless forced.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Text, cast, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.platform.db import fetch_hot, positional
from engine.platform.errors import Conflict, Issue
from engine.workflows.definitions.references import References, StaticReferences, collect_references
from engine.workflows.definitions.validation import validate_definition
from engine.workflows.inputs import holds_nul, nul_issues
from engine.workflows.models import Workflow, WorkflowRevision

MAX_NAMED_REFERENCES = 500


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


async def workflows_referencing(session: AsyncSession, realm_id: str, object_id: str) -> list[Workflow]:
    """Workflows not deleted whose published revision names ``object_id`` (a role, group, subscription…).

    Ids are unique prefixed strings, so a quoted id anywhere in the definition is a reference.
    """
    needle = "%" + json.dumps(object_id).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = await session.execute(
        select(Workflow)
        .join(
            WorkflowRevision,
            (col(WorkflowRevision.workflow_id) == col(Workflow.id)) & (col(WorkflowRevision.status) == "published"),
        )
        .where(
            col(Workflow.realm_id) == realm_id,
            col(Workflow.state) != "deleted",
            cast(col(WorkflowRevision.definition), Text).like(needle),
        )
        .order_by(col(Workflow.name))
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
