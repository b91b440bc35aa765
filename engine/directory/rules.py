"""The refusal rules of the directory's changes, as pure functions of what is known.

A change to what someone holds is refused for the same reasons whoever asks for it: an
administrator through the API or a page, or a workflow run. The directory's services
(``role_assignments.create_assignment``, ``groups.add_group_member``, ``remove_member``,
``principals.set_user_status``…) load the facts and call these; a run's step decisions
(``engine/runs/decisions.py``) call the very same functions on the facts of their snapshot. Each
rule raises the :class:`~engine.platform.errors.EngineError` the service has always answered.

The audit details of those changes are built here too, so every writer of one (a service, the
single-run executor, the batched statement) records the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from engine.directory.authz import Authority, require_grant_ceiling
from engine.platform.errors import Conflict, Issue, NotFound

# A role as the grant ceiling reads it: (name, permissions, boundary).
RoleShape = tuple[str, Iterable[str], str]


def grant_scope(boundary: str, organization_id: str | None) -> str | None:
    """Where a grant takes effect: its organization when the role is organization-bound, else the realm."""
    return organization_id if boundary == "organization" else None


def assignment_scope_issues(role_name: str, boundary: str, organization_id: str | None) -> list[Issue]:
    """An organization-bound role needs an organization; a realm role takes none."""
    if boundary == "organization" and not organization_id:
        return [Issue("/organization_id", "required", f"{role_name} is bound to an organization: name one")]
    if boundary == "realm" and organization_id:
        return [Issue("/organization_id", "not_allowed", f"{role_name} is a realm role: it takes no organization")]
    return []


def expiry_issues(expires_at: datetime | None, now: datetime) -> list[Issue]:
    """A grant's end lies in the future."""
    if expires_at is not None and expires_at <= now:
        return [Issue("/expires_at", "not_in_future", "must be in the future")]
    return []


def refuse_duplicate_grant(already_holds: bool, subject_type: str, role_name: str) -> None:
    """Nobody holds the same role twice in one scope (an expired grant does not count)."""
    if already_holds:
        raise Conflict(f"The {subject_type.replace('_', ' ')} already holds {role_name} in that scope.")


def check_grant_ceiling(
    authority: Authority,
    role_name: str,
    permissions: Iterable[str],
    boundary: str,
    organization_id: str | None,
    verb: str,
) -> None:
    """The grant ceiling for one role granted (or revoked) in one scope."""
    require_grant_ceiling(authority, role_name, list(permissions), grant_scope(boundary, organization_id), verb)


def check_group_ceiling(
    authority: Authority, roles: Iterable[RoleShape], organization_id: str | None, verb: str
) -> None:
    """The grant ceiling for every role a group's membership gives (its ancestors' included)."""
    for name, permissions, boundary in roles:
        check_grant_ceiling(authority, name, permissions, boundary, organization_id, verb)


def check_group_join(is_member: bool, in_group: bool) -> None:
    """Only members of the organization join its groups, and nobody joins one twice."""
    if not is_member:
        raise Conflict("Only members of the organization can join its groups.", code="not_a_member")
    if in_group:
        raise Conflict("The user is already in this group.", code="already_a_member")


def check_group_leave(in_group: bool) -> None:
    if not in_group:
        raise NotFound("The user is not in this group.")


def check_membership_removal(is_member: bool) -> None:
    if not is_member:
        raise NotFound("The user is not a member of this organization.")


def check_status_change(current: str, status: str, *, actor_id: str | None, user_id: str) -> None:
    """A status changes to another one, and nobody suspends themselves."""
    if current == status:
        raise Conflict(f"The user is already {status}.")
    if status == "suspended" and actor_id == user_id:
        raise Conflict("You cannot suspend yourself.")


def eligible_approvers(named: Iterable[Any], subject_id: str, users: Mapping[str, tuple[bool, bool]]) -> list[str]:
    """The named users who may decide now, in the order named: ``users`` maps each known user of the
    realm to (active, guest); approvers are active users who are not guests, never the subject."""
    ids = [str(i) for i in named if isinstance(i, str) and i != subject_id]
    return [i for i in dict.fromkeys(ids) if i in users and users[i][0] and not users[i][1]]


# --- Audit details ----------------------------------------------------------------------------------


def assigned_details(
    *,
    assignment_id: str,
    role_id: str,
    role_name: str,
    organization_id: str | None,
    expires_at: datetime | None,
    approver_id: str | None,
) -> dict[str, Any]:
    """``role.assigned``."""
    return {
        "assignment_id": assignment_id,
        "role_id": role_id,
        "role": role_name,
        "organization_id": organization_id,
        "expires_at": expires_at.isoformat() if expires_at else None,
        "approver_id": approver_id,
    }


def revoked_details(*, assignment_id: str, role_id: str, role_name: str, organization_id: str | None) -> dict[str, Any]:
    """``role.revoked``."""
    return {"assignment_id": assignment_id, "role_id": role_id, "role": role_name, "organization_id": organization_id}


def group_member_details(group_id: str, organization_id: str) -> dict[str, Any]:
    """``group.member_added`` and ``group.member_removed``."""
    return {"group_id": group_id, "organization_id": organization_id}
