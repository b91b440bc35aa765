"""``remove_membership {organization_id?}``, ``suspend_user {}`` and ``end {}``: effects that are never reversed."""

from __future__ import annotations

from engine.directory import organizations
from engine.directory import principals as directory
from engine.platform.errors import Conflict, EngineError, NotFound
from engine.runs.steps.base import Outcome, StepContext, StepFailure, StepType


class RemoveMembership(StepType):
    name = "remove_membership"

    async def perform(self, ctx: StepContext) -> Outcome:
        organization_id = ctx.require_organization()
        try:
            await organizations.remove_member(
                ctx.session, ctx.actor, organization_id, ctx.run.subject_id, authority=ctx.authority
            )
        except NotFound as exc:
            raise StepFailure(
                "not_a_member", "The subject is not a member of the organization.", permanent=True
            ) from exc
        except EngineError as exc:
            raise StepFailure.from_engine_error(exc) from exc
        return Outcome(result={"organization_id": organization_id})


class SuspendUser(StepType):
    name = "suspend_user"

    async def perform(self, ctx: StepContext) -> Outcome:
        if ctx.run.subject_id == ctx.run.publisher_id:
            raise StepFailure("self_action", "A run never suspends its own accountable publisher.", permanent=True)
        try:
            await directory.set_user_status(
                ctx.session, ctx.actor, ctx.run.subject_id, "suspended", authority=ctx.authority
            )
        except Conflict as exc:
            raise StepFailure("conflict", exc.detail, permanent=True) from exc
        except EngineError as exc:
            raise StepFailure.from_engine_error(exc) from exc
        return Outcome(result={"status": "suspended"})


class End(StepType):
    name = "end"

    async def perform(self, ctx: StepContext) -> Outcome:
        return Outcome(ends_run=True)
