"""What a run of a revision would do to one person, step by step, judged now and written nowhere.

The preview goes through the very checks of a real run: the manual start's rules (the previewer
is a user who holds what starting needs, covers every step, outranks the subject, and is not the
subject), then for each step the snapshot loader and the decision function the executors use
(engine/runs/snapshots.py, engine/runs/decisions.py). So that a step is judged on what the steps
before it would have changed, each directory effect is written as the single-run executor writes
it — inside a savepoint that is rolled back before the preview answers. Nothing else is written:
no run, attempt, notice, approval or call; no audit or outbox event survives.

A step after an approval is judged as if the first eligible approver had approved; a step after
one that would fail is not reached. A call is judged without calling: its subscription's state,
its secret and the egress policy's verdict on its destination (resolved now, as the transport
would resolve it when sending).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor
from engine.directory.authz import load_authority
from engine.directory.models import WebhookSubscription
from engine.directory.webhooks import check_destination_async
from engine.endpoints.calls import EndpointSettings
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Forbidden
from engine.platform.ids import new_id
from engine.runs import read_models
from engine.runs.decisions import Effect, Refusal, decide
from engine.runs.models import WorkflowRun
from engine.runs.service import check_start_request, published_revision, require_starter
from engine.runs.snapshots import RunFacts, load_snapshot
from engine.runs.steps import INTERNAL, STEP_TYPES, StepContext
from engine.workflows.lookup import get_revision, get_workflow
from engine.workflows.models import WorkflowRevision

WOULD_SUCCEED, WOULD_FAIL, NOT_REACHED = "would_succeed", "would_fail", "not_reached"
# The effects the preview writes (and rolls back) so that later steps see them.
_WRITTEN = frozenset(
    {"assign_role", "remove_role", "add_to_group", "remove_from_group", "remove_membership", "suspend_user"}
)


@dataclass(frozen=True)
class PreviewSettings:
    endpoints: EndpointSettings
    mail_configured: bool = False


def _plain(value: Any) -> Any:
    """A decision's data as JSON values (times as ISO 8601)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def step_view(
    index: int, step: dict[str, Any], decision: Effect | Refusal | None, *, not_reached: str | None = None
) -> read_models.PreviewStep:
    """One step of a preview: what it would do, the refusal it would meet, or that it is not reached."""
    step_id, step_type = str(step.get("id")), str(step.get("type"))
    if isinstance(decision, Refusal):
        retried = "" if decision.permanent else " (retried later)"
        return read_models.PreviewStep(
            index=index,
            step_id=step_id,
            type=step_type,
            outcome=WOULD_FAIL,
            summary=f"Would fail{retried}: {decision.message}",
            effect=None,
            refusal=read_models.PreviewRefusal(
                category=decision.category, message=decision.message, permanent=decision.permanent
            ),
        )
    if isinstance(decision, Effect):
        return read_models.PreviewStep(
            index=index,
            step_id=step_id,
            type=step_type,
            outcome=WOULD_SUCCEED,
            summary=decision.summary,
            effect=read_models.PreviewEffect(
                kind=decision.kind,
                values=_plain(decision.values),
                result=_plain(decision.result),
                audit=[read_models.PreviewAuditEvent(type=a.type, details=_plain(a.details)) for a in decision.audit],
                ends_run=decision.ends_run,
            ),
            refusal=None,
        )
    return read_models.PreviewStep(
        index=index,
        step_id=step_id,
        type=step_type,
        outcome=NOT_REACHED,
        summary=not_reached or "Not reached: an earlier step would fail.",
        effect=None,
        refusal=None,
    )


async def _judge_egress(settings: EndpointSettings, subscription: WebhookSubscription) -> tuple[str, str] | None:
    verdict = await check_destination_async(
        subscription.destination, subscription.allow_private_network, settings.allow_private_egress
    )
    if verdict.permitted:
        return None
    code = verdict.code or "egress_denied"
    return code, verdict.reason or code


