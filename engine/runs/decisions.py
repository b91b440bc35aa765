"""What each step would do, decided from a snapshot: pure functions, no I/O.

Every step type has one decision function, ``decide(snapshot) -> Effect | Refusal``. The snapshot
holds everything the step's rules read (engine/runs/snapshots.py loads it): the run and its pinned
step, the subject, the role, group or membership facts the step needs, the publisher's and the
subject's authority, existing grants, and for calls the subscription, its state and the egress
verdict on its destination. The decision answers either the effect to write — its rows as data,
the attempt's result, how it is compensated and the audit events it writes — or the refusal the
step meets, with its category, its message and whether it is permanent.

Three drivers use the same functions: the single-run executor (engine/runs/transition.py through each
step type's ``perform``), the batched statement of the fast path (engine/runs/fastpath.py) and the
preview (engine/runs/preview.py), which writes nothing. The refusal rules themselves are the
directory's (engine/directory/rules.py, engine/directory/authz.py) and the requirements' of
publication (``requirement_problem``): the services that change the directory by hand apply the
very same functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine.directory import rules
from engine.directory.authz import Authority, check_assignment, check_authority_over
from engine.platform.errors import EngineError, Forbidden, NotFound, ValidationFailed
from engine.runs.states import (
    COMP_IMPOSSIBLE,
    COMP_NOT_NEEDED,
    COMP_PENDING,
    STRATEGY_IMPOSSIBLE,
    STRATEGY_NONE,
    STRATEGY_UNDO,
)
from engine.workflows.definitions.authority import required_authority, requirement_problem
from engine.workflows.definitions.durations import parse_duration

# --- What a decision answers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """The step cannot do its work now: the attempt fails with this category and message."""

    category: str
    message: str
    permanent: bool = True

    @classmethod
    def from_error(cls, exc: EngineError) -> Refusal:
        """A rule of the directory refused: permanent, with its code as the category."""
        return cls(exc.code, exc.detail, True)


@dataclass(frozen=True)
class AuditEntry:
    """One audit event an effect writes (by the run's accountable publisher)."""

    category: str
    type: str
    subject_type: str
    subject_id: str | None
    details: dict[str, Any]


@dataclass(frozen=True)
class OutboxEntry:
    """One outbox event an effect writes (a domain event workflows may be triggered by)."""

    type: str
    subject_id: str | None
    organization_id: str | None
    payload: dict[str, Any]


@dataclass(frozen=True)
class Effect:
    """What the step would write: ``kind`` names the writer, ``values`` its rows as data."""

    kind: str
    summary: str  # what it does, in words
    values: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)  # the succeeded attempt's result
    strategy: str = STRATEGY_NONE
    compensation_state: str = COMP_NOT_NEEDED
    audit: tuple[AuditEntry, ...] = ()
    outbox: tuple[OutboxEntry, ...] = ()
    ends_run: bool = False


Decision = Effect | Refusal


def step_succeeded_entry(run_id: str, step_id: str, attempt: int, idempotency_key: str) -> AuditEntry:
    """``workflow.step.succeeded``, as every executor writes it."""
    details = {"step_id": step_id, "attempt": attempt, "idempotency_key": idempotency_key}
    return AuditEntry("workflow", "workflow.step.succeeded", "workflow_run", run_id, details)


def run_succeeded_entry(run_id: str) -> AuditEntry:
    """``workflow.run.succeeded``, as every executor writes it."""
    return AuditEntry("workflow", "workflow.run.succeeded", "workflow_run", run_id, {})


def step_failed_entry(run_id: str, step_id: str, attempt: int, category: str) -> AuditEntry:
    """``workflow.step.failed``, as every executor writes it."""
    details = {"step_id": step_id, "attempt": attempt, "error_category": category}
    return AuditEntry("workflow", "workflow.step.failed", "workflow_run", run_id, details)


def run_compensating_entry(run_id: str, category: str, reason: str | None = None) -> AuditEntry:
    """``workflow.run.failed`` as the run starts compensating, as every executor writes it."""
    details = {"reason": reason or category, "error_category": category, "phase": "compensating"}
    return AuditEntry("workflow", "workflow.run.failed", "workflow_run", run_id, details)


# --- The snapshot --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleFacts:
    id: str
    name: str
    permissions: tuple[str, ...]
    boundary: str
    requires_approval: bool


