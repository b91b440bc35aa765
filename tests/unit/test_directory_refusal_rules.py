"""The directory's refusal rules (engine/directory/rules.py), pinned exactly: what each refusal says,
at which path and with which code, and the audit details every writer of a change records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.directory import rules
from engine.platform.errors import Conflict, Issue, NotFound

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
ORG = "org_" + "a" * 26


def issue(found: list[Issue]) -> list[tuple[str, str, str]]:
    return [(i.path, i.code, i.message) for i in found]


def test_an_organization_role_needs_an_organization_and_a_realm_role_takes_none() -> None:
    assert issue(rules.assignment_scope_issues("Payroll", "organization", None)) == [
        ("/organization_id", "required", "Payroll is bound to an organization: name one")
    ]
    assert issue(rules.assignment_scope_issues("Auditor", "realm", ORG)) == [
        ("/organization_id", "not_allowed", "Auditor is a realm role: it takes no organization")
    ]
    assert rules.assignment_scope_issues("Payroll", "organization", ORG) == []
    assert rules.assignment_scope_issues("Auditor", "realm", None) == []


def test_a_grant_ends_strictly_after_now() -> None:
    refused = [("/expires_at", "not_in_future", "must be in the future")]
    assert issue(rules.expiry_issues(NOW, NOW)) == refused
    assert issue(rules.expiry_issues(NOW - timedelta(microseconds=1), NOW)) == refused
    assert rules.expiry_issues(NOW + timedelta(microseconds=1), NOW) == []
    assert rules.expiry_issues(None, NOW) == []


def test_joining_a_group_needs_membership_of_its_organization_and_happens_once() -> None:
    with pytest.raises(Conflict) as outsider:
        rules.check_group_join(is_member=False, in_group=False)
    assert (outsider.value.code, outsider.value.detail) == (
        "not_a_member",
        "Only members of the organization can join its groups.",
    )
    with pytest.raises(Conflict) as twice:
        rules.check_group_join(is_member=True, in_group=True)
    assert (twice.value.code, twice.value.detail) == ("already_a_member", "The user is already in this group.")
    rules.check_group_join(is_member=True, in_group=False)


def test_leaving_needs_being_in_the_group_or_the_organization() -> None:
    with pytest.raises(NotFound) as not_in_group:
        rules.check_group_leave(False)
    assert not_in_group.value.detail == "The user is not in this group."
    rules.check_group_leave(True)
    with pytest.raises(NotFound) as not_a_member:
        rules.check_membership_removal(False)
    assert not_a_member.value.detail == "The user is not a member of this organization."
    rules.check_membership_removal(True)


def test_a_status_changes_to_another_and_nobody_suspends_themselves() -> None:
    with pytest.raises(Conflict) as same:
        rules.check_status_change("suspended", "suspended", actor_id="usr_a", user_id="usr_b")
    assert same.value.detail == "The user is already suspended."
    with pytest.raises(Conflict) as self_suspension:
        rules.check_status_change("active", "suspended", actor_id="usr_a", user_id="usr_a")
    assert self_suspension.value.detail == "You cannot suspend yourself."
    rules.check_status_change("active", "suspended", actor_id="usr_a", user_id="usr_b")
    rules.check_status_change("active", "suspended", actor_id=None, user_id="usr_b")  # a run
    rules.check_status_change("suspended", "active", actor_id="usr_a", user_id="usr_a")


def test_approvers_are_the_named_active_members_who_are_not_guests_nor_the_subject_in_order() -> None:
    users = {
        "usr_subject": (True, False),
        "usr_first": (True, False),
        "usr_second": (True, False),
        "usr_guest": (True, True),
        "usr_away": (False, False),
    }
    named = ["usr_second", 7, "usr_subject", "usr_guest", "usr_away", "usr_unknown", "usr_first", "usr_second"]
    assert rules.eligible_approvers(named, "usr_subject", users) == ["usr_second", "usr_first"]
    assert rules.eligible_approvers([], "usr_subject", users) == []


def test_the_audit_details_of_grants_revocations_and_group_memberships() -> None:
    expires = NOW + timedelta(days=1)
    assert rules.assigned_details(
        assignment_id="ras_1",
        role_id="rol_1",
        role_name="Payroll",
        organization_id=ORG,
        expires_at=expires,
        approver_id="usr_a",
    ) == {
        "assignment_id": "ras_1",
        "role_id": "rol_1",
        "role": "Payroll",
        "organization_id": ORG,
        "expires_at": expires.isoformat(),
        "approver_id": "usr_a",
    }
    assert (
        rules.assigned_details(
            assignment_id="ras_1",
            role_id="rol_1",
            role_name="Payroll",
            organization_id=None,
            expires_at=None,
            approver_id=None,
        )["expires_at"]
        is None
    )
    assert rules.revoked_details(assignment_id="ras_1", role_id="rol_1", role_name="Payroll", organization_id=ORG) == {
        "assignment_id": "ras_1",
        "role_id": "rol_1",
        "role": "Payroll",
        "organization_id": ORG,
    }
    assert rules.group_member_details("grp_1", ORG) == {"group_id": "grp_1", "organization_id": ORG}
