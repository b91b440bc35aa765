"""References a definition makes (validation's layer 4): roles (and their boundary), groups,
approvers, organizations and webhook subscriptions, checked in bulk against what the realm holds,
only in parts whose shape is sound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.platform.errors import Issue


class ReferenceChecker(Protocol):
    """What the realm holds, asked in bulk (one call per kind, each with every id the definition names).

    Synchronous on purpose: the caller loads the answers beforehand (``collect_references`` says
    which ids) and validation stays a pure function.
    """

    def roles(self, ids: AbstractSet[str]) -> Mapping[str, str]:
        """The roles that exist, each with its boundary: ``realm`` or ``organization``."""
        ...

    def groups(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        """The groups that exist."""
        ...

    def eligible_approvers(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        """The users who are active and not guests."""
        ...

    def organizations(self, ids: AbstractSet[str]) -> Mapping[str, str]:
        """The organizations that exist, each with its state: ``active`` or ``inactive``."""
        ...

    def webhooks(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        """The webhook subscriptions that exist (in any state)."""
        ...


@dataclass(frozen=True)
class References:
    """Every id a definition names, by kind: what to load before checking references."""

    roles: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    approvers: frozenset[str] = frozenset()
    organizations: frozenset[str] = frozenset()
    webhooks: frozenset[str] = frozenset()


@dataclass(frozen=True)
class StaticReferences:
    """A ReferenceChecker over answers loaded beforehand (or written by hand in tests)."""

    known_roles: Mapping[str, str] = field(default_factory=dict)
    known_groups: AbstractSet[str] = frozenset()
    known_approvers: AbstractSet[str] = frozenset()
    known_organizations: Mapping[str, str] = field(default_factory=dict)
    known_webhooks: AbstractSet[str] = frozenset()

    def roles(self, ids: AbstractSet[str]) -> Mapping[str, str]:
        return {i: self.known_roles[i] for i in ids if i in self.known_roles}

    def groups(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        return {i for i in ids if i in self.known_groups}

    def eligible_approvers(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        return {i for i in ids if i in self.known_approvers}

    def organizations(self, ids: AbstractSet[str]) -> Mapping[str, str]:
        return {i: self.known_organizations[i] for i in ids if i in self.known_organizations}

    def webhooks(self, ids: AbstractSet[str]) -> AbstractSet[str]:
        return {i for i in ids if i in self.known_webhooks}


@dataclass(frozen=True)
class _Site:
    """One reference in the definition: its kind, the id, where it is, and what the step needs."""

    kind: str  # role, group, approver, organization, webhook
    id: str
    path: str
    role_use: str = ""  # assign_realm, assign_organization, remove_realm_only, remove, select


def _reference_sites(raw: Any, sound: Callable[[str], bool]) -> list[_Site]:
    """Every reference in the sound parts of the definition (defensive: any value may be anything)."""
    sites: list[_Site] = []
    if not isinstance(raw, dict):
        return sites

    def text(obj: dict[str, Any], key: str) -> str | None:
        value = obj.get(key)
        return value if isinstance(value, str) else None

    triggers = raw.get("triggers")
    for i, trigger in enumerate(triggers if isinstance(triggers, list) else []):
        path = f"/triggers/{i}"
        if not isinstance(trigger, dict) or not sound(path):
            continue
        if (org := text(trigger, "organization_id")) is not None:
            sites.append(_Site("organization", org, f"{path}/organization_id"))
        select = trigger.get("select")
        if isinstance(select, dict):
            if select.get("type") == "role_holders" and (role := text(select, "role_id")) is not None:
                sites.append(_Site("role", role, f"{path}/select/role_id", "select"))
            if (org := text(select, "organization_id")) is not None:
                sites.append(_Site("organization", org, f"{path}/select/organization_id"))
            if (group := text(select, "group_id")) is not None:
                sites.append(_Site("group", group, f"{path}/select/group_id"))

    steps = raw.get("steps")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        path = f"/steps/{i}"
        if not isinstance(step, dict) or not sound(path):
            continue
        kind = step.get("type")
        pinned = text(step, "organization_id")
        if pinned is not None:
            sites.append(_Site("organization", pinned, f"{path}/organization_id"))
        if kind in ("assign_role", "remove_role") and (role := text(step, "role_id")) is not None:
            if kind == "assign_role":
                use = "assign_realm" if step.get("scope") == "realm" else "assign_organization"
            else:
                use = "remove_realm_only" if pinned is not None else "remove"
            sites.append(_Site("role", role, f"{path}/role_id", use))
        if kind in ("add_to_group", "remove_from_group") and (group := text(step, "group_id")) is not None:
            sites.append(_Site("group", group, f"{path}/group_id"))
        if kind == "call_webhook" and (hook := text(step, "subscription_id")) is not None:
            sites.append(_Site("webhook", hook, f"{path}/subscription_id"))
        approvers = step.get("approvers") if kind == "approval" else None
        for j, user in enumerate(approvers if isinstance(approvers, list) else []):
            if isinstance(user, str):
                sites.append(_Site("approver", user, f"{path}/approvers/{j}"))
    return sites


def collect_references(definition: Any) -> References:
    """Every id the definition names, by kind, for loading the answers of a ReferenceChecker.

    Works on any value (it never raises); ids in malformed parts are collected too.
    """
    try:
        sites = _reference_sites(definition, lambda _path: True)
    except Exception:
        return References()
    by_kind: dict[str, set[str]] = {"role": set(), "group": set(), "approver": set(), "organization": set()}
    by_kind["webhook"] = set()
    for site in sites:
        by_kind[site.kind].add(site.id)
    return References(
        roles=frozenset(by_kind["role"]),
        groups=frozenset(by_kind["group"]),
        approvers=frozenset(by_kind["approver"]),
        organizations=frozenset(by_kind["organization"]),
        webhooks=frozenset(by_kind["webhook"]),
    )


def _reference_issues(sites: list[_Site], checker: ReferenceChecker) -> list[Issue]:
    def ids(kind: str) -> frozenset[str]:
        return frozenset(site.id for site in sites if site.kind == kind)

    issues: list[Issue] = []
    wanted = ids("role")
    roles = dict(checker.roles(wanted)) if wanted else {}
    wanted = ids("group")
    groups = set(checker.groups(wanted)) if wanted else set()
    wanted = ids("approver")
    approvers = set(checker.eligible_approvers(wanted)) if wanted else set()
    wanted = ids("organization")
    organizations = dict(checker.organizations(wanted)) if wanted else {}
    wanted = ids("webhook")
    webhooks = set(checker.webhooks(wanted)) if wanted else set()

    for site in sites:
        if site.kind == "role":
            boundary = roles.get(site.id)
            if boundary is None:
                issues.append(Issue(site.path, "not_found", f"There is no role {site.id} in this realm."))
            elif site.role_use == "assign_realm" and boundary != "realm":
                issues.append(
                    Issue(
                        site.path,
                        "boundary_mismatch",
                        f"Role {site.id} is bound to organizations; assign it with scope organization.",
                    )
                )
            elif site.role_use == "assign_organization" and boundary != "organization":
                issues.append(
                    Issue(
                        site.path,
                        "boundary_mismatch",
                        f"Role {site.id} is a realm role; assign it with scope realm.",
                    )
                )
            elif site.role_use == "remove_realm_only" and boundary != "organization":
                issues.append(
                    Issue(
                        site.path,
                        "boundary_mismatch",
                        f"Role {site.id} is a realm role: it is not held in an organization, so the step "
                        "takes no organization_id.",
                    )
                )
        elif site.kind == "group" and site.id not in groups:
            issues.append(Issue(site.path, "not_found", f"There is no group {site.id} in this realm."))
        elif site.kind == "approver" and site.id not in approvers:
            issues.append(
                Issue(
                    site.path,
                    "not_eligible",
                    f"{site.id} cannot approve: approvers are active users of this realm who are not guests.",
                )
            )
        elif site.kind == "organization":
            state = organizations.get(site.id)
            if state is None:
                issues.append(Issue(site.path, "not_found", f"There is no organization {site.id} in this realm."))
            elif state != "active":
                issues.append(Issue(site.path, "inactive", f"Organization {site.id} is inactive."))
        elif site.kind == "webhook" and site.id not in webhooks:
            issues.append(Issue(site.path, "not_found", f"There is no webhook subscription {site.id} in this realm."))
    return issues
