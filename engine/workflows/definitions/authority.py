"""The authority each step needs (seed 000 "Authority and accountability"): what performing a
step directly would require, and the problem when an authority lacks it. Pure: the facts are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.platform.errors import Issue

if TYPE_CHECKING:
    from engine.directory.authz import Authority


@dataclass(frozen=True)
class Requirement:
    """What performing a step directly needs; checked at publication and again at run time.

    - ``permission``: hold ``permission``.
    - ``role_ceiling``: hold every permission of the role ``role_id``.
    - ``group_ceiling``: hold every permission of every role the group ``group_id`` grants,
      including the roles of its ancestors.

    Where it must be held (``scope``): ``realm`` is realm-wide; ``organization`` is in
    ``organization_id`` when the step pins one, otherwise in the run's organization (for group
    steps, the group's organization); ``role`` follows the boundary of the role (remove_role:
    realm-wide for a realm role, in the organization for an organization role).
    """

    kind: str
    scope: str
    permission: str | None = None
    role_id: str | None = None
    group_id: str | None = None
    organization_id: str | None = None


def required_authority(step: Mapping[str, Any]) -> list[Requirement]:
    """The authority a step needs, as data. Approvals, waits, notices and end steps need none."""
    kind = step.get("type")
    pinned = step.get("organization_id") if isinstance(step.get("organization_id"), str) else None
    if kind == "assign_role":
        scope = "realm" if step.get("scope") == "realm" else "organization"
        return [
            Requirement(
                "role_ceiling",
                scope,
                role_id=step.get("role_id"),
                organization_id=pinned if scope == "organization" else None,
            )
        ]
    if kind == "remove_role":
        return [Requirement("role_ceiling", "role", role_id=step.get("role_id"), organization_id=pinned)]
    if kind in ("add_to_group", "remove_from_group"):
        group = step.get("group_id")
        return [
            Requirement("permission", "organization", permission="org.groups.write", group_id=group),
            Requirement("group_ceiling", "organization", group_id=group),
        ]
    if kind == "remove_membership":
        return [Requirement("permission", "organization", permission="org.members.write", organization_id=pinned)]
    if kind == "suspend_user":
        return [Requirement("permission", "realm", permission="realm.users.suspend")]
    if kind == "call_webhook":
        return [Requirement("permission", "realm", permission="realm.webhooks.write")]
    return []


# A role as a requirement reads it: (name, permissions, boundary); None when it does not exist.
RoleFacts = tuple[str, Sequence[str], str]


def requirement_problem(
    requirement: Requirement,
    authority: Authority,
    run_org: str | None,
    path: str,
    *,
    role: RoleFacts | None = None,
    group_exists: bool = True,
    group_org: str | None = None,
    group_roles: Sequence[RoleFacts] = (),
) -> Issue | None:
    """Does ``authority`` meet ``requirement``? The one rule of publication, of a manual start and of a
    run's step, judged on facts already read: the role the requirement names, the group (whether it
    exists in the realm, its organization and every role its membership gives)."""
    if requirement.group_id and not group_exists:
        # A group that vanished is not a question of authority: say so whatever the authority's scope.
        return Issue(path, "group_missing", "The step names a group that does not exist.")
    if requirement.kind == "permission" and requirement.permission:
        if requirement.scope == "realm":
            org = None
        elif requirement.group_id:
            org = group_org
        else:
            org = requirement.organization_id or run_org
        if not authority.holds(requirement.permission, org):
            return Issue(
                path,
                "forbidden",
                f"Publishing this step needs {requirement.permission}.",
                missing=(_gap(requirement.permission, org),),
            )
        return None
    if requirement.kind == "role_ceiling" and requirement.role_id:
        if role is None:
            return Issue(path, "not_found", "The step names a role that does not exist.")
        name, permissions, boundary = role
        if boundary == "realm" or requirement.scope == "realm":
            org = None
        else:
            org = requirement.organization_id or run_org
        missing = sorted(p for p in permissions if not authority.holds(p, org))
        if missing:
            return Issue(
                path,
                "grant_ceiling_exceeded",
                f"Publishing this step needs every permission of {name}: {', '.join(missing)}.",
                missing=tuple(_gap(p, org) for p in missing),
            )
        return None
    if requirement.kind == "group_ceiling" and requirement.group_id:
        for name, permissions, boundary in group_roles:
            scope = group_org if boundary == "organization" else None
            missing = sorted(p for p in permissions if not authority.holds(p, scope))
            if missing:
                return Issue(
                    path,
                    "grant_ceiling_exceeded",
                    f"Publishing this step needs every permission of {name}: {', '.join(missing)}.",
                    missing=tuple(_gap(p, scope) for p in missing),
                )
    return None


def _gap(permission: str, organization_id: str | None) -> str:
    """A permission lacked, as :func:`engine.platform.errors.missing_permissions` reads it."""
    return f"{permission} in {organization_id}" if organization_id else permission
