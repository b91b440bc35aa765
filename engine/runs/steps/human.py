"""``approval {approvers[], expires_in}``, ``wait {duration}`` and ``notify {notice}``.

Approvals and waits have no effect of their own: the runner records the approval (or the due
time), the run waits in ``awaiting_approval`` (or ``waiting``), and the step's attempt is written
when the wait ends. Neither is ever retried. A notice is an internal effect: its record commits
with the step; the mail goes out after the commit (engine/notices.py).
"""

from __future__ import annotations

from sqlalchemy import select

from engine.directory.models import User
from engine.runs.notices import QUEUED, record_notice
from engine.runs.states import COMP_IMPOSSIBLE, COMP_NOT_NEEDED, STRATEGY_IMPOSSIBLE
from engine.runs.steps.base import APPROVAL, WAIT, Outcome, StepContext, StepFailure, StepType
from engine.workflows.models import Workflow


class Approval(StepType):
    name = "approval"
    kind = APPROVAL
    retried = False


class Wait(StepType):
    name = "wait"
    kind = WAIT
    retried = False


class Notify(StepType):
    name = "notify"

    async def perform(self, ctx: StepContext) -> Outcome:
        user = await ctx.session.get(User, ctx.run.subject_id)
        if user is None or user.realm_id != ctx.run.realm_id:
            raise StepFailure("subject_missing", "The subject no longer exists.", permanent=True)
        if not (user.email or "").strip():
            raise StepFailure("no_recipients", "The subject has no email address.", permanent=True)
        workflow_name = await ctx.session.scalar(select(Workflow.name).where(Workflow.id == ctx.run.workflow_id))
        notice = await record_notice(
            ctx.session,
            realm_id=ctx.run.realm_id,
            user_id=user.id,
            to_address=user.email,
            notice=str(ctx.step["notice"]),
            workflow_id=ctx.run.workflow_id,
            workflow_name=workflow_name or "",
            run_id=ctx.run.id,
            now=ctx.now,
            mail_configured=ctx.mail_configured,
        )
        # A message on its way cannot be taken back; one never sent needs nothing undone.
        return Outcome(
            result={"notice_id": notice.id, "to": user.email, "state": notice.state},
            strategy=STRATEGY_IMPOSSIBLE,
            compensation_state=COMP_IMPOSSIBLE if notice.state == QUEUED else COMP_NOT_NEEDED,
        )
