"""The delegation ceiling: each step of a published definition must pass the check that
performing it directly would (seed 000 "Authority and accountability").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.authz import Authority
from engine.directory.models import Group, Role
from engine.platform.errors import Forbidden, GrantCeilingExceeded, Issue, missing_permissions
from engine.workflows.definitions.authority import Requirement, required_authority, requirement_problem


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
