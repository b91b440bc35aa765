"""``remove_role {role_id, organization_id?}``: revoke the subject's assignments of a role (never reversed)."""

from __future__ import annotations

from sqlalchemy import select

from engine.directory import roles
from engine.directory.models import Role, RoleAssignment
from engine.platform.errors import EngineError
from engine.runs.steps.base import Outcome, StepContext, StepFailure, StepType


class RemoveRole(StepType):
    name = "remove_role"

    async def perform(self, ctx: StepContext) -> Outcome:
        role = await ctx.session.get(Role, ctx.step["role_id"])
        if role is None or role.realm_id != ctx.run.realm_id:
            raise StepFailure("not_found", "The role no longer exists.", permanent=True)
        query = select(RoleAssignment).where(
            RoleAssignment.realm_id == ctx.run.realm_id,
            RoleAssignment.role_id == role.id,
            RoleAssignment.user_id == ctx.run.subject_id,
        )
        if role.boundary == "organization":
            query = query.where(RoleAssignment.organization_id == ctx.require_organization())
        removed: list[str] = []
        for assignment in (await ctx.session.execute(query)).scalars().all():
            try:
                await roles.revoke_assignment(
                    ctx.session, ctx.actor, ctx.authority, assignment.id, source_run_id=ctx.run.id
                )
            except EngineError as exc:
                raise StepFailure.from_engine_error(exc) from exc
            removed.append(assignment.id)
        return Outcome(result={"removed_assignments": removed})
