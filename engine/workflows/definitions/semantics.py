"""Validation's layer 3, semantics, for every trigger, step and retry policy whose shape is sound:
duration bounds, unique step ids, one manual trigger, no identical triggers, nothing after an end
step, no organization on a realm-scope assignment, an organization for every step that acts in one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from engine.platform.errors import Issue
from engine.workflows.definitions.canonical import canonical_json
from engine.workflows.definitions.durations import BOUNDS
from engine.workflows.definitions.vocabulary import NEVER_RETRIED, STEP_TYPES

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
