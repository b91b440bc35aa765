"""Starting runs (by hand, and for the event triggers of engine/runs/triggers.py), and cancelling them.

Reading runs is engine/runs/run_reads.py.

Seed 000 "Authority and accountability" (manual runs), "Execution and idempotency"
(cancellation, loop protection) and the run half of "Audit events" are the contract.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import load_authority, require_authority_over
from engine.directory.models import AuditEvent, Organization, User
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, EngineError, Forbidden, Issue, NotFound, ValidationFailed
from engine.platform.ids import new_id
from engine.runs.models import WorkflowRun
from engine.runs.run_reads import get_run
from engine.runs.runstore import scheduling
from engine.runs.states import FINISHED, PENDING
from engine.workflows.delegation import delegation_issues
from engine.workflows.lookup import get_workflow
from engine.workflows.models import Workflow, WorkflowRevision

MAX_DEPTH = 3
CATEGORY = "workflow"
# Issue codes of a step whose role or group no longer exists (definitions.authority.requirement_problem).
MISSING_REFERENCE_CODES = frozenset({"not_found", "group_missing"})


# --- Starting -------------------------------------------------------------------------------------


@dataclass
class StartRequest:
    workflow: Workflow
    revision: WorkflowRevision
    subject_id: str
    organization_id: str | None
    trigger_type: str
    trigger_key: str
    input: dict[str, Any]
    input_version: int
    publisher_id: str
    starter_id: str | None = None
    depth: int = 0
    parent_run_id: str | None = None
    correlation_id: str | None = None
    rerun_of: str | None = None


async def start_run(session: AsyncSession, request: StartRequest, *, notify: bool = True) -> WorkflowRun | None:
    """Insert a pending run, due now; None when this trigger already started it (idempotent).

    ``notify=False`` leaves waking the workers to the caller (one notification for many runs).
    """
    moment = SYSTEM_CLOCK.now()
    run_id = new_id("wrn")
    values = _run_row(run_id, request, moment)
    if not await scheduling.insert_runs(session, [values]):
        return None
    run = await session.get(WorkflowRun, run_id)
    assert run is not None
    actor = Actor(type="user", id=request.publisher_id, realm_id=run.realm_id, request_id=run.id, correlation_id=run.id)
    await record_audit(
        session,
        actor,
        "workflow.run.started",
        category=CATEGORY,
        subject_type="workflow_run",
        subject_id=run.id,
        details={
            "workflow_id": run.workflow_id,
            "revision": run.revision,
            "subject_id": run.subject_id,
            "trigger": run.trigger_type,
            "trigger_key": run.trigger_key,
            "starter_id": run.starter_id,
            "depth": run.depth,
            **({"rerun_of": run.rerun_of} if run.rerun_of else {}),
        },
    )
    if notify:
        await scheduling.notify_due(session)
    return run


async def start_runs(session: AsyncSession, requests: list[StartRequest]) -> list[str]:
    """Many runs at once (a schedule's firing), set-based: one INSERT for the runs, one for their
    ``workflow.run.started`` events, one notification. The same rows and events as :func:`start_run`;
    a run whose trigger already started it is left out (idempotent). Returns the ids started."""
    if not requests:
        return []
    moment = SYSTEM_CLOCK.now()
    values = []
    for request in requests:
        values.append(_run_row(new_id("wrn"), request, moment))
    started = await scheduling.insert_runs(session, values)
    events = [
        AuditEvent(
            id=new_id("aud"),
            realm_id=row["realm_id"],
            actor_type="user",
            actor_id=row["publisher_id"],
            category=CATEGORY,
            type="workflow.run.started",
            subject_type="workflow_run",
            subject_id=row["id"],
            request_id=row["id"],
            correlation_id=row["id"],
            details={
                "workflow_id": row["workflow_id"],
                "revision": row["revision"],
                "subject_id": row["subject_id"],
                "trigger": row["trigger_type"],
                "trigger_key": row["trigger_key"],
                "starter_id": row["starter_id"],
                "depth": row["depth"],
            },
        )
        for row in values
        if row["id"] in started
    ]
    if events:
        await session.execute(insert(AuditEvent).values([_audit_row(e) for e in events]))
        await scheduling.notify_due(session)
    return [str(row["id"]) for row in values if row["id"] in started]


def _audit_row(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "realm_id": event.realm_id,
        "actor_type": event.actor_type,
        "actor_id": event.actor_id,
        "category": event.category,
        "type": event.type,
        "subject_type": event.subject_type,
        "subject_id": event.subject_id,
        "request_id": event.request_id,
        "correlation_id": event.correlation_id,
        "details": event.details,
    }


async def published_revision(session: AsyncSession, workflow: Workflow) -> WorkflowRevision:
    if workflow.published_revision is None:
        raise Conflict("The workflow has no published revision.")
    revision = (
        await session.execute(
            select(WorkflowRevision).where(
                col(WorkflowRevision.workflow_id) == workflow.id,
                col(WorkflowRevision.number) == workflow.published_revision,
            )
        )
    ).scalar_one()
    return revision


SUBMISSION = re.compile(r"[0-9a-z]{26}")


async def start_manual_run(
    session: AsyncSession,
    actor: Actor,
    workflow_id: str,
    *,
    subject_id: str,
    organization_id: str | None,
    submission: str | None = None,
) -> WorkflowRun:
    """A manual run: the starter's own authority must cover every step; nobody starts one about themselves.

    ``submission``: the start form's one-time key. The same form sent twice (a double click)
    starts one run; the second answers 409 ``already_started`` (the trigger key is unique per
    workflow and subject).
    """
    if submission is not None and not SUBMISSION.fullmatch(submission):
        raise ValidationFailed(
            "The request is not valid.", issues=[Issue("/submission", "invalid", "reload the form and send it again")]
        )
    if actor.type != "user" or actor.id is None:
        raise Forbidden("Only users start runs by hand.")
    workflow = await get_workflow(session, actor.realm_id, workflow_id)
    await check_start_request(session, actor, subject_id, organization_id)
    if workflow.state != "active":
        raise Conflict(f"The workflow is {workflow.state}; only an active workflow starts runs.")
    revision = await published_revision(session, workflow)
    if not any(t.get("type") == "manual" for t in revision.definition.get("triggers", [])):
        raise Conflict("The published revision has no manual trigger.")
    authority = await load_authority(session, actor.realm_id, "user", actor.id)
    await require_starter(session, actor.realm_id, authority, revision, subject_id, organization_id)
    run = await start_run(
        session,
        StartRequest(
            workflow=workflow,
            revision=revision,
            subject_id=subject_id,
            organization_id=organization_id,
            trigger_type="manual",
            trigger_key=f"form_{submission}" if submission else new_id("wrn"),
            input={"subject_id": subject_id, "organization_id": organization_id},
            input_version=int(revision.definition.get("schema_version", 1)),
            publisher_id=revision.published_by or actor.id,
            starter_id=actor.id,
            correlation_id=actor.request_id,
        ),
    )
    if run is None:
        raise Conflict(
            "This form was sent twice: the run started once, from the first. Find it on the runs list.",
            code="already_started",
        )
    return run


MANY_AT_ONCE = 10  # the most people one manual start (and its preview) is for


def many_subjects_issues(subject_ids: list[str]) -> list[Issue]:
    """What is wrong with the people of a start for several people at once: none, the same person
    twice, or more than :data:`MANY_AT_ONCE`."""
    if not subject_ids:
        return [Issue("/subject_ids", "required", "Choose at least one person.")]
    if len(subject_ids) > MANY_AT_ONCE:
        return [
            Issue(
                "/subject_ids",
                "too_many",
                f"At most {MANY_AT_ONCE} people at once; {len(subject_ids)} were chosen.",
            )
        ]
    seen: set[str] = set()
    for index, subject_id in enumerate(subject_ids):
        if subject_id in seen:
            return [Issue(f"/subject_ids/{index}", "duplicate", "The same person is chosen twice.")]
        seen.add(subject_id)
    return []


@dataclass(frozen=True)
class StartedFor:
    """One person's result of a start for several people: their run, or why it did not start."""

    subject_id: str
    run: WorkflowRun | None = None
    refused: EngineError | None = None


async def start_manual_runs(
    session: AsyncSession,
    actor: Actor,
    workflow_id: str,
    *,
    subject_ids: list[str],
    organization_id: str | None,
) -> list[StartedFor]:
    """A manual start for up to :data:`MANY_AT_ONCE` people at once: each person's run goes through
    :func:`start_manual_run`'s rules on its own, so one refusal (a person the starter has no
    authority over, say) leaves the others started. One result per person, in the order given."""
    if issues := many_subjects_issues(subject_ids):
        raise ValidationFailed("The request is not valid.", issues=issues)
    results: list[StartedFor] = []
    for subject_id in subject_ids:
        try:
            async with session.begin_nested():  # a refusal undoes only this person's start
                run = await start_manual_run(
                    session, actor, workflow_id, subject_id=subject_id, organization_id=organization_id
                )
        except NotFound:
            raise  # the workflow itself: nothing to start for anyone
        except EngineError as exc:
            results.append(StartedFor(subject_id, refused=exc))
        else:
            results.append(StartedFor(subject_id, run=run))
    return results


async def check_start_request(
    session: AsyncSession, actor: Actor, subject_id: str, organization_id: str | None
) -> None:
    """A run started by a person (or previewed) is about a user of the realm, in an active organization of
    the realm when it names one, and never about the person themselves."""
    issues: list[Issue] = []
    subject = await session.get(User, subject_id)
    if subject is None or subject.realm_id != actor.realm_id:
        issues.append(Issue("/subject_id", "not_found", "There is no such user in this realm."))
    if organization_id is not None:
        org = await session.get(Organization, organization_id)
        if org is None or org.realm_id != actor.realm_id:
            issues.append(Issue("/organization_id", "not_found", "There is no such organization in this realm."))
        elif org.state != "active":
            issues.append(Issue("/organization_id", "inactive", "The organization is inactive."))
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    if subject_id == actor.id:
        raise Forbidden("Nobody starts a run about themselves.", code="self_action")


async def require_starter(
    session: AsyncSession,
    realm_id: str,
    authority: Any,
    revision: WorkflowRevision,
    subject_id: str,
    organization_id: str | None,
) -> None:
    """The starter rules of a run started by a person (manual start, re-run).

    The starter holds realm.workflows.run, their own authority covers every step (in the run's
    organization when it has one), and — since the run acts on the subject — they hold
    everything the subject holds.
    """
    if not authority.holds("realm.workflows.run"):
        raise Forbidden("Starting a run needs realm.workflows.run.")
    problems = await delegation_issues(session, realm_id, authority, revision.definition)
    if organization_id is not None and not problems:
        # Steps without a pinned organization act in the one given: check there exactly.
        problems = await _org_issues(session, realm_id, authority, revision.definition, organization_id)
    if problems and all(p.code in MISSING_REFERENCE_CODES for p in problems):
        # Nobody's authority is in question: what a step names is gone (a deleted role or group).
        raise Conflict(
            "A step of the published revision names something that no longer exists: publish a revision"
            " that fixes it, then start again.",
            issues=problems,
        )
    if problems:
        raise Forbidden("Your own authority must cover every step of the workflow.", issues=problems, code="forbidden")
    # The run acts with its publisher's authority: its starter must still hold all the subject holds.
    await require_authority_over(session, realm_id, authority, "user", subject_id, what="start a run about them")


async def _org_issues(
    session: AsyncSession, realm_id: str, authority: Any, definition: dict[str, Any], organization_id: str
) -> list[Issue]:
    from engine.workflows.definitions.authority import required_authority
    from engine.workflows.delegation import requirement_issue

    issues: list[Issue] = []
    for index, step in enumerate(definition.get("steps", [])):
        org = step.get("organization_id") or organization_id
        for requirement in required_authority(step):
            issue = await requirement_issue(
                session, realm_id, authority, requirement, org, f"/definition/steps/{index}"
            )
            if issue is not None:
                issues.append(issue)
                break
    return issues


# --- Cancellation ---------------------------------------------------------------------------------


async def cancel_run(session: AsyncSession, actor: Actor, run_id: str, *, reason: str | None) -> WorkflowRun:
    """Ask a run to stop; it compensates like a failure (409 when finished, compensating, or asked already)."""
    if reason is not None and len(reason) > 500:
        raise ValidationFailed(
            "The request is not valid.", issues=[Issue("/reason", "too_long", "at most 500 characters")]
        )
    run = await get_run(session, actor.realm_id, run_id)
    if run.state in FINISHED:
        raise Conflict(f"The run has finished ({run.state}).")
    if run.state == "compensating":
        raise Conflict("The run is compensating already.")
    if run.cancel_requested_at is not None:
        raise Conflict("A cancellation was requested already.")
    updated = await scheduling.request_cancel(
        session, run.id, actor.realm_id, by=actor.id or "", reason=reason, now=SYSTEM_CLOCK.now()
    )
    if updated is None:
        raise Conflict("The run can no longer be cancelled.")
    await record_audit(
        session,
        actor,
        "workflow.run.cancel_requested",
        category=CATEGORY,
        subject_type="workflow_run",
        subject_id=run.id,
        details={"reason": reason},
    )
    await scheduling.notify_due(session)
    return updated


def _run_row(run_id: str, request: StartRequest, moment: datetime) -> dict[str, Any]:
    """The row of a new pending run, due now, for one request (one insert or many)."""
    return {
        "id": run_id,
        "realm_id": request.workflow.realm_id,
        "workflow_id": request.workflow.id,
        "revision": request.revision.number,
        "revision_id": request.revision.id,
        "subject_id": request.subject_id,
        "organization_id": request.organization_id,
        "trigger_type": request.trigger_type,
        "trigger_key": request.trigger_key,
        "input": request.input,
        "input_version": request.input_version,
        "publisher_id": request.publisher_id,
        "starter_id": request.starter_id,
        "depth": request.depth,
        "parent_run_id": request.parent_run_id,
        "correlation_id": request.correlation_id,
        "rerun_of": request.rerun_of,
        "state": PENDING,
        "step_index": 0,
        "context": {},
        "due_at": moment,
        "created_at": moment,
        "updated_at": moment,
    }
