"""Each step type's decision as a pure function of its snapshot: every refusal category, its
message and permanence, and the effect of a step that can be made (engine/runs/decisions.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine.directory.authz import Authority, Grant
from engine.runs import decisions as d
from engine.runs.decisions import (
    ApproverFacts,
    Effect,
    GroupFacts,
    Refusal,
    RoleFacts,
    Snapshot,
    SubjectFacts,
    SubscriptionFacts,
)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
PUBLISHER, SUBJECT, APPROVER = "usr_publisher", "usr_subject", "usr_approver"
ORG, OTHER_ORG = "org_a", "org_b"


def authority(who: str, *grants: tuple[str, str | None]) -> Authority:
    by_scope: dict[str | None, set[str]] = {}
    for permission, scope in grants:
        by_scope.setdefault(scope, set()).add(permission)
    return Authority("user", who, [Grant(frozenset(p), scope) for scope, p in by_scope.items()])


ADMIN = authority(PUBLISHER, ("realm.*", None), ("org.*", None))
NOBODY = Authority("user", SUBJECT)
VIEWER = RoleFacts("rol_viewer", "viewer", ("realm.workflows.read",), "realm", False)
ORG_VIEWER = RoleFacts("rol_org", "org viewer", ("realm.workflows.read",), "organization", False)
AUDITOR = RoleFacts("rol_auditor", "Auditor", ("realm.audit.read",), "realm", True)
TEAM = GroupFacts("grp_team", "Team", ORG, (("viewer", ("realm.workflows.read",), "realm"),))
SUBSCRIPTION = SubscriptionFacts("whk_1", "active", "https://hooks.example.com/x", True)


def snap(step: dict[str, Any], **facts: Any) -> Snapshot:
    base: dict[str, Any] = {
        "run_id": "wrn_1",
        "realm_id": "rlm_1",
        "subject_id": SUBJECT,
        "publisher_id": PUBLISHER,
        "step": {"id": "s"} | step,
        "organization_id": step.get("organization_id"),
        "now": NOW,
        "wall_now": NOW,
        "authority": ADMIN,
        "subject": SubjectFacts("subject@example.com", "active"),
        "subject_authority": NOBODY,
        "fresh_id": "ras_new",
    }
    return Snapshot(**(base | facts))


def refusal(decision: d.Decision) -> tuple[str, str, bool]:
    assert isinstance(decision, Refusal), decision
    return decision.category, decision.message, decision.permanent


def effect(decision: d.Decision) -> Effect:
    assert isinstance(decision, Effect), decision
    return decision


GRANT = {"type": "assign_role", "role_id": VIEWER.id, "scope": "realm"}
ORG_GRANT = {"type": "assign_role", "role_id": ORG_VIEWER.id, "scope": "organization"}
JOIN = {"type": "add_to_group", "group_id": TEAM.id}
LEAVE_GROUP = {"type": "remove_from_group", "group_id": TEAM.id}
LEAVE = {"type": "remove_membership", "organization_id": ORG}
REVOKE = {"type": "remove_role", "role_id": VIEWER.id}
CALL = {"type": "call_webhook", "subscription_id": "whk_1"}
OUTRANKING = authority(SUBJECT, ("realm.policy.write", None))


# --- The publisher's re-check (every internal step and call) ----------------------------------------


@pytest.mark.parametrize(
    ("step", "facts", "expected"),
    [
        (
            GRANT,
            {"role": VIEWER, "publisher_active": False},
            ("publisher_lacks_authority", "The accountable publisher's account is not active.", True),
        ),
        (
            GRANT,
            {"role": VIEWER, "authority": authority(PUBLISHER, ("realm.roles.write", None))},
            ("publisher_lacks_authority", "The accountable publisher no longer holds realm.workflows.publish.", True),
        ),
        (GRANT, {"role": None}, ("not_found", "The step names a role that does not exist.", True)),
        (
            GRANT,
            {"role": VIEWER, "authority": authority(PUBLISHER, ("realm.workflows.publish", None))},
            (
                "publisher_lacks_authority",
                "Publishing this step needs every permission of viewer: realm.workflows.read.",
                True,
            ),
        ),
        (JOIN, {"group": None}, ("group_missing", "The step names a group that does not exist.", True)),
        (
            JOIN,
            {"group": TEAM, "authority": authority(PUBLISHER, ("realm.*", None))},
            ("publisher_lacks_authority", "Publishing this step needs org.groups.write.", True),
        ),
        (
            LEAVE,
            {"authority": authority(PUBLISHER, ("realm.workflows.publish", None))},
            ("publisher_lacks_authority", "Publishing this step needs org.members.write.", True),
        ),
        (
            {"type": "suspend_user"},
            {"authority": authority(PUBLISHER, ("realm.workflows.publish", None))},
            ("publisher_lacks_authority", "Publishing this step needs realm.users.suspend.", True),
        ),
        (
            CALL,
            {"authority": authority(PUBLISHER, ("realm.workflows.publish", None))},
            ("publisher_lacks_authority", "Publishing this step needs realm.webhooks.write.", True),
        ),
        (
            {"type": "end"},
            {"publisher_active": False},
            ("publisher_lacks_authority", "The accountable publisher's account is not active.", True),
        ),
    ],
)
def test_the_publisher_is_rechecked_before_the_step(step: dict[str, Any], facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide(snap(step, **facts))) == expected


def test_approvals_and_waits_are_not_rechecked() -> None:
    inactive = {"publisher_active": False, "authority": Authority("user", PUBLISHER)}
    assert effect(d.decide(snap({"type": "wait", "duration": "1h"}, **inactive))).values == {
        "until": NOW + timedelta(hours=1)
    }
    approval = {"type": "approval", "approvers": [APPROVER], "expires_in": "1h"}
    assert (
        effect(d.decide(snap(approval, approver_users={APPROVER: (True, False)}, **inactive))).kind
        == "request_approval"
    )


# --- assign_role --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "facts", "expected"),
    [
        (GRANT, {"role": None}, ("not_found", "The role no longer exists.", True)),
        (
            ORG_GRANT,
            {"role": ORG_VIEWER},
            ("organization_required", "This step needs an organization and the run has none.", True),
        ),
        (
            {**GRANT, "role_id": AUDITOR.id},
            {"role": AUDITOR},
            ("approval_missing", "Auditor requires approval and no approval step decided it.", True),
        ),
        (
            {**GRANT, "expires_in": "1h"},
            {"role": VIEWER, "wall_now": NOW + timedelta(hours=1)},
            ("validation_failed", "The request is not valid.", True),
        ),
        (
            {**ORG_GRANT, "role_id": VIEWER.id},
            {"role": VIEWER, "organization_id": ORG},
            ("validation_failed", "The request is not valid.", True),
        ),
        (
            {**GRANT, "role_id": ORG_VIEWER.id},
            {"role": ORG_VIEWER},
            ("validation_failed", "The request is not valid.", True),
        ),
        (GRANT, {"role": VIEWER, "subject": None}, ("not_found", "No such user.", True)),
        (
            ORG_GRANT,
            {"role": ORG_VIEWER, "organization_id": ORG, "organization_exists": False},
            ("not_found", "No such organization.", True),
        ),
        (
            GRANT,
            {"role": VIEWER, "authority": authority(PUBLISHER, ("realm.workflows.publish", None))},
            (
                "grant_ceiling_exceeded",
                "To assign viewer you need every permission of the role in that scope; missing: realm.workflows.read",
                True,
            ),
        ),
        (
            GRANT,
            {
                "role": VIEWER,
                "authority": authority(PUBLISHER, ("realm.workflows.*", None)),
                "subject_authority": OUTRANKING,
            },
            (
                "target_outranks_actor",
                "This user holds permissions you do not hold (realm.policy.write); you cannot change what they hold.",
                True,
            ),
        ),
        (
            GRANT,
            {"role": VIEWER, "holds_grant": True},
            ("conflict", "The user already holds viewer in that scope.", True),
        ),
    ],
)
def test_assign_role_refusals(step: dict[str, Any], facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_assign_role(snap(step, **facts))) == expected


APPROVED = ({"status": "rejected", "decided_by": "usr_x"}, {"status": "approved", "decided_by": APPROVER})


@pytest.mark.parametrize(
    ("approver", "message"),
    [
        (None, "The approver must be an active user of the realm."),
        (ApproverFacts(APPROVER, False, ADMIN), "The approver must be an active user of the realm."),
        (
            ApproverFacts(APPROVER, True, Authority("user", APPROVER)),
            "The approver could not assign this role themselves.",
        ),
    ],
)
def test_a_grant_needing_approval_needs_an_active_approver_who_could_grant_it(approver: Any, message: str) -> None:
    step = {**GRANT, "role_id": AUDITOR.id}
    assert refusal(d.decide_assign_role(snap(step, role=AUDITOR, approvals=APPROVED, approver=approver))) == (
        "forbidden",
        message,
        True,
    )


def test_an_approved_grant_names_its_approver_and_expiry() -> None:
    step = {**GRANT, "role_id": AUDITOR.id, "expires_in": "2h"}
    approver = ApproverFacts(APPROVER, True, authority(APPROVER, ("realm.audit.read", None)))
    made = effect(d.decide_assign_role(snap(step, role=AUDITOR, approvals=APPROVED, approver=approver)))
    until = NOW + timedelta(hours=2)
    assert made.values == {
        "assignment_id": "ras_new",
        "role_id": AUDITOR.id,
        "role_name": "Auditor",
        "organization_id": None,
        "expires_at": until,
        "approver_id": APPROVER,
    }
    assert (made.strategy, made.compensation_state) == ("undo", "pending")
    assert made.result == {"assignment_id": "ras_new", "role_id": AUDITOR.id, "organization_id": None}
    assert [(a.type, a.subject_id, a.details["approver_id"]) for a in made.audit] == [
        ("role.assigned", SUBJECT, APPROVER)
    ]
    assert made.audit[0].details["expires_at"] == until.isoformat()


def test_an_organization_grant_is_made_in_the_runs_organization() -> None:
    made = effect(d.decide(snap(ORG_GRANT, role=ORG_VIEWER, organization_id=ORG)))
    assert (made.values["organization_id"], made.result["organization_id"]) == (ORG, ORG)
    # the ceiling is judged in the organization: holding the role's permissions there suffices
    local = authority(PUBLISHER, ("realm.workflows.publish", None), ("realm.workflows.read", ORG))
    assert isinstance(d.decide(snap(ORG_GRANT, role=ORG_VIEWER, organization_id=ORG, authority=local)), Effect)
    assert isinstance(d.decide(snap(ORG_GRANT, role=ORG_VIEWER, organization_id=OTHER_ORG, authority=local)), Refusal)


# --- remove_role -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "facts", "expected"),
    [
        (REVOKE, {"role": None}, ("not_found", "The role no longer exists.", True)),
        (
            {**REVOKE, "role_id": ORG_VIEWER.id},
            {"role": ORG_VIEWER},
            ("organization_required", "This step needs an organization and the run has none.", True),
        ),
        (
            REVOKE,
            {
                "role": VIEWER,
                "assignments": (("ras_1", None),),
                "authority": authority(PUBLISHER, ("realm.workflows.publish", None)),
            },
            (
                "grant_ceiling_exceeded",
                "To revoke viewer you need every permission of the role in that scope; missing: realm.workflows.read",
                True,
            ),
        ),
        (
            REVOKE,
            {
                "role": VIEWER,
                "assignments": (("ras_1", None),),
                "authority": authority(PUBLISHER, ("realm.workflows.*", None)),
                "subject_authority": OUTRANKING,
            },
            (
                "target_outranks_actor",
                "This user holds permissions you do not hold (realm.policy.write); you cannot change what they hold.",
                True,
            ),
        ),
    ],
)
def test_remove_role_refusals(step: dict[str, Any], facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_remove_role(snap(step, **facts))) == expected


def test_remove_role_revokes_the_grants_in_the_steps_organization_only() -> None:
    held = (("ras_a", ORG), ("ras_b", OTHER_ORG))
    made = effect(
        d.decide_remove_role(
            snap({**REVOKE, "role_id": ORG_VIEWER.id}, role=ORG_VIEWER, organization_id=ORG, assignments=held)
        )
    )
    assert made.values == {"assignment_ids": ["ras_a"], "role_id": ORG_VIEWER.id, "role_name": "org viewer"}
    assert made.result == {"removed_assignments": ["ras_a"]}
    assert [(a.type, a.details["assignment_id"]) for a in made.audit] == [("role.revoked", "ras_a")]
    none = effect(d.decide_remove_role(snap(REVOKE, role=VIEWER)))
    assert none.result == {"removed_assignments": []} and none.audit == ()


# --- groups ------------------------------------------------------------------------------------------

CEILING_TEAM = "To grant viewer you need every permission of the role in that scope; missing: realm.workflows.read"
GROUP_WRITER = authority(PUBLISHER, ("realm.workflows.publish", None), ("org.groups.write", None))


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"group": None}, ("group_missing", "The group no longer exists.", True)),
        ({"group": TEAM, "subject": None}, ("not_found", "No such user.", True)),
        (
            {"group": TEAM, "is_member": False},
            ("not_a_member", "Only members of the organization can join its groups.", True),
        ),
        (
            {"group": TEAM, "is_member": True, "in_group": True},
            ("already_a_member", "The user is already in this group.", True),
        ),
        ({"group": TEAM, "is_member": True, "authority": GROUP_WRITER}, ("grant_ceiling_exceeded", CEILING_TEAM, True)),
        (
            {
                "group": TEAM,
                "is_member": True,
                "subject_authority": OUTRANKING,
                "authority": authority(PUBLISHER, ("realm.workflows.*", None), ("org.*", None)),
            },
            (
                "target_outranks_actor",
                "This user holds permissions you do not hold (realm.policy.write); you cannot change their groups.",
                True,
            ),
        ),
    ],
)
def test_add_to_group_refusals(facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_add_to_group(snap(JOIN, **facts))) == expected


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"group": None}, ("group_missing", "The group no longer exists.", True)),
        ({"group": TEAM, "in_group": False}, ("not_a_member", "The subject is not in this group.", True)),
        (
            {"group": TEAM, "in_group": True, "authority": GROUP_WRITER},
            ("grant_ceiling_exceeded", CEILING_TEAM.replace("grant", "revoke"), True),
        ),
        (
            {
                "group": TEAM,
                "in_group": True,
                "subject_authority": OUTRANKING,
                "authority": authority(PUBLISHER, ("realm.workflows.*", None), ("org.*", None)),
            },
            (
                "target_outranks_actor",
                "This user holds permissions you do not hold (realm.policy.write); you cannot change their groups.",
                True,
            ),
        ),
    ],
)
def test_remove_from_group_refusals(facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_remove_from_group(snap(LEAVE_GROUP, **facts))) == expected


def test_group_effects() -> None:
    joined = effect(d.decide(snap(JOIN, group=TEAM, is_member=True)))
    assert (joined.kind, joined.values, joined.result) == (
        "add_to_group",
        {"group_id": TEAM.id, "organization_id": ORG},
        {"group_id": TEAM.id, "organization_id": ORG},
    )
    assert (joined.strategy, joined.compensation_state) == ("undo", "pending")
    assert [(a.category, a.type, a.details) for a in joined.audit] == [
        ("directory", "group.member_added", {"group_id": TEAM.id, "organization_id": ORG})
    ]
    left = effect(d.decide(snap(LEAVE_GROUP, group=TEAM, in_group=True)))
    assert (left.kind, left.result, left.strategy) == ("remove_from_group", {"group_id": TEAM.id}, "none")
    assert [a.type for a in left.audit] == ["group.member_removed"]


# --- remove_membership, suspend_user, notify, end --------------------------------------------------


@pytest.mark.parametrize(
    ("step", "facts", "expected"),
    [
        (
            {"type": "remove_membership"},
            {},
            ("organization_required", "This step needs an organization and the run has none.", True),
        ),
        (
            LEAVE,
            {"organization_exists": False, "is_member": True},
            ("not_a_member", "The subject is not a member of the organization.", True),
        ),
        (LEAVE, {"is_member": False}, ("not_a_member", "The subject is not a member of the organization.", True)),
        (
            LEAVE,
            {
                "is_member": True,
                "joined_groups": (TEAM,),
                "authority": authority(PUBLISHER, ("realm.workflows.publish", None), ("org.members.write", None)),
            },
            ("grant_ceiling_exceeded", CEILING_TEAM.replace("grant", "revoke"), True),
        ),
        (
            LEAVE,
            {
                "is_member": True,
                "subject_authority": OUTRANKING,
                "authority": authority(PUBLISHER, ("realm.workflows.*", None), ("org.*", None)),
            },
            (
                "target_outranks_actor",
                "This user holds permissions you do not hold (realm.policy.write); you cannot change their memberships.",
                True,
            ),
        ),
    ],
)
def test_remove_membership_refusals(step: dict[str, Any], facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_remove_membership(snap(step, **facts))) == expected


def test_remove_membership_takes_the_groups_too() -> None:
    made = effect(d.decide(snap(LEAVE, is_member=True, membership_id="mem_1", joined_groups=(TEAM,))))
    assert made.values == {"organization_id": ORG, "membership_id": "mem_1", "group_ids": [TEAM.id]}
    assert made.result == {"organization_id": ORG}
    assert [(a.type, a.details) for a in made.audit] == [
        ("group.member_removed", {"group_id": TEAM.id, "organization_id": ORG, "reason": "membership_removed"}),
        ("organization.membership.removed", {"membership_id": "mem_1", "organization_id": ORG, "user_id": SUBJECT}),
    ]
    payload = {"membership_id": "mem_1", "organization_id": ORG, "user_id": SUBJECT}
    assert made.outbox == (d.OutboxEntry("organization.membership.removed", SUBJECT, ORG, payload),)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"subject_id": PUBLISHER}, ("self_action", "A run never suspends its own accountable publisher.", True)),
        ({"subject": None}, ("not_found", "No such user.", True)),
        (
            {
                "subject_authority": OUTRANKING,
                "authority": authority(PUBLISHER, ("realm.workflows.*", None), ("realm.users.suspend", None)),
            },
            (
                "target_outranks_actor",
                "This user holds permissions you do not hold (realm.policy.write); you cannot change their status.",
                True,
            ),
        ),
        ({"subject": SubjectFacts("s@example.com", "suspended")}, ("conflict", "The user is already suspended.", True)),
    ],
)
def test_suspend_user_refusals(facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_suspend_user(snap({"type": "suspend_user"}, **facts))) == expected


def test_suspend_user_effect() -> None:
    made = effect(d.decide(snap({"type": "suspend_user"})))
    assert (made.kind, made.result, [a.type for a in made.audit]) == (
        "suspend_user",
        {"status": "suspended"},
        ["user.suspended"],
    )
    assert made.audit[0].details == {} and made.audit[0].subject_id == SUBJECT
    assert made.outbox == (d.OutboxEntry("user.suspended", SUBJECT, None, {"user_id": SUBJECT}),)


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        (None, ("subject_missing", "The subject no longer exists.", True)),
        (SubjectFacts("", "active"), ("no_recipients", "The subject has no email address.", True)),
        (SubjectFacts("  ", "active"), ("no_recipients", "The subject has no email address.", True)),
    ],
)
def test_notify_refusals(subject: Any, expected: Any) -> None:
    assert refusal(d.decide_notify(snap({"type": "notify", "notice": "welcome"}, subject=subject))) == expected


@pytest.mark.parametrize(
    ("mail", "state", "compensation"), [(True, "queued", "impossible"), (False, "not_configured", "not_needed")]
)
def test_a_notice_is_queued_only_with_mail(mail: bool, state: str, compensation: str) -> None:
    made = effect(
        d.decide(snap({"type": "notify", "notice": "welcome"}, mail_configured=mail, workflow_name="Onboarding"))
    )
    assert made.values == {"to_address": "subject@example.com", "notice": "welcome", "workflow_name": "Onboarding"}
    assert made.result == {"to": "subject@example.com", "state": state}
    assert (made.strategy, made.compensation_state) == ("impossible", compensation)


def test_end_ends_the_run() -> None:
    made = effect(d.decide(snap({"type": "end"})))
    assert (made.kind, made.ends_run, made.values, made.audit) == ("none", True, {}, ())


# --- approval, wait ------------------------------------------------------------------------------------


def test_approvers_are_active_members_who_are_not_guests_nor_the_subject() -> None:
    step = {
        "type": "approval",
        "approvers": ["usr_guest", "usr_off", SUBJECT, "usr_gone", APPROVER, APPROVER, 7],
        "expires_in": "1h",
    }
    users = {"usr_guest": (True, True), "usr_off": (False, False), SUBJECT: (True, False), APPROVER: (True, False)}
    made = effect(d.decide_approval(snap(step, approver_users=users)))
    assert made.values == {"approvers": [APPROVER], "expires_in": "1h"}
    assert refusal(d.decide_approval(snap(step, approver_users={k: v for k, v in users.items() if k != APPROVER}))) == (
        "no_eligible_approver",
        "None of the named approvers may decide (suspended, a guest, the subject, or gone).",
        True,
    )


# --- call_webhook ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        ({"subscription": None}, ("subscription_missing", "The webhook subscription whk_1 is gone.", True)),
        (
            {"subscription": replace(SUBSCRIPTION, state="deleted")},
            ("subscription_missing", "The webhook subscription whk_1 is gone.", True),
        ),
        (
            {"subscription": replace(SUBSCRIPTION, state="disabled")},
            ("subscription_disabled", "The webhook subscription whk_1 is disabled.", True),
        ),
        (
            {"subscription": replace(SUBSCRIPTION, state="paused")},
            ("subscription_paused", "The webhook subscription whk_1 is paused; retried later.", False),
        ),
        (
            {"subscription": SUBSCRIPTION, "operator_key": False},
            ("secret_unavailable", "No operator key to read the subscription's secret.", True),
        ),
        (
            {"subscription": replace(SUBSCRIPTION, secret_readable=False)},
            ("secret_unavailable", "The subscription's secret cannot be read with the operator key.", True),
        ),
        (
            {"subscription": replace(SUBSCRIPTION, egress_refusal=("egress_denied", "10.0.0.1 is private"))},
            ("egress_denied", "10.0.0.1 is private", False),
        ),
        (
            {"subscription": replace(SUBSCRIPTION, egress_refusal=("invalid_destination", "bad"))},
            ("invalid_destination", "bad", True),
        ),
        (
            {"subscription": replace(SUBSCRIPTION, egress_refusal=("network_error", "no address"))},
            ("network_error", "no address", False),
        ),
    ],
)
def test_call_refusals(facts: dict[str, Any], expected: Any) -> None:
    assert refusal(d.decide_call_webhook(snap(CALL, **facts))) == expected


def test_a_call_that_can_be_made_names_its_destination() -> None:
    made = effect(d.decide(snap(CALL, subscription=SUBSCRIPTION)))
    assert (made.kind, made.values) == ("call", {"subscription_id": "whk_1", "destination": SUBSCRIPTION.destination})


def test_every_step_type_of_the_contract_has_a_decision() -> None:
    from engine.runs.steps import STEP_TYPES

    assert set(d.DECISIONS) == set(STEP_TYPES)
    assert d.RECHECKED == set(STEP_TYPES) - {"approval", "wait"}


def test_a_transition_ends_only_where_the_state_table_allows() -> None:
    from engine.runs import states

    # A pending run starts and makes its first step in one transaction: its first step's outcome
    # is written directly (a one-step run succeeds in one commit), never where neither may go.
    assert states.move_allowed("pending", "succeeded")
    assert states.move_allowed("pending", "running")
    assert states.move_allowed("pending", "compensating")
    assert states.move_allowed("running", "succeeded")
    assert not states.move_allowed("pending", "waiting")
    assert not states.move_allowed("waiting", "succeeded")
    assert not states.move_allowed("compensating", "running")
    assert not states.move_allowed("succeeded", "running")


def test_the_batched_statement_moves_runs_only_along_the_tables_edges() -> None:
    import re

    from engine.runs import states
    from engine.runs.runstore import batched

    listed = re.search(r"\(r\.state, a\.target\) IN \(VALUES (.*?)\)\s+--", batched.FAST_TRANSITIONS.sql)
    assert listed is not None
    edges = set(re.findall(r"\('(\w+)', '(\w+)'\)", listed.group(1)))
    assert edges == {(a, b) for a, targets in states.RUN_TRANSITIONS.items() for b in targets} == set(states.RUN_EDGES)
    # What the batched executor writes: a pending or running run goes on, finishes, or compensates.
    for current in (states.PENDING, states.RUNNING):
        for target in (states.RUNNING, states.SUCCEEDED, states.COMPENSATING):
            assert (current, target) in edges


def test_the_workflow_events_of_a_failed_step_are_built_once() -> None:
    assert d.step_failed_entry("wrn_1", "s", 2, "conflict") == d.AuditEntry(
        "workflow",
        "workflow.step.failed",
        "workflow_run",
        "wrn_1",
        {"step_id": "s", "attempt": 2, "error_category": "conflict"},
    )
    assert d.run_compensating_entry("wrn_1", "conflict") == d.AuditEntry(
        "workflow",
        "workflow.run.failed",
        "workflow_run",
        "wrn_1",
        {"reason": "conflict", "error_category": "conflict", "phase": "compensating"},
    )
    assert d.run_compensating_entry("wrn_1", "cancelled", "asked").details["reason"] == "asked"
