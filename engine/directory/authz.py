"""Permissions, authority and the grant ceiling.

A principal holds a permission in an organization when a role assignment at realm scope, or
in that organization, grants it — directly, or through a group the user belongs to (and that
group's ancestors). Realm-wide operations need realm-scope authority. Expired assignments
count for nothing. The engine re-checks all of this at run time; the web layer uses the same
functions for every route.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Forbidden, GrantCeilingExceeded, invalid, missing_permissions

NORMAL, HIGH, PRIVILEGED = "normal", "high", "privileged"
LEVELS = (NORMAL, HIGH, PRIVILEGED)

# name -> (level, description)
PERMISSIONS: dict[str, tuple[str, str]] = {
    "realm.workflows.read": (NORMAL, "Read workflows, revisions, runs and diagnostics"),
    "realm.workflows.write": (HIGH, "Create workflows and stage revisions"),
    "realm.workflows.publish": (PRIVILEGED, "Approve, publish and roll back workflow revisions"),
    "realm.workflows.run": (HIGH, "Start and cancel workflow runs"),
    "realm.users.read": (NORMAL, "Read users and service principals"),
    "realm.users.write": (HIGH, "Create and change users and service principals"),
    "realm.users.suspend": (HIGH, "Suspend and reactivate users"),
    "realm.organizations.read": (NORMAL, "Read organizations, members and groups"),
    "realm.organizations.write": (HIGH, "Create and change organizations"),
    "realm.roles.read": (NORMAL, "Read roles and role assignments"),
    "realm.roles.write": (PRIVILEGED, "Create roles and assign or revoke them"),
    "realm.webhooks.read": (NORMAL, "Read webhook subscriptions"),
    "realm.webhooks.write": (PRIVILEGED, "Create, change and rotate webhook subscriptions"),
    "realm.templates.write": (HIGH, "Change the wording of server templates"),
    "realm.policy.write": (PRIVILEGED, "Change the realm policy"),
    "realm.audit.read": (NORMAL, "Read the audit log"),
    "realm.tokens.write": (PRIVILEGED, "Mint API tokens for service principals"),
    "org.members.write": (HIGH, "Add and remove organization members"),
    "org.groups.write": (HIGH, "Create groups and change their members"),
}


@dataclass(frozen=True)
class BuiltinRole:
    """A role every realm is created with."""

    permissions: tuple[str, ...]
    description: str
    boundary: str


BUILTIN_ROLES: dict[str, BuiltinRole] = {
    "realm-admin": BuiltinRole(
        permissions=("realm.*", "org.*"),
        description="Everything in the realm",
        boundary="realm",
    ),
    "realm-auditor": BuiltinRole(
        permissions=("realm.workflows.read", "realm.audit.read"),
        description="Read workflows and the audit log",
        boundary="realm",
    ),
}


def is_valid_pattern(pattern: str) -> bool:
    """A catalog permission, or a wildcard covering at least one (``realm.*``, ``org.*``, ``*``)."""
    if pattern in PERMISSIONS:
        return True
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        prefix = pattern[:-1]
        return any(name.startswith(prefix) for name in PERMISSIONS)
    return False


def covers(held: str, wanted: str) -> bool:
    """Does the held pattern include everything the wanted pattern names?"""
    if held == "*" or held == wanted:
        return True
    if held.endswith(".*"):
        prefix = held[:-1]
        return wanted.startswith(prefix)
    return False


@dataclass(frozen=True)
class Grant:
    """Permissions held at realm scope (organization_id None) or in one organization."""

    permissions: frozenset[str]
    organization_id: str | None


@dataclass
class Authority:
    principal_type: str
    principal_id: str
    grants: list[Grant] = field(default_factory=list)

    def _scopes(self, organization_id: str | None) -> Iterable[Grant]:
        for grant in self.grants:
            if grant.organization_id is None or (
                organization_id is not None and grant.organization_id == organization_id
            ):
                yield grant

    def holds(self, permission: str, organization_id: str | None = None) -> bool:
        return any(covers(p, permission) for g in self._scopes(organization_id) for p in g.permissions)

    def can_assign(self, role_permissions: Iterable[str], organization_id: str | None) -> bool:
        """The grant ceiling: every permission of the role, held in that scope."""
        return not authority_gaps(self, role_authority(role_permissions, organization_id))


# --- The one rule: may this actor act on that target? ---------------------------------------------


def expand(pattern: str) -> list[str]:
    """The catalog permissions a pattern stands for (a wildcard is exactly what it covers)."""
    return [name for name in PERMISSIONS if covers(pattern, name)] or [pattern]


def role_authority(permissions: Iterable[str], organization_id: str | None) -> Authority:
    """What holding a role in one scope amounts to, as a target for :func:`authority_gaps`."""
    return Authority("role", "", [Grant(frozenset(permissions), organization_id)])


def authority_gaps(actor: Authority, target: Authority) -> list[str]:
    """Every permission the target holds that the actor does not hold in the same scope.

    The target's grants are taken scope by scope (the realm, and each organization); wildcards
    are expanded to the catalog permissions they cover, so ``org.*`` in an organization is
    matched by ``org.*``, ``*`` or every ``org.…`` permission, held at realm scope or in that
    organization. Empty: the actor holds everything the target holds, everywhere it holds it.
    """
    missing: set[str] = set()
    for grant in target.grants:
        scope = grant.organization_id
        for pattern in grant.permissions:
            wanted = expand(pattern)
            lacking = [p for p in wanted if not actor.holds(p, scope)]
            # A wildcard the actor lacks entirely is named as such; otherwise what exactly is lacking.
            named = [pattern] if lacking and len(lacking) == len(wanted) else lacking
            missing.update(p if scope is None else f"{p} in {scope}" for p in named)
    return sorted(missing)


def may_act_on(actor: Authority, target: Authority) -> bool:
    """May ``actor`` change ``target`` (a principal, or a role in a scope)? Only when it holds all of it."""
    return not authority_gaps(actor, target)


class TargetOutranksActor(Forbidden):
    code = "target_outranks_actor"


async def require_authority_over(
    session: AsyncSession,
    realm_id: str,
    actor: Authority | None,
    target_type: str,
    target_id: str,
    *,
    what: str,
) -> None:
    """The rule for every change made to a principal or to what a principal holds.

    Password, profile and status changes, second-factor resets, tokens minted or revoked for
    someone, role assignments granted or revoked, organization and group membership: the actor
    must hold every permission the target holds, in every scope the target holds it. Acting on
    oneself always passes; ``actor`` None is the operator (CLI), who is above the realm.
    Raises 403 ``target_outranks_actor`` naming what is missing.
    """
    if actor is None or (actor.principal_id == target_id and actor.principal_type == target_type):
        return
    target = await load_authority(session, realm_id, target_type, target_id)
    check_authority_over(actor, target, target_type, target_id, what=what)


def check_authority_over(
    actor: Authority | None, target: Authority, target_type: str, target_id: str, *, what: str
) -> None:
    """:func:`require_authority_over` on an authority already read (the pure rule both it and a run's
    step decisions apply)."""
    if actor is None or (actor.principal_id == target_id and actor.principal_type == target_type):
        return
    missing = authority_gaps(actor, target)
    if missing:
        label = "user" if target_type == "user" else "service principal"
        raise TargetOutranksActor(
            f"This {label} holds permissions you do not hold ({', '.join(missing)}); you cannot {what}.",
            members=missing_permissions(missing),
        )


def require_grant_ceiling(
    actor: Authority, role_name: str, permissions: Iterable[str], organization_id: str | None, verb: str
) -> None:
    """The grant ceiling (granting and revoking alike): the same rule, with the role in its scope as target."""
    missing = authority_gaps(actor, role_authority(permissions, organization_id))
    if missing:
        raise GrantCeilingExceeded(
            f"To {verb} {role_name} you need every permission of the role in that scope; missing: "
            + ", ".join(missing),
            members=missing_permissions(missing),
        )


_AUTHORITY_SQL = text(
    """
    WITH RECURSIVE member_groups AS (
        SELECT gm.group_id AS id
          FROM group_members gm
         WHERE gm.user_id = :pid AND gm.realm_id = :realm
        UNION
        SELECT g.parent_id
          FROM groups g JOIN member_groups mg ON g.id = mg.id
         WHERE g.parent_id IS NOT NULL
    )
    SELECT r.permissions, ra.organization_id, ra.expires_at
      FROM role_assignments ra JOIN roles r ON r.id = ra.role_id
     WHERE ra.realm_id = :realm
       AND (ra.user_id = :pid OR ra.service_principal_id = :pid)
       AND (ra.expires_at IS NULL OR ra.expires_at > :now)
    UNION ALL
    SELECT r.permissions, CASE WHEN r.boundary = 'organization' THEN g.organization_id ELSE NULL END, NULL
      FROM member_groups mg
      JOIN groups g ON g.id = mg.id
      JOIN group_roles gr ON gr.group_id = g.id
      JOIN roles r ON r.id = gr.role_id
     WHERE g.realm_id = :realm
    """
)


async def load_authority(
    session: AsyncSession, realm_id: str, principal_type: str, principal_id: str, *, now: datetime | None = None
) -> Authority:
    """Everything the principal holds now, direct and inherited through groups."""
    rows = await session.execute(
        _AUTHORITY_SQL, {"realm": realm_id, "pid": principal_id, "now": now or SYSTEM_CLOCK.now()}
    )
    grants = [Grant(frozenset(perms or ()), org) for perms, org, _expires_at in rows]
    return Authority(principal_type=principal_type, principal_id=principal_id, grants=grants)


# The same query for callers on a raw asyncpg connection (the engine's fast path), with each
# grant's expiry: an authority read now stays true until its earliest expiry at the latest.
AUTHORITY_SQL = _AUTHORITY_SQL.text


def require(authority: Authority, permission: str, organization_id: str | None = None) -> None:
    if not authority.holds(permission, organization_id):
        raise Forbidden(f"This needs the permission {permission}.")


# --- Every engine function that changes a principal checks the permission itself ------------------

_P = ParamSpec("_P")
_T = TypeVar("_T")


@dataclass(frozen=True)
class PermissionCheck:
    """What :func:`needs_permission` checks for one engine function (see :data:`PERMISSION_CHECKED`)."""

    permission: str
    organization_param: str | None
    exempt: str | None  # why the check may be skipped, when ``unless`` holds (said in the docs)


# "module.function" -> its check: every engine function that changes a principal or what a
# principal holds (tests/integration/test_engine_authority.py calls each one with an actor who
# lacks the permission, and fails for a function that changes a principal without an entry).
PERMISSION_CHECKED: dict[str, PermissionCheck] = {}


def needs_permission(
    permission: str,
    *,
    organization: str | None = None,
    unless: Callable[[Mapping[str, Any]], bool] | None = None,
    exempt: str | None = None,
) -> Callable[[Callable[_P, Awaitable[_T]]], Callable[_P, Awaitable[_T]]]:
    """The engine function checks ``permission`` with its ``authority`` argument before anything else.

    The page and API guards check the same permission first; this is the check that holds when
    a caller forgets (every caller names ``authority``; ``None`` is the operator's CLI, above
    the realm). ``organization`` names the argument holding the organization the permission is
    checked in (else realm-wide); ``unless`` (given the arguments by name) skips the check
    where another rule stands in for it, which ``exempt`` says in words.
    """

    def wrap(function: Callable[_P, Awaitable[_T]]) -> Callable[_P, Awaitable[_T]]:
        signature = inspect.signature(function)
        parameter = signature.parameters.get("authority")
        if parameter is None or parameter.default is not inspect.Parameter.empty:
            raise TypeError(f"{function.__qualname__} must take a required 'authority' argument")

        @functools.wraps(function)
        async def checked(*args: _P.args, **kwargs: _P.kwargs) -> _T:
            arguments = signature.bind(*args, **kwargs)
            arguments.apply_defaults()
            named = arguments.arguments
            authority = named["authority"]
            if authority is not None and not (unless is not None and unless(named)):
                require(authority, permission, named[organization] if organization else None)
            return await function(*args, **kwargs)

        PERMISSION_CHECKED[f"{function.__module__}.{function.__qualname__}"] = PermissionCheck(
            permission, organization, exempt
        )
        return checked

    return wrap


def check_assignment(
    granter: Authority,
    *,
    role_name: str,
    role_permissions: Iterable[str],
    requires_approval: bool,
    organization_id: str | None,
    subject_id: str,
    approver: Authority | None,
    approver_path: str = "/approver_id",
) -> None:
    """The rules every role assignment passes, whoever makes it (an admin or a run).

    - the grant ceiling: the granter holds every permission of the role in that scope;
    - a role that requires approval needs an independent approver: approver ≠ granter ≠ subject,
      and the approver could assign the role themselves (an approver named for any other role is
      held to the same rules).
    """
    permissions = list(role_permissions)
    require_grant_ceiling(granter, role_name, permissions, organization_id, "assign")
    if approver is None:
        if requires_approval:
            raise invalid(approver_path, f"The role {role_name} requires an independent approver.", "approver_required")
        return
    # An approver, when named, is independent whether or not the role requires one: the record must be true.
    if approver.principal_id in {granter.principal_id, subject_id} or granter.principal_id == subject_id:
        raise Forbidden("The approver must be someone other than the granter and the subject.")
    if not approver.can_assign(permissions, organization_id):
        raise Forbidden("The approver could not assign this role themselves.")
