"""Validation of workflow definitions: every issue at once, never an exception.

Layers, in order:

1. **Size and JSON**: the canonical JSON is at most 64 KiB; the value is plain JSON (objects with
   string keys, arrays, strings, integers, booleans, null), nested at most 32 levels deep.
   An issue here stops validation: nothing else is worth reading.
2. **Schema**: ``definition.v1.json`` (JSON Schema 2020-12). Each schema error becomes one
   issue with a JSON pointer and a stable code; an unknown member is reported at the member
   itself (``/steps/0/script``).
3. **Semantics**, for every trigger, step and retry policy whose shape is sound: duration
   bounds, unique step ids, one manual trigger, no identical triggers, nothing after an end
   step, no organization on a realm-scope assignment.
4. **References**, when a ``ReferenceChecker`` is given: roles (and their boundary), groups,
   approvers, organizations and webhook subscriptions exist in the realm.

Paths are JSON pointers into the definition; callers that embed the definition in a request
prefix them (``/definition`` + path).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import extend

from engine.platform.errors import Issue
from engine.workflows.definitions.canonical import canonical_json
from engine.workflows.definitions.contract import shared_contract
from engine.workflows.definitions.durations import BOUNDS

if TYPE_CHECKING:
    from engine.directory.authz import Authority

MAX_DEFINITION_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_ISSUES = 1000

STEP_TYPES = (
    "approval",
    "wait",
    "assign_role",
    "remove_role",
    "add_to_group",
    "remove_from_group",
    "remove_membership",
    "suspend_user",
    "notify",
    "call_webhook",
    "end",
)
NEVER_RETRIED = frozenset({"approval", "wait", "end"})
TRIGGER_TYPES = ("event", "schedule", "manual")
SELECTOR_TYPES = ("role_holders", "organization_members", "group_members")

ISSUE_CODES: dict[str, str] = {
    "too_large": "The canonical JSON of the definition is over 64 KiB.",
    "too_deep": "Values are nested more than 32 levels deep.",
    "not_json": "A value that JSON cannot carry (only objects with string keys, arrays, strings, numbers, "
    "booleans and null).",
    "wrong_type": "A value of the wrong type: a string where a list is expected, a fraction where a whole "
    "number is expected, and so on.",
    "required": "A member that must be present is missing.",
    "unknown_member": "A member that the object does not have, or that belongs to another step type.",
    "invalid_value": "A value outside its allowed set or format (an unknown step type, a malformed id or "
    "duration, an unknown notice or event type).",
    "out_of_range": "A number or duration below its minimum or above its maximum.",
    "too_few": "A list with fewer items than allowed.",
    "too_many": "A list with more items than allowed.",
    "duplicate": "A repeated step id, approver, event type, manual trigger or trigger.",
    "not_allowed": "A member that contradicts another (an organization on a realm-scope role assignment).",
    "unreachable": "A step after an end step: it would never run.",
    "organization_required": "A step that acts in an organization names none, and no trigger of the workflow "
    "can start a run with one: every run would fail.",
    "too_many_issues": "Only the first 1000 issues are listed.",
    "not_found": "A referenced role, group, organization or webhook subscription does not exist in the realm.",
    "boundary_mismatch": "A role whose boundary does not fit the step (an organization role assigned at realm "
    "scope, for example).",
    "not_eligible": "An approver who is not an active, non-guest user of the realm.",
    "inactive": "A referenced organization that is inactive.",
    "unreadable": "The definition could not be read at all.",
}

Parts = tuple[str | int, ...]


# ---------------------------------------------------------------------------- references


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


# ---------------------------------------------------------------------------- authority


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


# ---------------------------------------------------------------------------- layer 1: size and JSON


def _pointer(parts: Parts) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _safe_key(key: object) -> str:
    try:
        text = str(key)
    except Exception:
        return "?"
    return text if _encodable(text) else "?"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _canonical_size(raw: Any) -> int | None:
    """Bytes of the canonical JSON, or None when the value cannot be serialized."""
    try:
        return len(canonical_json(raw).encode("utf-8"))
    except Exception:
        return None


def _plainly_small(raw: Any) -> bool:
    """Whether the canonical JSON is surely within the limit, told from msgspec's encoding.

    msgspec writes the same compact JSON as the canonical form in a tenth of the time, key order
    aside (which does not change the size), except for a float's exponent: ``1e-7`` for ``1e-07``,
    ``1e16`` for ``1e+16`` — one byte less per float, and every float takes at least three bytes
    and a separator. So the canonical size is at most a third more than msgspec's; within that
    margin of the limit, the exact size is worked out the slow way.
    """
    try:
        size = len(msgspec.json.encode(raw))
    except Exception:
        return False
    return size + size // 3 < MAX_DEFINITION_BYTES


def _too_large(size: int | None) -> Issue:
    limit = f"at most {MAX_DEFINITION_BYTES:,} bytes (64 KiB) are allowed"
    if size is None:
        return Issue("", "too_large", f"The definition is larger than its canonical JSON may be: {limit}.")
    return Issue("", "too_large", f"The definition is {size:,} bytes as canonical JSON; {limit}.")


def _plainly_json(raw: Any) -> bool:
    """True when :func:`_json_issues` certainly finds nothing: the same walk without the paths (a
    few times cheaper), giving up at the first doubt — anything but the plain JSON types included."""
    stack: list[tuple[Any, int]] = [(raw, 0)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_DEFINITION_BYTES or depth > MAX_DEPTH:
            return False
        kind = type(value)
        if kind is str:
            if not value.isascii() and not _encodable(value):
                return False
        elif kind is dict:
            for key, item in value.items():
                if type(key) is not str or (not key.isascii() and not _encodable(key)):
                    return False
                stack.append((item, depth + 1))
        elif kind is list:
            stack.extend((item, depth + 1) for item in value)
        elif kind is int:
            if value.bit_length() > 63:
                return False
        elif kind is float:
            if not math.isfinite(value):
                return False
        elif value is not None and kind is not bool:
            return False
    return True


def _json_issues(raw: Any) -> list[Issue]:
    """Values JSON cannot carry and nesting too deep, found without recursion.

    Every node takes at least one byte of canonical JSON, so a value with more nodes than the
    byte limit is too large whatever it holds.
    """
    return [] if _plainly_json(raw) else _json_issues_by_path(raw)


def _json_issues_by_path(raw: Any) -> list[Issue]:
    issues: list[Issue] = []
    stack: list[tuple[Any, str, int]] = [(raw, "", 0)]
    nodes = 0
    while stack:
        value, path, depth = stack.pop()
        nodes += 1
        if nodes > MAX_DEFINITION_BYTES:
            return [_too_large(None)]
        if depth > MAX_DEPTH:
            issues.append(Issue(path, "too_deep", f"Values are nested more than {MAX_DEPTH} levels deep here."))
            continue
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            if value.bit_length() > 63:
                issues.append(Issue(path, "out_of_range", "This number is too large."))
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                issues.append(Issue(path, "not_json", "JSON has no NaN or infinite numbers."))
            continue
        if isinstance(value, str):
            if not _encodable(value):
                issues.append(Issue(path, "not_json", "This text is not valid Unicode (a lone surrogate)."))
            continue
        if isinstance(value, dict):
            children: list[tuple[Any, str, int]] = []
            for key, item in value.items():
                if not isinstance(key, str):
                    issues.append(Issue(path + "/" + _escape(_safe_key(key)), "not_json", "Member names are text."))
                    continue
                if not _encodable(key):
                    issues.append(Issue(path, "not_json", "A member name is not valid Unicode (a lone surrogate)."))
                    continue
                children.append((item, path + "/" + _escape(key), depth + 1))
            stack.extend(reversed(children))
            continue
        if isinstance(value, list):
            stack.extend(reversed([(item, f"{path}/{i}", depth + 1) for i, item in enumerate(value)]))
            continue
        issues.append(Issue(path, "not_json", f"A {type(value).__name__} is not a JSON value."))
    return issues[: MAX_ISSUES + 1]


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


# ---------------------------------------------------------------------------- layer 2: schema

_ANCHORED: dict[str, re.Pattern[str]] = {}


def _pattern(validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """``pattern`` with ECMA-262 anchors: ``$`` is the end of the text (Python's also passes a final line break)."""
    if not validator.is_type(instance, "string"):
        return
    compiled = _ANCHORED.get(pattern)
    if compiled is None:
        compiled = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)
        _ANCHORED[pattern] = compiled
    if not compiled.search(instance):
        yield ValidationError("does not match the pattern")


