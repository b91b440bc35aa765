"""Events for automation: how a run ended, and an approval step asked and decided.

Each is an outbox event written in the transaction of the change it reports, so it exists if and
only if the change does, and the dispatcher delivers it to the webhook subscriptions that name it
(never starting a run: these types are no trigger). Both executors of a run — the runner and the
batched fast path — take the event from :func:`run_outcome_entry`, so it has one shape whichever
wrote the outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import APPROVAL_EVENT_TYPES, RUN_OUTCOME_EVENT_TYPES, Actor, emit_event
from engine.runs.approval_models import WorkflowApproval
from engine.runs.models import WorkflowRun


@dataclass(frozen=True)
class OutboxEntry:
    """An outbox event as data: its type, what it is about, and its identifiers (the ``data``)."""

    type: str
    subject_id: str | None
    organization_id: str | None
    payload: dict[str, Any]


def run_outcome_entry(
    *,
    run_id: str,
    workflow_id: str,
    revision: int,
    subject_id: str | None,
    organization_id: str | None,
    state: str,
    error_category: str | None,
) -> OutboxEntry:
    """``workflow.run.<final state>``: the run, its workflow and revision, how it ended."""
    event_type = f"workflow.run.{state}"
    assert event_type in RUN_OUTCOME_EVENT_TYPES, state
    return OutboxEntry(
        event_type,
        subject_id,
        organization_id,
        {
            "run_id": run_id,
            "workflow_id": workflow_id,
            "revision": revision,
            "state": state,
            "error_category": None if state == "succeeded" else error_category,
        },
    )


def approval_entry(approval: WorkflowApproval, organization_id: str | None) -> OutboxEntry:
    """``workflow.approval.<requested|approved|rejected|expired>`` (a pending approval is "requested")."""
    event_type = "workflow.approval." + ("requested" if approval.status == "pending" else approval.status)
    assert event_type in APPROVAL_EVENT_TYPES, approval.status
    return OutboxEntry(
        event_type,
        approval.subject_id,
        organization_id,
        {
            "approval_id": approval.id,
            "run_id": approval.run_id,
            "workflow_id": approval.workflow_id,
            "step_id": approval.step_id,
            "status": approval.status,
            "decided_by": approval.decided_by,
        },
    )


async def write_entry(session: AsyncSession, realm_id: str, correlation_id: str, entry: OutboxEntry) -> None:
    """Write ``entry`` to the outbox with the session of the change (the run id as correlation id)."""
    actor = Actor(type="system", id=None, realm_id=realm_id, request_id=correlation_id, correlation_id=correlation_id)
    await emit_event(
        session,
        actor,
        entry.type,
        subject_id=entry.subject_id,
        organization_id=entry.organization_id,
        payload=entry.payload,
    )


async def emit_run_outcome(session: AsyncSession, run: WorkflowRun) -> None:
    """The event of a run that has just reached its final state (``run.state``)."""
    entry = run_outcome_entry(
        run_id=run.id,
        workflow_id=run.workflow_id,
        revision=run.revision,
        subject_id=run.subject_id,
        organization_id=run.organization_id,
        state=run.state,
        error_category=run.error_category,
    )
    await write_entry(session, run.realm_id, run.id, entry)


async def emit_approval_event(session: AsyncSession, approval: WorkflowApproval, run: WorkflowRun | None) -> None:
    """The event of an approval step asked or decided (approvals of role assignments have none)."""
    if approval.run_id is None:
        return
    organization_id = run.organization_id if run is not None else None
    await write_entry(session, approval.realm_id, approval.run_id, approval_entry(approval, organization_id))


__all__ = [
    "OutboxEntry",
    "approval_entry",
    "emit_approval_event",
    "emit_run_outcome",
    "run_outcome_entry",
    "write_entry",
]
