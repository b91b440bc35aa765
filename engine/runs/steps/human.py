"""``approval {approvers[], expires_in}``, ``wait {duration}`` and ``notify {notice}``.

Approvals and waits have no effect of their own: the runner records the approval (or the due
time), the run waits in ``awaiting_approval`` (or ``waiting``), and the step's attempt is written
when the wait ends. Neither is ever retried. A notice is an internal effect: its record commits
with the step; the mail goes out after the commit (engine/notices.py).
"""

from __future__ import annotations

from engine.runs.decisions import Effect
from engine.runs.notices import record_notice
from engine.runs.steps.base import APPROVAL, WAIT, Outcome, StepContext, StepType, outcome_of


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

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        notice = await record_notice(
            ctx.session,
            realm_id=ctx.run.realm_id,
            user_id=ctx.run.subject_id,
            to_address=effect.values["to_address"],
            notice=effect.values["notice"],
            workflow_id=ctx.run.workflow_id,
            workflow_name=effect.values["workflow_name"],
            run_id=ctx.run.id,
            now=ctx.now,
            mail_configured=ctx.mail_configured,
        )
        return outcome_of(effect, notice_id=notice.id)
