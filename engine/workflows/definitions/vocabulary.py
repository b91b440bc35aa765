"""The vocabulary of a workflow definition and its limits: step, trigger and selector types,
the issue codes validation answers with, the size, depth and issue-count limits.
"""

from __future__ import annotations

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
