"""``remove_role {role_id, organization_id?}``: revoke the subject's assignments of a role (never reversed).

Decided by :func:`engine.runs.decisions.decide_remove_role`; written by ``apply_revocation``.
"""

from __future__ import annotations

from engine.directory.models import RoleAssignment
from engine.directory.role_assignments import apply_revocation
from engine.runs.decisions import Effect
from engine.runs.steps.base import Outcome, StepContext, StepType, outcome_of


class RemoveRole(StepType):
    name = "remove_role"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        for assignment_id in effect.values["assignment_ids"]:
            assignment = await ctx.session.get(RoleAssignment, assignment_id)
            assert assignment is not None  # read in this transaction by the snapshot
            await apply_revocation(ctx.session, ctx.actor, assignment, effect.values["role_name"])
        return outcome_of(effect)
