"""Event triggers: the outbox's events start the runs of the active workflows whose published
revision has a matching ``event`` trigger (seed 000 "Execution and idempotency": loop protection).

The events are then fanned out to webhook subscriptions (engine/endpoints/deliveries.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import TRIGGER_EVENT_TYPES, Actor, record_audit
from engine.directory.models import OutboxEvent
from engine.endpoints.deliveries import fan_out
from engine.platform.clock import SYSTEM_CLOCK
from engine.runs.models import WorkflowRun
from engine.runs.service import CATEGORY, MAX_DEPTH, StartRequest, start_run
from engine.workflows.models import Workflow, WorkflowRevision


def _matches(trigger: dict[str, Any], event: OutboxEvent) -> bool:
    if trigger.get("type") != "event" or event.type not in (trigger.get("event_types") or []):
        return False
    pinned = trigger.get("organization_id")
    return pinned is None or pinned == event.organization_id


async def dispatch_outbox(session: AsyncSession, *, limit: int = 100) -> int:
    """Start runs for pending outbox events, in this one transaction (an error rolls back the batch).

    Loop protection: an event caused by a run of a workflow never triggers that same workflow, and
    a run caused by another workflow's run is one level deeper; deeper than 3 is not started. Both
    are audited ``workflow.trigger.suppressed`` (reason WORKFLOW_LOOP).
    """
    events = (
        (
            await session.execute(
                select(OutboxEvent)
                .where(col(OutboxEvent.dispatched_at).is_(None))
                .order_by(col(OutboxEvent.id))
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        )
        .scalars()
        .all()
    )
    if not events:
        return 0
    realms = {e.realm_id for e in events}
    workflows = (
        await session.execute(
            select(Workflow, WorkflowRevision)
            .join(
                WorkflowRevision,
                (col(WorkflowRevision.workflow_id) == col(Workflow.id))
                & (col(WorkflowRevision.number) == col(Workflow.published_revision)),
            )
            .where(col(Workflow.realm_id).in_(realms), col(Workflow.state) == "active")
        )
    ).all()
    moment = SYSTEM_CLOCK.now()
    for event in events:
        event.dispatched_at = moment
        if event.type not in TRIGGER_EVENT_TYPES:
            continue  # a run's outcome or an approval: delivered to webhooks, never a trigger
        parent: WorkflowRun | None = None
        if event.correlation_id and event.correlation_id.startswith("wrn_"):
            # Correlation ids are made by the engine only (request ids are never the caller's), so a
            # run id here means a run caused the event; a run of another realm never counts.
            parent = await session.get(WorkflowRun, event.correlation_id)
            if parent is not None and parent.realm_id != event.realm_id:
                parent = None
        # Steps act on users only: an event about a service principal (or anything else) starts nothing.
        subject = event.subject_id if event.subject_id and event.subject_id.startswith("usr_") else None
        for workflow, revision in workflows:
            if workflow.realm_id != event.realm_id or subject is None:
                continue
            if not any(_matches(t, event) for t in revision.definition.get("triggers", [])):
                continue
            depth = parent.depth + 1 if parent is not None else 0
            if parent is not None and (parent.workflow_id == workflow.id or depth > MAX_DEPTH):
                await record_audit(
                    session,
                    Actor.system(event.realm_id, request_id=event.correlation_id),
                    "workflow.trigger.suppressed",
                    category=CATEGORY,
                    subject_type="workflow",
                    subject_id=workflow.id,
                    details={
                        "reason": "WORKFLOW_LOOP",
                        "event_id": event.id,
                        "event_type": event.type,
                        "parent_run_id": parent.id,
                        "depth": depth,
                    },
                )
                continue
            await start_run(
                session,
                StartRequest(
                    workflow=workflow,
                    revision=revision,
                    subject_id=subject,
                    organization_id=event.organization_id,
                    trigger_type="event",
                    trigger_key=event.id,
                    input={
                        "event_id": event.id,
                        "event_type": event.type,
                        "subject_id": event.subject_id,
                        "organization_id": event.organization_id,
                    },
                    input_version=event.event_version,
                    publisher_id=revision.published_by or workflow.created_by or "",
                    depth=depth,
                    parent_run_id=parent.id if parent else None,
                    correlation_id=event.correlation_id or event.id,
                ),
            )
    # Webhook fan-out shares the transaction: an error rolls it back with the rest of the batch.
    await fan_out(session, events)
    await session.flush()
    return len(events)