@dataclass(frozen=True)
class GroupFacts:
    id: str
    name: str
    organization_id: str
    roles: tuple[tuple[str, tuple[str, ...], str], ...]  # (name, permissions, boundary), ancestors' included


@dataclass(frozen=True)
class SubjectFacts:
    """The run's subject, a user of the realm."""

    email: str
    status: str


@dataclass(frozen=True)
class ApproverFacts:
    """The independent approver a role that requires approval is granted with."""

    user_id: str
    active: bool  # an active user of the realm
    authority: Authority


@dataclass(frozen=True)
class SubscriptionFacts:
    id: str
    state: str  # active, paused, disabled (a deleted or foreign one is None)
    destination: str
    secret_readable: bool  # the operator key decrypts its current secret
    # The egress policy's verdict on the destination, when judged: (category, reason), or None when
    # allowed or not judged (the transport judges it again when the call is sent).
    egress_refusal: tuple[str, str] | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything one step's decision reads. Facts a step type does not need keep their defaults."""

    run_id: str
    realm_id: str
    subject_id: str
    publisher_id: str
    step: Mapping[str, Any]
    organization_id: str | None  # the step's pinned organization, else the run's
    now: datetime  # the run clock
    wall_now: datetime  # the clock grants expire by
    authority: Authority  # the accountable publisher's
    publisher_active: bool = True
    subject: SubjectFacts | None = None  # None: not a user of the realm
    subject_authority: Authority | None = None  # what the subject holds (empty when nothing)
    approvals: tuple[Mapping[str, Any], ...] = ()  # the run's decided approvals, oldest first
    role: RoleFacts | None = None
    organization_exists: bool = True  # the organization the step acts in is the realm's
    organization_name: str | None = None  # its name, for the summary a person reads (None: say the id)
    group: GroupFacts | None = None
    is_member: bool = False  # the subject is a member of the organization the step acts in
    membership_id: str | None = None  # that membership
    in_group: bool = False  # the subject is in the step's group
    holds_grant: bool = False  # the subject holds the step's role in its scope already
    assignments: tuple[tuple[str, str | None], ...] = ()  # remove_role: the subject's grants (id, organization)
    joined_groups: tuple[GroupFacts, ...] = ()  # remove_membership: the subject's groups in the organization
    approver: ApproverFacts | None = None
    approver_users: Mapping[str, tuple[bool, bool]] = field(default_factory=dict)  # approval: (active, guest)
    subscription: SubscriptionFacts | None = None
    operator_key: bool = True  # an operator key reads subscriptions' secrets
    mail_configured: bool = False
    workflow_name: str = ""
    fresh_id: str = ""  # the id of the row the effect creates (an assignment)


def _subject_authority(s: Snapshot) -> Authority:
    return s.subject_authority or Authority("user", s.subject_id)


# --- Shared parts --------------------------------------------------------------------------------


def publisher_refusal(s: Snapshot) -> Refusal | None:
    """The accountable publisher is active, holds publish and still has the step's authority.

    Checked for every internal step and call, in the step's own transaction.
    """
    if not s.publisher_active:
        return Refusal("publisher_lacks_authority", "The accountable publisher's account is not active.")
    if not s.authority.holds("realm.workflows.publish"):
        return Refusal(
            "publisher_lacks_authority", "The accountable publisher no longer holds realm.workflows.publish."
        )
    role = (s.role.name, s.role.permissions, s.role.boundary) if s.role is not None else None
    group = s.group
    for requirement in required_authority(s.step):
        issue = requirement_problem(
            requirement,
            s.authority,
            s.organization_id,
            "",
            role=role,
            group_exists=group is not None,
            group_org=group.organization_id if group else None,
            group_roles=group.roles if group else (),
        )
        if issue is not None:
            # A reference that vanished is not an authority problem: report it as what it is.
            category = issue.code if issue.code in ("not_found", "group_missing") else "publisher_lacks_authority"
            return Refusal(category, issue.message)
    return None


def organization_required() -> Refusal:
    return Refusal("organization_required", "This step needs an organization and the run has none.")


def latest_approver(approvals: Sequence[Mapping[str, Any]]) -> str | None:
    """The decider of the run's latest approval step, the independent approver of a role that needs one."""
    for approval in reversed(approvals):
        if approval.get("status") == "approved" and approval.get("decided_by"):
            return str(approval["decided_by"])
    return None


def _entry(category: str, kind: str, s: Snapshot, details: dict[str, Any]) -> AuditEntry:
    return AuditEntry(category, kind, "user", s.subject_id, details)