def _additional_properties(
    validator: Any, allowed: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """One error per unknown member, with the member's own path."""
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    for key in instance:
        if key in properties or any(re.search(p, key) for p in patterns):
            continue
        if allowed is False:
            yield ValidationError("unknown member", path=[key])
        elif isinstance(allowed, dict):
            yield from validator.descend(instance[key], allowed, path=key)


def _required(validator: Any, required: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """One error per missing member, with the member's own path."""
    if not validator.is_type(instance, "object"):
        return
    for name in required:
        if name not in instance:
            yield ValidationError("required", path=[name])


def _json_key(value: Any) -> str:
    # booleans and integers stay distinct: true and 1 are different JSON values
    return canonical_json(value)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """One error per repeated item, at the repetition; linear time."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[str, int] = {}
    for index, item in enumerate(instance):
        key = _json_key(item)  # the value is plain JSON by now (layer 1)
        if key in seen:
            yield ValidationError(f"repeats item {seen[key]}", path=[index])
        else:
            seen[key] = index


def _dispatch_key(branch: Any) -> str | None:
    """The ``type`` a branch of the form ``{"if": {type is X}, "then": ...}`` applies to, else None."""
    if not isinstance(branch, dict) or set(branch) != {"if", "then"}:
        return None
    condition = branch["if"]
    if (
        not isinstance(condition, dict)
        or condition.get("required") != ["type"]
        or set(condition)
        != {
            "properties",
            "required",
        }
    ):
        return None
    properties = condition["properties"]
    if not isinstance(properties, dict) or set(properties) != {"type"}:
        return None
    test = properties["type"]
    if isinstance(test, dict) and set(test) == {"const"} and isinstance(test["const"], str):
        return test["const"]
    return None


_DISPATCH: dict[int, list[str | None]] = {}


def _all_of(validator: Any, branches: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """``allOf``; when every branch is "if type is X then ...", only the branch of the instance's type runs.

    Same outcome as evaluating every ``if`` (the others cannot hold), an order of magnitude faster.
    """
    keys = _DISPATCH.get(id(branches))
    if keys is None:
        keys = [_dispatch_key(branch) for branch in branches]
        _DISPATCH[id(branches)] = keys  # the schema lives as long as the process
    if all(key is not None for key in keys):
        kind = instance.get("type") if isinstance(instance, dict) else None
        for index, (key, branch) in enumerate(zip(keys, branches, strict=True)):
            if isinstance(kind, str) and key == kind:
                yield from validator.descend(instance, branch["then"], schema_path=index)
        return
    for index, branch in enumerate(branches):
        yield from validator.descend(instance, branch, schema_path=index)


def _is_integer(checker: Any, instance: Any) -> bool:
    # 3.0 is not an integer here: definitions carry whole numbers only
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _validator() -> Any:
    cls = extend(
        Draft202012Validator,
        validators={
            "pattern": _pattern,
            "additionalProperties": _additional_properties,
            "required": _required,
            "uniqueItems": _unique_items,
            "allOf": _all_of,
        },
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
    )
    return cls(_inline_refs(shared_contract("definition.v1.json")))


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each local ``{"$ref": "#/$defs/name"}`` replaced by its target (the contract has no
    cycles): the same meaning, without a reference lookup at every step of validation."""
    definitions = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and set(node) == {"$ref"}:
                return resolve(definitions[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    inlined: dict[str, Any] = resolve({key: value for key, value in schema.items() if key != "$defs"})
    return inlined


_TYPE_WORDS = {
    "string": "text",
    "integer": "a whole number",
    "number": "a number",
    "array": "a list",
    "object": "an object",
    "boolean": "true or false",
    "null": "null",
}
_NOUNS = {"triggers": "trigger", "steps": "step", "approvers": "approver", "event_types": "event type"}


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _label(parts: Parts) -> str:
    if not parts:
        return "The definition"
    last = parts[-1]
    if isinstance(last, int):
        parent = parts[-2] if len(parts) > 1 else "item"
        return f"{_short(str(parent))}[{last}]"
    return _short(last)


def _what(parts: Parts, instance: Any) -> str:
    """The object a member belongs to, in words: "an assign_role step", "a retry policy"."""
    kind = instance.get("type") if isinstance(instance, dict) else None
    if not parts:
        return "a definition"
    if parts[-1] == "retry":
        return "a retry policy"
    if parts[-1] == "select":
        return f"{_article(kind)} {kind} selector" if kind in SELECTOR_TYPES else "a selector"
    if len(parts) == 2 and parts[0] == "triggers":
        return f"{_article(kind)} {kind} trigger" if kind in TRIGGER_TYPES else "a trigger"
    if len(parts) == 2 and parts[0] == "steps":
        return f"{_article(kind)} {kind} step" if kind in STEP_TYPES else "a step"
    return "this object"


@cache
def _step_members() -> dict[str, frozenset[str]]:
    defs = shared_contract("definition.v1.json")["$defs"]
    return {kind: frozenset(defs[f"step_{kind}"]["properties"]) for kind in STEP_TYPES}


def _unknown_member_message(member: str, parts: Parts, instance: Any) -> str:
    what = _what(parts, instance)
    name = _short(member)
    message = f"{name} is not a member of {what}."
    if len(parts) == 2 and parts[0] == "steps" and isinstance(instance, dict):
        kind = instance.get("type")
        if member == "retry" and kind in NEVER_RETRIED:
            return f"retry does not belong to {what}: approvals, waits and end steps are never retried."
        owners = [k for k, members in _step_members().items() if member in members and k != kind]
        if owners:
            return f"{name} does not belong to {what} (it is a member of {', '.join(owners)} steps)."
    if member in ("script", "expression", "condition", "code", "if", "when", "loop"):
        return message + " Definitions carry no code, expressions, conditions or loops."
    return message


def _map_error(error: ValidationError) -> Issue:
    parts: Parts = tuple(error.absolute_path)
    path = _pointer(parts)
    keyword = error.validator
    value = error.validator_value
    label = _label(parts)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if keyword == "additionalProperties":
        member = str(parts[-1])
        return Issue(path, "unknown_member", _unknown_member_message(member, parts[:-1], error.instance))
    if keyword == "required":
        return Issue(path, "required", f"{label} is required in {_what(parts[:-1], error.instance)}.")
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        words = " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kinds)
        return Issue(path, "wrong_type", f"{label} must be {words}.")
    if keyword == "enum":
        return Issue(path, "invalid_value", f"{label} must be one of: {', '.join(str(v) for v in value)}.")
    if keyword == "const":
        return Issue(path, "invalid_value", f"{label} must be {value}.")
    if keyword in ("pattern", "minLength", "maxLength", "format"):
        title = schema.get("title")
        if keyword in ("minLength", "maxLength") and not title:
            bound = "at least" if keyword == "minLength" else "at most"
            return Issue(path, "invalid_value", f"{label} must be {bound} {value} characters long.")
        return Issue(path, "invalid_value", f"{label} must be {title or 'in the expected format'}.")
    if keyword in ("minimum", "exclusiveMinimum"):
        return Issue(path, "out_of_range", f"{label} must be at least {value}.")
    if keyword in ("maximum", "exclusiveMaximum"):
        return Issue(path, "out_of_range", f"{label} must be at most {value}.")
    if keyword in ("minItems", "maxItems"):
        noun = _NOUNS.get(str(parts[-1]), "item") if parts else "item"
        plural = noun if value == 1 else noun + "s"
        if keyword == "minItems":
            return Issue(path, "too_few", f"{label} needs at least {value} {plural}.")
        return Issue(path, "too_many", f"{label} takes at most {value} {plural}.")
    if keyword == "uniqueItems":
        return Issue(path, "duplicate", f"{label} {error.message}: each item may appear once.")
    return Issue(path, "invalid_value", f"{label} is not valid here.")


@cache
def _compiled_check() -> Any | None:
    """The contract compiled by jsonschema-rs: a yes/no answer in microseconds.

    It only ever short-cuts the valid case. An instance it accepts is one the reporting validator
    above accepts too, because (a) the contract's patterns are ASCII classes with ``^…$``
    anchors, read alike by both engines, (b) its ``uniqueItems`` keeps ``true`` and ``1`` apart
    like ours, and (c) the one place the two differ — the standard counts ``3.0`` as an integer,
    we do not — is kept away by :func:`_has_float`. Everything it refuses, and every error
    message, comes from the reporting validator.
    """
    try:
        import jsonschema_rs

        return jsonschema_rs.Draft202012Validator(shared_contract("definition.v1.json"))
    except Exception:  # pragma: no cover - the reporting validator alone gives the same answers
        return None


def _has_float(raw: Any) -> bool:
    stack = [raw]
    while stack:
        value = stack.pop()
        if isinstance(value, float):
            return True
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _plainly_valid(raw: Any) -> bool:
    check = _compiled_check()
    if check is None or _has_float(raw):
        return False
    try:
        return bool(check.is_valid(raw))
    except Exception:  # a value it cannot take (a huge integer, a lone surrogate): ask the other one
        return False


def _schema_issues(raw: Any) -> list[Issue]:
    if _plainly_valid(raw):
        return []
    issues: list[Issue] = []
    for error in _validator().iter_errors(raw):
        issues.append(_map_error(error))
        if len(issues) > MAX_ISSUES:
            break
    return issues


# ---------------------------------------------------------------------------- layer 3: semantics

_STEP_ID = re.compile(r"[a-z][a-z0-9_-]{0,39}")


def _duration_issue(path: str, text: Any, where: str) -> Issue | None:
    if not isinstance(text, str):
        return None
    problem = BOUNDS[where].check(text)
    if problem is None:
        return None
    return Issue(path, "out_of_range", f"{path.rsplit('/', 1)[-1]} {problem}")


# The events that carry an organization (the membership's, the expired grant's).
ORGANIZATION_EVENTS = frozenset(
    {"organization.membership.added", "organization.membership.removed", "role.assignment.expired"}
)


def _supplies_organization(trigger: Mapping[str, Any]) -> bool:
    """Can a run this trigger starts have an organization? A manual start may name one, a schedule's
    selector gives each subject's, an event trigger pinned to one or listening to an event that
    carries one does; ``user.*`` events alone never do."""
    if trigger.get("type") != "event":
        return True
    if trigger.get("organization_id"):
        return True
    return any(event in ORGANIZATION_EVENTS for event in trigger.get("event_types") or [])


def _organization_issues(steps: list[Any], member: Callable[[dict[str, Any], str, str], Any]) -> list[Issue]:
    """Steps that act in an organization and name none, in a definition no trigger can give one to:
    every run would fail ``organization_required``."""
    issues: list[Issue] = []
    for i, step in enumerate(steps):
        path = f"/steps/{i}"
        if not isinstance(step, dict) or "organization_id" in step:
            continue
        kind = member(step, path, "type")
        scoped = kind == "remove_membership" or (
            kind == "assign_role" and member(step, path, "scope") == "organization"
        )
        if scoped:
            issues.append(
                Issue(
                    path,
                    "organization_required",
                    f"This {kind} step acts in an organization, and no trigger of this workflow starts a run "
                    "with one: every run would fail. Pin organization_id on the step, or add a trigger that "
                    "carries an organization (a manual trigger, a schedule, or an event trigger for "
                    "organization.membership.added, organization.membership.removed or role.assignment.expired, "
                    "or with organization_id).",
                )
            )
    return issues


def _semantic_issues(raw: dict[str, Any], sound: Callable[[str], bool]) -> list[Issue]:
    """Rules the schema cannot say, applied to every member whose own shape (and its object's type) is sound."""
    issues: list[Issue] = []

    def duration(path: str, text: Any, where: str) -> None:
        if sound(path):
            issue = _duration_issue(path, text, where)
            if issue is not None:
                issues.append(issue)

    def member(obj: dict[str, Any], path: str, name: str) -> Any:
        return obj.get(name) if sound(f"{path}/{name}") else None

    if isinstance(raw.get("retry"), dict):
        duration("/retry/backoff", raw["retry"].get("backoff"), "retry.backoff")

    triggers = raw.get("triggers")
    manual_at: int | None = None
    seen_triggers: dict[str, int] = {}
    for i, trigger in enumerate(triggers if isinstance(triggers, list) else []):
        path = f"/triggers/{i}"
        if not isinstance(trigger, dict):
            continue
        kind = member(trigger, path, "type")
        if kind == "manual" and sound(path):
            if manual_at is not None:
                issues.append(
                    Issue(path, "duplicate", f"Only one manual trigger is allowed; triggers[{manual_at}] is one.")
                )
            else:
                manual_at = i
            continue
        if sound(path):
            key = canonical_json(trigger)
            if key in seen_triggers:
                issues.append(Issue(path, "duplicate", f"This trigger repeats triggers[{seen_triggers[key]}]."))
                continue
            seen_triggers[key] = i
        if kind == "schedule":
            duration(f"{path}/every", trigger.get("every"), "schedule.every")
            select = trigger.get("select")
            if isinstance(select, dict) and member(select, f"{path}/select", "type") == "role_holders":
                duration(f"{path}/select/granted_before", select.get("granted_before"), "role_holders.granted_before")

    steps = raw.get("steps")
    step_list = steps if isinstance(steps, list) else []
    ids: dict[str, int] = {}
    first_end: int | None = None
    for i, step in enumerate(step_list):
        path = f"/steps/{i}"
        if not isinstance(step, dict):
            continue
        step_id = member(step, path, "id")
        if isinstance(step_id, str) and _STEP_ID.fullmatch(step_id):
            if step_id in ids:
                issues.append(
                    Issue(f"{path}/id", "duplicate", f"Step id {step_id} is already used by steps[{ids[step_id]}].")
                )
            else:
                ids[step_id] = i
        kind = member(step, path, "type")
        if kind == "approval":
            duration(f"{path}/expires_in", step.get("expires_in"), "approval.expires_in")
        elif kind == "wait":
            duration(f"{path}/duration", step.get("duration"), "wait.duration")
        elif kind == "assign_role":
            duration(f"{path}/expires_in", step.get("expires_in"), "assign_role.expires_in")
            if member(step, path, "scope") == "realm" and "organization_id" in step:
                issues.append(
                    Issue(
                        f"{path}/organization_id",
                        "not_allowed",
                        "A realm-scope role assignment takes no organization_id; use scope organization "
                        "to assign the role in an organization.",
                    )
                )
        elif kind == "end" and first_end is None:
            first_end = i
        if kind in STEP_TYPES and kind not in NEVER_RETRIED and isinstance(step.get("retry"), dict):
            duration(f"{path}/retry/backoff", step["retry"].get("backoff"), "retry.backoff")
    if isinstance(triggers, list) and triggers and all(sound(f"/triggers/{i}") for i in range(len(triggers))):
        if not any(_supplies_organization(t) for t in triggers):
            issues.extend(_organization_issues(step_list, member))
    if first_end is not None and first_end + 1 < len(step_list):
        issues.append(
            Issue(
                f"/steps/{first_end + 1}",
                "unreachable",
                f"This step would never run: steps[{first_end}] ends the run. Remove the steps after the end step.",
            )
        )
    return issues


# ---------------------------------------------------------------------------- entry point


def _order(issue: Issue) -> tuple[tuple[int, int, str], ...]:
    key: list[tuple[int, int, str]] = []
    for segment in issue.path.split("/")[1:]:
        key.append(
            (0, int(segment), "") if segment.isascii() and segment.isdigit() and len(segment) < 10 else (1, 0, segment)
        )
    return tuple(key)


def _finish(issues: list[Issue]) -> list[Issue]:
    unique: dict[tuple[str, str], Issue] = {}
    mistyped = {issue.path for issue in issues if issue.code == "wrong_type"}
    for issue in issues:
        if issue.path in mistyped and issue.code != "wrong_type":
            continue  # "must be a whole number" says it all; "must be at least 100" would only add noise
        unique.setdefault((issue.path, issue.code), issue)
    ordered = sorted(unique.values(), key=_order)
    if len(ordered) > MAX_ISSUES:
        ordered = [
            *ordered[:MAX_ISSUES],
            Issue("", "too_many_issues", f"Only the first {MAX_ISSUES} issues are listed; fix these first."),
        ]
    return ordered


def _shape_and_semantics(raw: Any) -> tuple[list[Issue], Callable[[str], bool] | None]:
    """Layers 1 to 3: the issues, and which parts are sound (None when nothing is worth reading)."""
    size = 0 if _plainly_small(raw) else _canonical_size(raw)
    if size is not None and size > MAX_DEFINITION_BYTES:
        return [_too_large(size)], None
    problems = _json_issues(raw)
    if problems:
        return problems, None
    if size is None:  # pragma: no cover - the walk above names every value JSON cannot carry
        return [Issue("", "not_json", "The definition is not a JSON value.")], None
    issues = _schema_issues(raw)
    bad = [issue.path for issue in issues]

    def sound(path: str) -> bool:
        prefix = path + "/"
        return not any(p == path or p.startswith(prefix) for p in bad)

    if isinstance(raw, dict):
        issues.extend(_semantic_issues(raw, sound))
    return issues, sound


def validate_definition(raw: Any, *, references: ReferenceChecker | None = None) -> list[Issue]:
    """Every issue with the definition at once, in document order; an empty list when it is valid.

    Never raises for any input. With ``references``, the ids the definition names are checked
    against the realm (only in parts whose shape is sound).
    """
    try:
        issues, sound = _shape_and_semantics(raw)
        sites = _reference_sites(raw, sound) if references is not None and sound is not None else []
    except Exception:  # an input boundary answers, whatever the value
        return [Issue("", "unreadable", "The definition could not be read.")]
    if references is not None and sites:
        issues.extend(_reference_issues(sites, references))
    return _finish(issues)
