"""``add_to_group {group_id}`` (undone by taking the subject out again) and ``remove_from_group {group_id}``.

Decided by :mod:`engine.runs.decisions`; written by ``apply_group_join`` and
``apply_group_leave``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete
from sqlmodel import col

from engine.directory.audit import record_audit
from engine.directory.groups import apply_group_join, apply_group_leave
from engine.directory.models import GroupMember
from engine.runs.decisions import Effect
from engine.runs.models import StepAttempt
from engine.runs.steps.base import Outcome, StepContext, StepType, outcome_of


class AddToGroup(StepType):
    name = "add_to_group"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        await apply_group_join(
            ctx.session,
            ctx.actor,
            effect.values["group_id"],
            effect.values["organization_id"],
            ctx.run.subject_id,
            source_run_id=ctx.run.id,
        )
        return outcome_of(effect)

    async def undo(self, ctx: StepContext, attempt: StepAttempt) -> dict[str, Any]:
        group_id = (attempt.result or {}).get("group_id")
        removed = await ctx.session.execute(
            delete(GroupMember)
            .where(
                col(GroupMember.group_id) == group_id,
                col(GroupMember.user_id) == ctx.run.subject_id,
                col(GroupMember.source_run_id) == ctx.run.id,
            )
            .returning(col(GroupMember.group_id))
        )
        if removed.scalar_one_or_none() is None:
            return {"removed": False, "reason": "already_gone"}
        await record_audit(
            ctx.session,
            ctx.actor,
            "group.member_removed",
            subject_type="user",
            subject_id=ctx.run.subject_id,
            details={"group_id": group_id, "reason": "compensation"},
        )
        return {"removed": True}


class RemoveFromGroup(StepType):
    name = "remove_from_group"

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        member = await ctx.session.get(GroupMember, (effect.values["group_id"], ctx.run.subject_id))
        assert member is not None  # read in this transaction by the snapshot
        await apply_group_leave(ctx.session, ctx.actor, member, effect.values["organization_id"])
        return outcome_of(effect)