# --- One decision per step type ------------------------------------------------------------------


def decide_assign_role(s: Snapshot) -> Decision:
    role = s.role
    if role is None:
        return Refusal("not_found", "The role no longer exists.")
    organization_id = s.organization_id if s.step.get("scope") == "organization" else None
    if s.step.get("scope") == "organization" and not organization_id:
        return organization_required()
    approver_id = None
    if role.requires_approval:
        approver_id = latest_approver(s.approvals)
        if approver_id is None:
            return Refusal("approval_missing", f"{role.name} requires approval and no approval step decided it.")
    expires_at = None
    if s.step.get("expires_in"):
        expires_at = s.now + timedelta(seconds=parse_duration(s.step["expires_in"]))
    try:
        issues = rules.expiry_issues(expires_at, s.wall_now)
        issues += rules.assignment_scope_issues(role.name, role.boundary, organization_id)
        if issues:
            raise ValidationFailed("The request is not valid.", issues=issues)
        if s.subject is None:
            raise NotFound("No such user.")
        if organization_id and not s.organization_exists:
            raise NotFound("No such organization.")
        approver_authority = None
        if approver_id:
            if s.approver is None or s.approver.user_id != approver_id or not s.approver.active:
                raise Forbidden("The approver must be an active user of the realm.")
            approver_authority = s.approver.authority
        check_assignment(
            s.authority,
            role_name=role.name,
            role_permissions=role.permissions,
            requires_approval=role.requires_approval,
            organization_id=rules.grant_scope(role.boundary, organization_id),
            subject_id=s.subject_id,
            approver=approver_authority,
        )
        check_authority_over(s.authority, _subject_authority(s), "user", s.subject_id, what="change what they hold")
        rules.refuse_duplicate_grant(s.holds_grant, "user", role.name)
    except EngineError as exc:
        return Refusal.from_error(exc)
    details = rules.assigned_details(
        assignment_id=s.fresh_id,
        role_id=role.id,
        role_name=role.name,
        organization_id=organization_id,
        expires_at=expires_at,
        approver_id=approver_id,
    )
    where = f" in {s.organization_name or organization_id}" if organization_id else ""
    until = f" until {expires_at.isoformat()}" if expires_at else ""
    return Effect(
        "assign_role",
        f"Grants {role.name}{where}{until}.",
        values={
            "assignment_id": s.fresh_id,
            "role_id": role.id,
            "role_name": role.name,
            "organization_id": organization_id,
            "expires_at": expires_at,
            "approver_id": approver_id,
        },
        result={"assignment_id": s.fresh_id, "role_id": role.id, "organization_id": organization_id},
        strategy=STRATEGY_UNDO,
        compensation_state=COMP_PENDING,
        audit=(_entry("authorization", "role.assigned", s, details),),
    )


def decide_remove_role(s: Snapshot) -> Decision:
    role = s.role
    if role is None:
        return Refusal("not_found", "The role no longer exists.")
    if role.boundary == "organization" and not s.organization_id:
        return organization_required()
    wanted = [
        (assignment_id, org)
        for assignment_id, org in s.assignments
        if role.boundary != "organization" or org == s.organization_id
    ]
    audit = []
    try:
        for assignment_id, org in wanted:
            rules.check_grant_ceiling(s.authority, role.name, role.permissions, role.boundary, org, "revoke")
            check_authority_over(s.authority, _subject_authority(s), "user", s.subject_id, what="change what they hold")
            details = rules.revoked_details(
                assignment_id=assignment_id, role_id=role.id, role_name=role.name, organization_id=org
            )
            audit.append(_entry("authorization", "role.revoked", s, details))
    except EngineError as exc:
        return Refusal.from_error(exc)
    ids = [assignment_id for assignment_id, _ in wanted]
    return Effect(
        "remove_role",
        f"Revokes {role.name} ({len(ids)} grant(s))."
        if ids
        else f"Nothing to revoke: the subject does not hold {role.name}.",
        values={"assignment_ids": ids, "role_id": role.id, "role_name": role.name},
        result={"removed_assignments": ids},
        audit=tuple(audit),
    )


def _group_step(s: Snapshot) -> GroupFacts | Refusal:
    if s.group is None:
        return Refusal("group_missing", "The group no longer exists.")
    return s.group


