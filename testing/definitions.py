"""Generated workflow definitions (Hypothesis strategies) for the property tests.

``unpinned_definitions`` draws any mix of triggers, steps and a retry policy within the
definition bounds; ``pinned_definitions`` also pins an organization on every step that acts in
one where no trigger can give a run an organization, so the definitions it draws are valid.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from hypothesis import strategies as st

from engine.workflows.definitions import BOUNDS, canonical_json, validate_definition

EVENT_TYPES = [
    "user.created",
    "user.suspended",
    "user.reactivated",
    "organization.membership.added",
    "organization.membership.removed",
    "role.assignment.expired",
]
NOTICES = [
    "welcome",
    "access_granted",
    "access_expiring",
    "access_removed",
    "approval_requested",
    "account_suspended",
    "offboarding",
]
MEMBER_NAMES = [
    "id",
    "type",
    "organization_id",
    "retry",
    "approvers",
    "expires_in",
    "duration",
    "role_id",
    "scope",
    "group_id",
    "notice",
    "subscription_id",
    "compensate",
    "timeout_ms",
    "max_attempts",
    "backoff",
    "every",
    "select",
    "event_types",
    "granted_before",
    "schema_version",
    "triggers",
    "steps",
    "script",
    "expression",
]

# ---------------------------------------------------------------------------- valid definitions


ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def encode(number: int) -> str:
    digits = []
    for _ in range(26):
        number, digit = divmod(number, 32)
        digits.append(ALPHABET[digit])
    return "".join(reversed(digits))


def ids(prefix: str) -> st.SearchStrategy[str]:
    # one draw per id (drawing 26 characters one by one makes generation slow)
    return st.integers(0, 32**26 - 1).map(lambda n: f"{prefix}_{encode(n)}")


def with_unit(n: int, unit: str) -> str:
    return f"{n}{unit}"


def durations(where: str) -> st.SearchStrategy[str]:
    bounds = BOUNDS[where]
    options: list[st.SearchStrategy[str]] = []
    for unit, seconds in (("s", 1), ("m", 60), ("h", 3600)):
        low, high = max(1, math.ceil(bounds.minimum / seconds)), bounds.maximum // seconds
        if low <= high:
            options.append(st.integers(low, high).map(functools.partial(with_unit, unit=unit)))
    return st.one_of(options)


retries = st.fixed_dictionaries({"max_attempts": st.integers(1, 10), "backoff": durations("retry.backoff")})
org = {"organization_id": ids("org")}
retry = {"retry": retries}


def body(kind: str, required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just(kind), **required}, optional=optional)


step_bodies = st.one_of(
    body(
        "approval",
        {
            "approvers": st.lists(ids("usr"), min_size=1, max_size=20, unique=True),
            "expires_in": durations("approval.expires_in"),
        },
        org,
    ),
    body("wait", {"duration": durations("wait.duration")}, org),
    body(
        "assign_role",
        {"role_id": ids("rol"), "scope": st.just("organization")},
        {**org, **retry, "expires_in": durations("assign_role.expires_in")},
    ),
    body(
        "assign_role",
        {"role_id": ids("rol"), "scope": st.just("realm")},
        {**retry, "expires_in": durations("assign_role.expires_in")},
    ),
    body("remove_role", {"role_id": ids("rol")}, {**org, **retry}),
    body("add_to_group", {"group_id": ids("grp")}, {**org, **retry}),
    body("remove_from_group", {"group_id": ids("grp")}, {**org, **retry}),
    body("remove_membership", {}, {**org, **retry}),
    body("suspend_user", {}, {**org, **retry}),
    body("notify", {"notice": st.sampled_from(NOTICES)}, {**org, **retry}),
    body(
        "call_webhook",
        {"subscription_id": ids("whk")},
        {**org, **retry, "compensate": st.booleans(), "timeout_ms": st.integers(100, 30000)},
    ),
)
step_ids = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from("abcdefghijklmnopqrstuvwxyz"),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", max_size=39),
)


@st.composite
def step_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    with_end = draw(st.booleans())
    limit = 20 - int(with_end)
    # mostly short, a few long, one in six at the limit
    count = draw(st.sampled_from([1, 2, 3, 4, 0, limit])) or draw(st.integers(1, limit))
    names = draw(st.lists(step_ids, min_size=count + int(with_end), max_size=count + int(with_end), unique=True))
    steps = [{"id": name, **draw(step_bodies)} for name in names[:count]]
    if with_end:
        end: dict[str, Any] = {"id": names[-1], "type": "end"}
        if draw(st.booleans()):
            end["organization_id"] = draw(ids("org"))
        steps.append(end)
    return steps


selectors = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("role_holders"),
            "role_id": ids("rol"),
            "granted_before": durations("role_holders.granted_before"),
        }
    ),
    st.fixed_dictionaries({"type": st.just("organization_members"), "organization_id": ids("org")}),
    st.fixed_dictionaries({"type": st.just("group_members"), "group_id": ids("grp")}),
)
event_triggers = st.fixed_dictionaries(
    {"type": st.just("event"), "event_types": st.lists(st.sampled_from(EVENT_TYPES), min_size=1, unique=True)},
    optional=org,
)
schedule_triggers = st.fixed_dictionaries(
    {"type": st.just("schedule"), "every": durations("schedule.every"), "select": selectors}
)


@st.composite
def trigger_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    manual = draw(st.booleans())
    others: list[dict[str, Any]] = draw(
        st.lists(
            st.one_of(event_triggers, schedule_triggers),
            min_size=0 if manual else 1,
            max_size=5 - int(manual),
            unique_by=canonical_json,
        )
    )
    if manual:
        others.insert(draw(st.integers(0, len(others))), {"type": "manual"})
    return others


unpinned_definitions = st.fixed_dictionaries(
    {"schema_version": st.just(1), "triggers": trigger_lists(), "steps": step_lists()},
    optional={"retry": retries},
)


@st.composite
def pinned_definitions(draw: st.DrawFn) -> dict[str, Any]:
    """A generated definition; where no trigger can give a run an organization, every step that acts
    in one pins its own (the rule itself is tested in tests/unit/test_organization_required.py)."""
    definition: dict[str, Any] = draw(unpinned_definitions)
    for issue in validate_definition(definition):
        if issue.code == "organization_required":
            definition["steps"][int(issue.path.rsplit("/", 1)[1])]["organization_id"] = draw(ids("org"))
    return definition
