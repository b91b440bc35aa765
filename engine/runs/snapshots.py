"""The loaders of step snapshots: everything a step's decision (engine/runs/decisions.py) reads.

One function, :func:`load_snapshot`, reads what the step's type needs and nothing else, in the
caller's transaction: the single-run executor in the step's own transaction (so what it decides
on is what it writes against), the preview in a read-only one. The batched executor builds the
same snapshots from its caches (engine/runs/fastpath_forms.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import organizations
from engine.directory.authz import Authority, load_authority
from engine.directory.group_grants import inherited_roles
from engine.directory.models import (
    Group,
    GroupMember,
    Membership,
    Organization,
    Role,
    RoleAssignment,
    User,
    WebhookSubscription,
)
from engine.directory.role_assignments import holds_grant
from engine.directory.webhooks import signing_secrets
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.ids import new_id
from engine.runs import approvals
from engine.runs.decisions import (
    RECHECKED,
    ApproverFacts,
    GroupFacts,
    RoleFacts,
    Snapshot,
    SubjectFacts,
    SubscriptionFacts,
    latest_approver,
)
from engine.runs.models import WorkflowRun
from engine.workflows.models import Workflow

# Judges a call's destination: (category, reason) when the egress policy refuses it, else None.
EgressJudge = Callable[[WebhookSubscription], Awaitable[tuple[str, str] | None]]

# The step types that change what the subject holds: their decisions read the subject's authority.
_ACTS_ON_SUBJECT = frozenset(
    {"assign_role", "remove_role", "add_to_group", "remove_from_group", "remove_membership", "suspend_user"}
)


@dataclass(frozen=True)
class RunFacts:
    """What a decision reads of the run: a real run's, or the run a preview imagines."""

    id: str
    realm_id: str
    workflow_id: str
    subject_id: str
    publisher_id: str
    organization_id: str | None
    approvals: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, run: WorkflowRun) -> RunFacts:
        return cls(
            id=run.id,
            realm_id=run.realm_id,
            workflow_id=run.workflow_id,
            subject_id=run.subject_id,
            publisher_id=run.publisher_id,
            organization_id=run.organization_id,
            approvals=tuple((run.context or {}).get("approvals") or ()),
        )


async def _group(session: AsyncSession, realm_id: str, group_id: Any) -> GroupFacts | None:
    group = await session.get(Group, group_id) if isinstance(group_id, str) else None
    if group is None or group.realm_id != realm_id:
        return None
    inherited = await inherited_roles(session, group)
    return GroupFacts(
        group.id,
        group.name,
        group.organization_id,
        tuple((r.name, tuple(r.permissions), r.boundary) for r in inherited),
    )