def decide_add_to_group(s: Snapshot) -> Decision:
    group = _group_step(s)
    if isinstance(group, Refusal):
        return group
    try:
        if s.subject is None:
            raise NotFound("No such user.")
        rules.check_group_join(s.is_member, s.in_group)
        rules.check_group_ceiling(s.authority, group.roles, group.organization_id, "grant")
        check_authority_over(s.authority, _subject_authority(s), "user", s.subject_id, what="change their groups")
    except EngineError as exc:
        return Refusal.from_error(exc)
    details = rules.group_member_details(group.id, group.organization_id)
    return Effect(
        "add_to_group",
        f"Adds the subject to the group {group.name}.",
        values={"group_id": group.id, "organization_id": group.organization_id},
        result=dict(details),
        strategy=STRATEGY_UNDO,
        compensation_state=COMP_PENDING,
        audit=(_entry("directory", "group.member_added", s, details),),
    )


def decide_remove_from_group(s: Snapshot) -> Decision:
    group = _group_step(s)
    if isinstance(group, Refusal):
        return group
    try:
        rules.check_group_leave(s.in_group)
    except NotFound:
        return Refusal("not_a_member", "The subject is not in this group.")
    try:
        rules.check_group_ceiling(s.authority, group.roles, group.organization_id, "revoke")
        check_authority_over(s.authority, _subject_authority(s), "user", s.subject_id, what="change their groups")
    except EngineError as exc:
        return Refusal.from_error(exc)
    details = rules.group_member_details(group.id, group.organization_id)
    return Effect(
        "remove_from_group",
        f"Takes the subject out of the group {group.name}.",
        values={"group_id": group.id, "organization_id": group.organization_id},
        result={"group_id": group.id},
        audit=(_entry("directory", "group.member_removed", s, details),),
    )


def decide_remove_membership(s: Snapshot) -> Decision:
    organization_id = s.organization_id
    if not organization_id:
        return organization_required()
    try:
        rules.check_membership_removal(s.organization_exists and s.is_member)
    except NotFound:
        return Refusal("not_a_member", "The subject is not a member of the organization.")
    audit = []
    try:
        for group in s.joined_groups:
            rules.check_group_ceiling(s.authority, group.roles, organization_id, "revoke")
        check_authority_over(s.authority, _subject_authority(s), "user", s.subject_id, what="change their memberships")
    except EngineError as exc:
        return Refusal.from_error(exc)
    for group in s.joined_groups:
        details = rules.group_member_details(group.id, organization_id) | {"reason": "membership_removed"}
        audit.append(_entry("directory", "group.member_removed", s, details))
    payload = {"membership_id": s.membership_id, "organization_id": organization_id, "user_id": s.subject_id}
    audit.append(_entry("directory", "organization.membership.removed", s, payload))
    groups = f" and {len(s.joined_groups)} of its group(s)" if s.joined_groups else ""
    return Effect(
        "remove_membership",
        f"Takes the subject out of the organization {s.organization_name or organization_id}{groups}.",
        values={
            "organization_id": organization_id,
            "membership_id": s.membership_id,
            "group_ids": [g.id for g in s.joined_groups],
        },
        result={"organization_id": organization_id},
        audit=tuple(audit),
        outbox=(OutboxEntry("organization.membership.removed", s.subject_id, organization_id, payload),),
    )


def decide_suspend_user(s: Snapshot) -> Decision:
    if s.subject_id == s.publisher_id:
        return Refusal("self_action", "A run never suspends its own accountable publisher.")
    try:
        if s.subject is None:
            raise NotFound("No such user.")
        check_authority_over(s.authority, _subject_authority(s), "user", s.subject_id, what="change their status")
        rules.check_status_change(s.subject.status, "suspended", actor_id=s.publisher_id, user_id=s.subject_id)
    except EngineError as exc:
        return Refusal.from_error(exc)
    return Effect(
        "suspend_user",
        "Suspends the subject's account.",
        values={"user_id": s.subject_id, "status": "suspended"},
        result={"status": "suspended"},
        # The writer adds what it ended (sessions, tokens, sign-in links) to the audit event's details.
        audit=(_entry("directory", "user.suspended", s, {}),),
        outbox=(OutboxEntry("user.suspended", s.subject_id, None, {"user_id": s.subject_id}),),
    )


