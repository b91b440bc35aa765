"""The engine's pure rules, pinned exactly: backoff and jitter, the transition table, and what
a refusal of the grant ceiling names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine.directory.authz import Authority, Grant, check_assignment, require
from engine.platform.clock import FixedClock
from engine.platform.errors import Forbidden, GrantCeilingExceeded, ValidationFailed
from engine.runs import states
from engine.runs.retry import CAP_MS, JITTER, delay_ms

ORG_A = "org_" + "a" * 26
ORG_B = "org_" + "b" * 26


# --- backoff ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("failed", "base_ms"), [(0, 60_000), (1, 60_000), (2, 120_000), (3, 240_000), (12, CAP_MS)])
def test_jitter_is_taken_off_the_capped_delay(failed: int, base_ms: int) -> None:
    assert delay_ms(60_000, failed, rand=lambda: 0.0) == base_ms
    assert delay_ms(60_000, failed, rand=lambda: 0.5) == int(base_ms * (1 - JITTER / 2))
    assert delay_ms(60_000, failed, rand=lambda: 1.0) == int(base_ms * (1 - JITTER))


def test_a_capped_delay_with_jitter_is_below_the_cap() -> None:
    # Jitter applied before the cap would leave exactly the cap here.
    assert delay_ms(3_600_000, 4, rand=lambda: 0.5) == CAP_MS * 9 // 10
    assert delay_ms(3_600_000, 60, rand=lambda: 0.25) == CAP_MS * 95 // 100


def test_a_fixed_clock_moves_only_when_told_and_gives_its_jitter() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    clock = FixedClock(start, jitter=0.3)
    assert clock.now() == start and clock.random() == 0.3
    clock.advance(hours=2, seconds=5)
    assert clock.now() == start + timedelta(hours=2, seconds=5)
    assert FixedClock(start).random() == 0.0


# --- the transition table ----------------------------------------------------------------------------


def test_the_states_a_run_may_move_from() -> None:
    assert states.allowed_from(states.RUNNING) == ["awaiting_approval", "pending", "running", "waiting"]
    assert states.allowed_from(states.COMPENSATING) == [
        "awaiting_approval",
        "compensating",
        "pending",
        "running",
        "waiting",
    ]
    assert states.allowed_from(states.CANCELLED) == ["compensating"]
    assert states.allowed_from(states.COMPENSATED) == ["compensating"]
    assert states.allowed_from(states.SUCCEEDED) == ["pending", "running"]  # a one-step run, batched
    assert states.allowed_from(states.WAITING) == states.allowed_from(states.AWAITING_APPROVAL) == ["running"]
    assert states.allowed_from(states.FAILED) == states.allowed_from(states.COMPENSATION_FAILED) == ["compensating"]
    assert states.allowed_from(states.PENDING) == []  # nothing goes back to pending
    for finished in states.FINISHED:
        assert finished not in states.RUN_TRANSITIONS  # a finished run never moves again
    assert states.FINISHED | states.IN_FLIGHT == set(states.RUN_STATES)
    assert states.FORWARD == states.IN_FLIGHT - {states.COMPENSATING}


# --- what a refusal names ------------------------------------------------------------------------------


def test_a_ceiling_refusal_names_exactly_what_is_missing_in_that_scope() -> None:
    granter = Authority(
        "user",
        "usr_granter",
        [Grant(frozenset({"realm.users.read"}), None), Grant(frozenset({"realm.users.write"}), ORG_A)],
    )
    role = ["realm.users.read", "realm.users.write", "realm.roles.write"]

    def refusal(organization_id: str | None) -> str:
        with pytest.raises(GrantCeilingExceeded) as caught:
            check_assignment(
                granter,
                role_name="payroll",
                role_permissions=role,
                requires_approval=False,
                organization_id=organization_id,
                subject_id="usr_subject",
                approver=None,
            )
        return caught.value.detail

    prefix = "To assign payroll you need every permission of the role in that scope; missing: "
    assert refusal(ORG_A) == prefix + f"realm.roles.write in {ORG_A}"
    assert refusal(ORG_B) == prefix + f"realm.roles.write in {ORG_B}, realm.users.write in {ORG_B}"
    assert refusal(None) == prefix + "realm.roles.write, realm.users.write"


def test_a_missing_permission_is_named() -> None:
    with pytest.raises(Forbidden) as caught:
        require(Authority("user", "usr_1", []), "realm.audit.read")
    assert caught.value.detail == "This needs the permission realm.audit.read."
    assert caught.value.status == 403 and caught.value.code == "forbidden"


def assign_in(organization_id: str | None, *, granter: Authority, approver: Authority | None, subject: str) -> None:
    check_assignment(
        granter,
        role_name="payroll",
        role_permissions=["realm.users.read", "realm.users.write"],
        requires_approval=True,
        organization_id=organization_id,
        subject_id=subject,
        approver=approver,
    )


ADMIN = Authority("user", "usr_admin", [Grant(frozenset({"realm.*", "org.*"}), None)])
ORG_A_ADMIN = Authority("user", "usr_org_a", [Grant(frozenset({"realm.users.read", "realm.users.write"}), ORG_A)])


def test_an_approver_holding_the_role_in_the_organization_approves_there_only() -> None:
    assign_in(ORG_A, granter=ADMIN, approver=ORG_A_ADMIN, subject="usr_subject")
    with pytest.raises(Forbidden) as caught:
        assign_in(ORG_B, granter=ADMIN, approver=ORG_A_ADMIN, subject="usr_subject")
    assert caught.value.detail == "The approver could not assign this role themselves."


def test_each_approval_refusal_says_which_rule() -> None:
    with pytest.raises(Forbidden) as caught:
        assign_in(None, granter=ADMIN, approver=ADMIN, subject="usr_subject")
    assert caught.value.detail == "The approver must be someone other than the granter and the subject."
    with pytest.raises(ValidationFailed) as missing:
        assign_in(None, granter=ADMIN, approver=None, subject="usr_subject")
    [issue] = missing.value.issues
    assert (issue.path, issue.code) == ("/approver_id", "approver_required")
    assert issue.message == "The role payroll requires an independent approver."


# --- the fast path's statements: named parameters become asyncpg's $n ----------------------------------


def test_named_parameters_become_numbered_once_each_in_order_of_first_use() -> None:
    from engine.platform.db import positional

    statement = positional("SELECT :run_id, :now::timestamptz, x::text, :run_id, :step")
    assert statement.sql == "SELECT $1, $2::timestamptz, x::text, $1, $3"
    assert statement.names == ("run_id", "now", "step")
    assert statement.args({"step": "s", "now": 2, "run_id": "r", "unused": 0}) == ["r", 2, "s"]


def test_every_step_type_with_a_fast_form_is_retried_like_its_ordinary_form() -> None:
    """The fast path records the retry policy of every step it makes (engine/runs/fastpath.py)."""
    from engine.runs.fastpath_forms import FAST_STEP_TYPES
    from engine.runs.steps import STEP_TYPES

    # Every internal step type has a batched form; approvals, waits and calls never do.
    assert FAST_STEP_TYPES == {name for name, step in STEP_TYPES.items() if step.kind == "internal"}
    assert FAST_STEP_TYPES == {
        "assign_role",
        "remove_role",
        "add_to_group",
        "remove_from_group",
        "remove_membership",
        "suspend_user",
        "notify",
        "end",
    }
    assert all(STEP_TYPES[name].retried for name in FAST_STEP_TYPES)


def test_a_step_failure_reads_as_its_message_and_a_refusal_keeps_the_directorys_code() -> None:
    """What a traceback or a log shows of a step failure is its message; a refused directory
    operation becomes a permanent failure with the directory's code and words."""
    from engine.runs.steps.base import StepFailure

    failure = StepFailure("subscription_paused", "The webhook subscription whk_1 is paused.", permanent=False)
    assert (str(failure), failure.args) == (failure.message, (failure.message,))
    refused = StepFailure.from_engine_error(GrantCeilingExceeded("To grant viewer you need realm.workflows.read"))
    assert (refused.category, refused.message, refused.permanent) == (
        "grant_ceiling_exceeded",
        "To grant viewer you need realm.workflows.read",
        True,
    )
