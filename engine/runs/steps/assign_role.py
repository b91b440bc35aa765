"""``assign_role {role_id, scope, organization_id?, expires_in?}``: grant a role; undone by revoking it.

Decided by :func:`engine.runs.decisions.decide_assign_role`; written by ``apply_assignment``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete
from sqlmodel import col

from engine.directory.audit import record_audit
from engine.directory.models import RoleAssignment
from engine.directory.role_assignments import apply_assignment
from engine.runs.decisions import Effect
from engine.runs.models import StepAttempt
from engine.runs.steps.base import Outcome, StepContext, StepType, outcome_of


class AssignRole(StepType):
    name = "assign_role"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        values = effect.values
        await apply_assignment(
            ctx.session,
            ctx.actor,
            assignment_id=values["assignment_id"],
            role_id=values["role_id"],
            role_name=values["role_name"],
            subject_type="user",
            subject_id=ctx.run.subject_id,
            organization_id=values["organization_id"],
            expires_at=values["expires_at"],
            approver_id=values["approver_id"],
            source_run_id=ctx.run.id,
        )
        return outcome_of(effect)

    async def undo(self, ctx: StepContext, attempt: StepAttempt) -> dict[str, Any]:
        assignment_id = (attempt.result or {}).get("assignment_id")
        removed = await ctx.session.execute(
            delete(RoleAssignment)
            .where(col(RoleAssignment.id) == assignment_id, col(RoleAssignment.source_run_id) == ctx.run.id)
            .returning(col(RoleAssignment.id))
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
