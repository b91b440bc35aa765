"""``remove_membership {organization_id?}``, ``suspend_user {}`` and ``end {}``: effects that are never reversed.

Decided by :mod:`engine.runs.decisions`; written by ``organizations.apply_member_removal`` and
``principals.apply_user_status``.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel import col

from engine.directory import organizations
from engine.directory import principals as directory
from engine.directory.models import Membership, User
from engine.runs.decisions import Effect
from engine.runs.steps.base import Outcome, StepContext, StepType, outcome_of


class RemoveMembership(StepType):
    name = "remove_membership"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        organization_id = effect.values["organization_id"]
        membership = (
            await ctx.session.execute(
                select(Membership).where(
                    col(Membership.organization_id) == organization_id, col(Membership.user_id) == ctx.run.subject_id
                )
            )
        ).scalar_one()
        await organizations.apply_member_removal(
            ctx.session, ctx.actor, organization_id, membership, ctx.run.subject_id
        )
        return outcome_of(effect)


class SuspendUser(StepType):
    name = "suspend_user"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        user = await ctx.session.get(User, ctx.run.subject_id)
        assert user is not None  # read in this transaction by the snapshot
        await directory.apply_user_status(ctx.session, ctx.actor, user, "suspended")
        return outcome_of(effect)


class End(StepType):
    name = "end"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        return outcome_of(effect)