def decide_notify(s: Snapshot) -> Decision:
    if s.subject is None:
        return Refusal("subject_missing", "The subject no longer exists.")
    if not (s.subject.email or "").strip():
        return Refusal("no_recipients", "The subject has no email address.")
    queued = s.mail_configured
    # A message on its way cannot be taken back; one never sent needs nothing undone.
    return Effect(
        "notify",
        f"Sends the notice {s.step.get('notice')!s} to {s.subject.email}"
        + ("." if queued else " (recorded, not sent: no mail server is configured)."),
        values={"to_address": s.subject.email, "notice": str(s.step.get("notice")), "workflow_name": s.workflow_name},
        result={"to": s.subject.email, "state": "queued" if queued else "not_configured"},
        strategy=STRATEGY_IMPOSSIBLE,
        compensation_state=COMP_IMPOSSIBLE if queued else COMP_NOT_NEEDED,
    )


def decide_end(s: Snapshot) -> Decision:
    return Effect("none", "Ends the run here.", ends_run=True)


def decide_approval(s: Snapshot) -> Decision:
    """Approvals are not re-checked for the publisher's authority: they change nothing themselves."""
    named = list(s.step.get("approvers") or [])
    eligible = rules.eligible_approvers(named, s.subject_id, s.approver_users)
    if not eligible:
        return Refusal(
            "no_eligible_approver",
            "None of the named approvers may decide (suspended, a guest, the subject, or gone).",
        )
    return Effect(
        "request_approval",
        f"Asks {len(eligible)} approver(s) to decide within {s.step.get('expires_in')}.",
        values={"approvers": eligible, "expires_in": s.step.get("expires_in")},
    )


def decide_wait(s: Snapshot) -> Decision:
    until = s.now + timedelta(seconds=parse_duration(str(s.step.get("duration"))))
    return Effect("wait", f"Waits {s.step.get('duration')}.", values={"until": until})


def subscription_refusal(
    subscription: SubscriptionFacts | None, subscription_id: str, operator_key: bool
) -> Refusal | None:
    """A call's endpoint: its subscription exists, is active, and its secret can be read."""
    if subscription is None or subscription.state == "deleted":
        return Refusal("subscription_missing", f"The webhook subscription {subscription_id} is gone.")
    if subscription.state == "disabled":
        return Refusal("subscription_disabled", f"The webhook subscription {subscription_id} is disabled.")
    if subscription.state == "paused":
        return Refusal(
            "subscription_paused", f"The webhook subscription {subscription_id} is paused; retried later.", False
        )
    if not operator_key:
        return Refusal("secret_unavailable", "No operator key to read the subscription's secret.")
    if not subscription.secret_readable:
        return Refusal("secret_unavailable", "The subscription's secret cannot be read with the operator key.")
    return None


def decide_call_webhook(s: Snapshot) -> Decision:
    subscription_id = str(s.step.get("subscription_id"))
    if refusal := subscription_refusal(s.subscription, subscription_id, s.operator_key):
        return refusal
    assert s.subscription is not None
    if s.subscription.egress_refusal is not None:
        category, reason = s.subscription.egress_refusal
        # Only a destination that is not a usable URL is permanent (engine/endpoints/transport.py).
        return Refusal(category, reason, category == "invalid_destination")
    return Effect(
        "call",
        f"Calls {s.subscription.destination} (signed, with the run's idempotency key).",
        values={"subscription_id": subscription_id, "destination": s.subscription.destination},
    )


DECISIONS: dict[str, Callable[[Snapshot], Decision]] = {
    "assign_role": decide_assign_role,
    "remove_role": decide_remove_role,
    "add_to_group": decide_add_to_group,
    "remove_from_group": decide_remove_from_group,
    "remove_membership": decide_remove_membership,
    "suspend_user": decide_suspend_user,
    "notify": decide_notify,
    "end": decide_end,
    "approval": decide_approval,
    "wait": decide_wait,
    "call_webhook": decide_call_webhook,
}


# The step types whose publisher is re-checked first (internal steps and calls; approvals and
# waits change nothing themselves).
RECHECKED = frozenset(DECISIONS) - {"approval", "wait"}


def decide(snapshot: Snapshot) -> Decision:
    """The whole decision of the snapshot's step: the publisher's re-check, then the step's own rules.

    The single-run executor makes the re-check before the step type's ``perform`` (which applies
    the step's own rules), the batched executor and the preview call this.
    """
    kind = str(snapshot.step.get("type"))
    if kind in RECHECKED and (refusal := publisher_refusal(snapshot)):
        return refusal
    return DECISIONS[kind](snapshot)