async def load_snapshot(
    session: AsyncSession,
    run: RunFacts,
    step: Mapping[str, Any],
    *,
    now: datetime,
    authority: Authority | None = None,
    mail_configured: bool = False,
    operator_key: str | None = None,
    judge_egress: EgressJudge | None = None,
) -> Snapshot:
    """The snapshot of ``step`` for ``run``, read now. ``authority``: the publisher's, when read already.

    ``judge_egress`` judges a call's destination (the preview resolves it; a run leaves it to the
    transport, which judges it when the call is sent).
    """
    kind = str(step.get("type"))
    realm_id = run.realm_id
    organization_id = step.get("organization_id") or run.organization_id
    facts: dict[str, Any] = {}
    if kind in RECHECKED:
        publisher = await session.get(User, run.publisher_id)
        facts["publisher_active"] = publisher is not None and publisher.status == "active"
        if authority is None:
            authority = await load_authority(session, realm_id, "user", run.publisher_id, now=now)
    if kind in _ACTS_ON_SUBJECT or kind == "notify":
        subject_row = await session.get(User, run.subject_id)
        if subject_row is not None and subject_row.realm_id == realm_id:
            facts["subject"] = SubjectFacts(subject_row.email, subject_row.status)
    if kind in _ACTS_ON_SUBJECT:
        facts["subject_authority"] = await load_authority(session, realm_id, "user", run.subject_id, now=now)
    if kind in ("assign_role", "remove_role") and isinstance(step.get("role_id"), str):
        role = await session.get(Role, step["role_id"])
        if role is not None and role.realm_id == realm_id:
            facts["role"] = RoleFacts(
                role.id, role.name, tuple(role.permissions), role.boundary, role.requires_approval
            )
    role_facts: RoleFacts | None = facts.get("role")
    if kind == "assign_role" and role_facts is not None:
        grant_org = organization_id if step.get("scope") == "organization" else None
        if grant_org:
            org = await session.get(Organization, grant_org)
            facts["organization_exists"] = org is not None and org.realm_id == realm_id
            facts["organization_name"] = org.name if org is not None and org.realm_id == realm_id else None
        facts["holds_grant"] = await holds_grant(
            session, realm_id, role_facts.id, col(RoleAssignment.user_id), run.subject_id, grant_org
        )
        approver_id = latest_approver(run.approvals) if role_facts.requires_approval else None
        if approver_id:
            approver = await session.get(User, approver_id)
            facts["approver"] = ApproverFacts(
                approver_id,
                approver is not None and approver.realm_id == realm_id and approver.status == "active",
                await load_authority(session, realm_id, "user", approver_id),
            )
        facts["fresh_id"] = new_id("ras")
    if kind == "remove_role" and role_facts is not None:
        rows = await session.execute(
            select(col(RoleAssignment.id), col(RoleAssignment.organization_id)).where(
                col(RoleAssignment.realm_id) == realm_id,
                col(RoleAssignment.role_id) == role_facts.id,
                col(RoleAssignment.user_id) == run.subject_id,
            )
        )
        facts["assignments"] = tuple((assignment_id, org) for assignment_id, org in rows)
    if kind in ("add_to_group", "remove_from_group"):
        group = await _group(session, realm_id, step.get("group_id"))
        facts["group"] = group
        if group is not None:
            facts["is_member"] = await organizations.is_member(session, group.organization_id, run.subject_id)
            member = await session.get(GroupMember, (group.id, run.subject_id))
            facts["in_group"] = member is not None and member.realm_id == realm_id
    if kind == "remove_membership" and organization_id:
        org = await session.get(Organization, organization_id)
        facts["organization_exists"] = org is not None and org.realm_id == realm_id
        facts["organization_name"] = org.name if org is not None and org.realm_id == realm_id else None
        membership = (
            await session.execute(
                select(Membership).where(
                    col(Membership.organization_id) == organization_id, col(Membership.user_id) == run.subject_id
                )
            )
        ).scalar_one_or_none()
        if membership is not None and membership.realm_id == realm_id:
            facts["is_member"], facts["membership_id"] = True, membership.id
            joined = await session.execute(
                select(col(Group.id))
                .join(GroupMember, col(GroupMember.group_id) == col(Group.id))
                .where(col(GroupMember.user_id) == run.subject_id, col(Group.organization_id) == organization_id)
            )
            groups = [await _group(session, realm_id, group_id) for group_id in joined.scalars().all()]
            facts["joined_groups"] = tuple(g for g in groups if g is not None)
    if kind == "notify":
        name = await session.scalar(select(col(Workflow.name)).where(col(Workflow.id) == run.workflow_id))
        facts["workflow_name"] = name or ""
    if kind == "approval":
        facts["approver_users"] = await approvals.approver_facts(session, realm_id, list(step.get("approvers") or []))
    if kind == "call_webhook":
        facts["operator_key"] = bool(operator_key)
        facts["subscription"] = await _subscription(session, realm_id, step.get("subscription_id"), operator_key, now)
        subscription = await session.get(WebhookSubscription, step.get("subscription_id"))
        if judge_egress is not None and facts["subscription"] is not None and subscription is not None:
            verdict = await judge_egress(subscription)
            if verdict is not None:
                facts["subscription"] = _with_egress(facts["subscription"], verdict)
    return Snapshot(
        run_id=run.id,
        realm_id=realm_id,
        subject_id=run.subject_id,
        publisher_id=run.publisher_id,
        step=step,
        organization_id=organization_id,
        now=now,
        wall_now=SYSTEM_CLOCK.now(),
        # Approvals and waits never read the publisher's authority.
        authority=authority or Authority("user", run.publisher_id),
        approvals=run.approvals,
        mail_configured=mail_configured,
        **facts,
    )


def _with_egress(facts: SubscriptionFacts, verdict: tuple[str, str]) -> SubscriptionFacts:
    return SubscriptionFacts(facts.id, facts.state, facts.destination, facts.secret_readable, verdict)


async def _subscription(
    session: AsyncSession, realm_id: str, subscription_id: Any, operator_key: str | None, now: datetime
) -> SubscriptionFacts | None:
    if not isinstance(subscription_id, str):
        return None
    subscription = await session.get(WebhookSubscription, subscription_id)
    if subscription is None or subscription.realm_id != realm_id or subscription.state == "deleted":
        return None
    readable = False
    if operator_key:
        try:
            signing_secrets(subscription, operator_key, now)
            readable = True
        except crypto.SecretUnavailable:
            readable = False
    return SubscriptionFacts(subscription.id, subscription.state, subscription.destination, readable)


__all__ = ["EgressJudge", "RunFacts", "load_snapshot"]