async def preview_run(
    session: AsyncSession,
    actor: Actor,
    workflow_id: str,
    *,
    subject_id: str,
    organization_id: str | None,
    revision_number: int | None,
    settings: PreviewSettings,
    now: datetime | None = None,
) -> read_models.RunPreview:
    """The preview of a run of ``workflow_id`` (its revision ``revision_number``, by default the
    published one) about ``subject_id``, as ``actor`` would start it by hand."""
    if actor.type != "user" or actor.id is None:
        raise Forbidden("Only users start runs by hand.")
    workflow = await get_workflow(session, actor.realm_id, workflow_id)
    await check_start_request(session, actor, subject_id, organization_id)
    revision: WorkflowRevision
    if revision_number is None:
        revision = await published_revision(session, workflow)
    else:
        revision = await get_revision(session, actor.realm_id, workflow.id, revision_number)
    starter = await load_authority(session, actor.realm_id, "user", actor.id)
    await require_starter(session, actor.realm_id, starter, revision, subject_id, organization_id)
    publisher_id = revision.published_by or actor.id
    moment = now or SYSTEM_CLOCK.now()
    run = WorkflowRun(
        id=new_id("wrn"),
        realm_id=actor.realm_id,
        workflow_id=workflow.id,
        revision=revision.number,
        revision_id=revision.id,
        subject_id=subject_id,
        organization_id=organization_id,
        publisher_id=publisher_id,
        trigger_type="manual",
        trigger_key="preview",
        state="running",
        context={},
        input={"subject_id": subject_id, "organization_id": organization_id},
    )
    run_actor = Actor(type="user", id=publisher_id, realm_id=actor.realm_id, request_id=run.id, correlation_id=run.id)
    steps: list[dict[str, Any]] = list(revision.definition.get("steps", []))
    views: list[read_models.PreviewStep] = []
    approvals: list[dict[str, Any]] = []
    stopped = False
    savepoint = await session.begin_nested()
    try:
        for index, step in enumerate(steps):
            if stopped:
                views.append(step_view(index, step, None))
                continue
            facts = RunFacts.of(run)
            facts = RunFacts(**{**facts.__dict__, "approvals": tuple(approvals)})
            authority = await load_authority(session, actor.realm_id, "user", publisher_id, now=moment)
            snapshot = await load_snapshot(
                session,
                facts,
                step,
                now=moment,
                authority=authority,
                mail_configured=settings.mail_configured,
                operator_key=settings.endpoints.operator_key,
                judge_egress=lambda sub: _judge_egress(settings.endpoints, sub),
            )
            decision = decide(snapshot)
            views.append(step_view(index, step, decision))
            if isinstance(decision, Refusal):
                stopped = True
                continue
            if decision.kind == "request_approval":
                # Judged as if approved: by the first eligible approver, for the steps after it.
                approvals.append(
                    {"step_id": step.get("id"), "status": "approved", "decided_by": decision.values["approvers"][0]}
                )
            step_type = STEP_TYPES[str(step.get("type"))]
            if decision.kind in _WRITTEN and step_type.kind == INTERNAL:
                ctx = StepContext(
                    session=session,
                    run=run,
                    step=step,
                    step_index=index,
                    organization_id=snapshot.organization_id,
                    actor=run_actor,
                    authority=authority,
                    now=moment,
                    snapshot=snapshot,
                )
                await step_type.write(ctx, decision)
            if decision.ends_run:
                stopped = True
                for later in range(index + 1, len(steps)):
                    views.append(step_view(later, steps[later], None, not_reached="Not reached: the run ends before."))
                break
    finally:
        await savepoint.rollback()
    failing = any(v.outcome == WOULD_FAIL for v in views)
    return read_models.RunPreview(
        workflow_id=workflow.id,
        revision=revision.number,
        subject_id=subject_id,
        organization_id=organization_id,
        publisher_id=publisher_id,
        outcome=WOULD_FAIL if failing else WOULD_SUCCEED,
        steps=views,
    )


__all__ = ["NOT_REACHED", "WOULD_FAIL", "WOULD_SUCCEED", "PreviewSettings", "preview_run", "step_view"]
