"""A step that acts in an organization, in a definition no trigger of which can give a run one, is
refused at validation: every run of it would fail ``organization_required``."""

from __future__ import annotations

from typing import Any

import pytest

from engine.workflows.definitions import validate_definition

ROLE = "rol_" + "0" * 26
ORG = "org_" + "0" * 26
GRANT = {"id": "grant", "type": "assign_role", "role_id": ROLE, "scope": "organization"}
LEAVE = {"id": "leave", "type": "remove_membership"}
USER_EVENTS = {"type": "event", "event_types": ["user.created", "user.suspended", "user.reactivated"]}


def definition(triggers: list[dict[str, Any]], *steps: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": triggers, "steps": list(steps)}


def codes(issues: list[Any]) -> list[tuple[str, str]]:
    return [(issue.path, issue.code) for issue in issues]


def test_an_organization_step_without_organization_and_only_user_events_is_refused_at_its_path() -> None:
    issues = validate_definition(
        definition([USER_EVENTS], {"id": "first", "type": "wait", "duration": "1h"}, GRANT, LEAVE)
    )
    assert codes(issues) == [("/steps/1", "organization_required"), ("/steps/2", "organization_required")]
    message = issues[0].message
    assert "Pin organization_id" in message and "add a trigger that carries an organization" in message


@pytest.mark.parametrize(
    "trigger",
    [
        {"type": "manual"},
        {"type": "event", "event_types": ["user.created"], "organization_id": ORG},
        {"type": "event", "event_types": ["user.created", "organization.membership.added"]},
        {"type": "event", "event_types": ["organization.membership.removed"]},
        {"type": "event", "event_types": ["role.assignment.expired"]},
        {"type": "schedule", "every": "24h", "select": {"type": "organization_members", "organization_id": ORG}},
    ],
)
def test_a_trigger_that_can_carry_an_organization_lets_the_step_through(trigger: dict[str, Any]) -> None:
    assert validate_definition(definition([USER_EVENTS, trigger], GRANT, LEAVE)) == []


def test_a_pinned_organization_or_a_realm_scope_grant_needs_no_trigger_to_carry_one() -> None:
    pinned = [GRANT | {"organization_id": ORG}, LEAVE | {"id": "leave", "organization_id": ORG}]
    realm_grant = {"id": "realm", "type": "assign_role", "role_id": ROLE, "scope": "realm"}
    assert validate_definition(definition([USER_EVENTS], *pinned, realm_grant)) == []
