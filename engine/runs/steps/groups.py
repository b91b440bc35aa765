"""``add_to_group {group_id}`` (undone by taking the subject out again) and ``remove_from_group {group_id}``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete

from engine.directory import organizations
from engine.directory.audit import record_audit
from engine.directory.models import Group, GroupMember
from engine.platform.errors import EngineError, NotFound
from engine.runs.models import StepAttempt
from engine.runs.states import COMP_PENDING, STRATEGY_UNDO
from engine.runs.steps.base import Outcome, StepContext, StepFailure, StepType


async def _group(ctx: StepContext) -> Group:
    group = await ctx.session.get(Group, ctx.step["group_id"])
    if group is None or group.realm_id != ctx.run.realm_id:
        raise StepFailure("group_missing", "The group no longer exists.", permanent=True)
    return group


class AddToGroup(StepType):
    name = "add_to_group"

    async def perform(self, ctx: StepContext) -> Outcome:
        group = await _group(ctx)
        try:
            await organizations.add_group_member(
                ctx.session,
                ctx.actor,
                ctx.authority,
                group.organization_id,
                group.id,
                ctx.run.subject_id,
                source_run_id=ctx.run.id,
            )
        except EngineError as exc:
            raise StepFailure.from_engine_error(exc) from exc
        return Outcome(
            result={"group_id": group.id, "organization_id": group.organization_id},
            strategy=STRATEGY_UNDO,
            compensation_state=COMP_PENDING,
        )

    async def undo(self, ctx: StepContext, attempt: StepAttempt) -> dict[str, Any]:
        group_id = (attempt.result or {}).get("group_id")
        removed = await ctx.session.execute(
            delete(GroupMember)
            .where(
                GroupMember.group_id == group_id,
                GroupMember.user_id == ctx.run.subject_id,
                GroupMember.source_run_id == ctx.run.id,
            )
            .returning(GroupMember.group_id)
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

    async def perform(self, ctx: StepContext) -> Outcome:
        group = await _group(ctx)
        try:
            await organizations.remove_group_member(
                ctx.session, ctx.actor, ctx.authority, group.organization_id, group.id, ctx.run.subject_id
            )
        except NotFound as exc:
            raise StepFailure("not_a_member", "The subject is not in this group.", permanent=True) from exc
        except EngineError as exc:
            raise StepFailure.from_engine_error(exc) from exc
        return Outcome(result={"group_id": group.id})
