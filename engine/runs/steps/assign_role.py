"""``assign_role {role_id, scope, organization_id?, expires_in?}``: grant a role; undone by revoking it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import delete

from engine.directory import roles
from engine.directory.audit import record_audit
from engine.directory.models import Role, RoleAssignment
from engine.platform.errors import EngineError
from engine.runs.models import StepAttempt
from engine.runs.states import COMP_PENDING, STRATEGY_UNDO
from engine.runs.steps.base import Outcome, StepContext, StepFailure, StepType
from engine.workflows.definitions.durations import parse_duration


def latest_approver(ctx: StepContext) -> str | None:
    """The decider of the run's latest approval step, the independent approver of a role that needs one."""
    approvals = ctx.run.context.get("approvals") or []
    for approval in reversed(approvals):
        if approval.get("status") == "approved" and approval.get("decided_by"):
            return str(approval["decided_by"])
    return None


class AssignRole(StepType):
    name = "assign_role"

    async def perform(self, ctx: StepContext) -> Outcome:
        role = await ctx.session.get(Role, ctx.step["role_id"])
        if role is None or role.realm_id != ctx.run.realm_id:
            raise StepFailure("not_found", "The role no longer exists.", permanent=True)
        organization_id = ctx.require_organization() if ctx.step.get("scope") == "organization" else None
        approver = None
        if role.requires_approval:
            approver = latest_approver(ctx)
            if approver is None:
                raise StepFailure(
                    "approval_missing",
                    f"{role.name} requires approval and no approval step decided it.",
                    permanent=True,
                )
        expires_at = None
        if ctx.step.get("expires_in"):
            expires_at = ctx.now + timedelta(seconds=parse_duration(ctx.step["expires_in"]))
        try:
            assignment = await roles.create_assignment(
                ctx.session,
                ctx.actor,
                ctx.authority,
                role_id=role.id,
                user_id=ctx.run.subject_id,
                organization_id=organization_id,
                expires_at=expires_at,
                approver_id=approver,
                source_run_id=ctx.run.id,
            )
        except EngineError as exc:
            raise StepFailure.from_engine_error(exc) from exc
        return Outcome(
            result={"assignment_id": assignment.id, "role_id": role.id, "organization_id": organization_id},
            strategy=STRATEGY_UNDO,
            compensation_state=COMP_PENDING,
        )

    async def undo(self, ctx: StepContext, attempt: StepAttempt) -> dict[str, Any]:
        assignment_id = (attempt.result or {}).get("assignment_id")
        removed = await ctx.session.execute(
            delete(RoleAssignment)
            .where(RoleAssignment.id == assignment_id, RoleAssignment.source_run_id == ctx.run.id)
            .returning(RoleAssignment.id)
        )
        if removed.scalar_one_or_none() is None:
            return {"removed": False, "reason": "already_gone"}
        await record_audit(
            ctx.session,
            ctx.actor,
            "role.revoked",
            category="authorization",
            subject_type="user",
            subject_id=ctx.run.subject_id,
            details={"assignment_id": assignment_id, "reason": "compensation"},
        )
        return {"removed": True}
