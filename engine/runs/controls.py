"""The operator's run controls: re-run, retry now, and bulk cancel or re-run.

- **Re-run** starts a new run of the workflow's *published* revision for the same subject and
  organization as a finished run. The starter rules are those of a manual start
  (:func:`engine.runs.require_starter`: realm.workflows.run, their own authority covering every
  step, authority over the subject, never about themselves); the workflow must be active. The
  revision does not need a manual trigger: the operator repeats what one of the workflow's own
  triggers started. The new run records ``rerun_of``; the audit event
  ``workflow.run.rerun_requested`` is written on the original.
- **Retry now** makes a run that waits for a retry (of a step or of a compensation) due at once
  (409 ``nothing_waits`` otherwise). It changes when, never what: the attempt counts and the
  policy stay as they are. Rules as for cancelling (realm.workflows.run).
- **Enable and disable** a workflow: its state (engine/workflows/catalog.py) and, with it, its
  runs in flight, paused while it is disabled and resumed when it is enabled.
- **Bulk** applies cancel or re-run to up to :data:`BULK_LIMIT` runs, named by id or by a list
  filter, each in its own savepoint: one refused run never undoes another's result.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import Authority, load_authority
from engine.directory.models import Organization, User
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, EngineError, Forbidden, Issue, NotFound, ValidationFailed
from engine.platform.ids import new_id
from engine.runs import read_models
from engine.runs.models import WorkflowRun
from engine.runs.run_reads import RunFilter, _runs_query, get_run
from engine.runs.runstore import scheduling
from engine.runs.service import (
    CATEGORY,
    StartRequest,
    cancel_run,
    published_revision,
    require_starter,
    start_run,
)
from engine.runs.states import FINISHED
from engine.workflows.catalog import set_enabled
from engine.workflows.models import Workflow

BULK_LIMIT = 1000
BULK_ACTIONS = ("cancel", "rerun")


async def set_workflow_enabled(session: AsyncSession, actor: Actor, workflow_id: str, enabled: bool) -> Workflow:
    """Enable or disable a workflow; its runs in flight resume or pause with it.

    Paused runs leave the due index (so claims never walk past them) and come back when enabled;
    compensating runs and runs asked to cancel go on: they only remove access."""
    workflow = await set_enabled(session, actor, workflow_id, enabled)
    if enabled:
        await scheduling.resume_runs(session, workflow.id)
    else:
        await scheduling.pause_runs(session, workflow.id)
    return workflow


async def rerun_run(
    session: AsyncSession, actor: Actor, run_id: str, *, authority: Authority | None = None
) -> WorkflowRun:
    """A new run of the published revision for the original's subject and organization."""
    if actor.type != "user" or actor.id is None:
        raise Forbidden("Only users start runs by hand.")
    original = await get_run(session, actor.realm_id, run_id)
    if original.state not in FINISHED:
        raise Conflict(f"The run is still {original.state}; re-run it once it has finished.", code="run_in_flight")
    if original.subject_id == actor.id:
        raise Forbidden("Nobody starts a run about themselves.", code="self_action")
    workflow = await session.get(Workflow, original.workflow_id)
    if workflow is None or workflow.realm_id != actor.realm_id:
        raise NotFound("No such workflow.")
    if workflow.state != "active":
        raise Conflict(f"The workflow is {workflow.state}; only an active workflow starts runs.")
    subject = await session.get(User, original.subject_id)
    if subject is None or subject.realm_id != actor.realm_id:
        raise Conflict("The run's subject no longer exists.", code="subject_missing")
    if original.organization_id is not None:
        org = await session.get(Organization, original.organization_id)
        if org is None or org.realm_id != actor.realm_id or org.state != "active":
            raise Conflict("The run's organization is gone or inactive.", code="organization_inactive")
    revision = await published_revision(session, workflow)
    if authority is None:
        authority = await load_authority(session, actor.realm_id, "user", actor.id)
    await require_starter(session, actor.realm_id, authority, revision, original.subject_id, original.organization_id)
    run = await start_run(
        session,
        StartRequest(
            workflow=workflow,
            revision=revision,
            subject_id=original.subject_id,
            organization_id=original.organization_id,
            trigger_type="manual",
            trigger_key=new_id("wrn"),
            input={
                "subject_id": original.subject_id,
                "organization_id": original.organization_id,
                "rerun_of": original.id,
            },
            input_version=int(revision.definition.get("schema_version", 1)),
            publisher_id=revision.published_by or actor.id,
            starter_id=actor.id,
            correlation_id=actor.request_id,
            rerun_of=original.id,
        ),
    )
    assert run is not None
    await record_audit(
        session,
        actor,
        "workflow.run.rerun_requested",
        category=CATEGORY,
        subject_type="workflow_run",
        subject_id=original.id,
        details={"rerun_id": run.id, "revision": run.revision},
    )
    return run


async def retry_now(session: AsyncSession, actor: Actor, run_id: str) -> WorkflowRun:
    """Make the run's waiting retry due now (409 ``nothing_waits`` when it waits for none)."""
    run = await get_run(session, actor.realm_id, run_id)
    moment = SYSTEM_CLOCK.now()
    updated = await scheduling.retry_now(session, run.id, actor.realm_id, now=moment)
    if updated is None:
        raise Conflict("The run is not waiting for a retry.", code="nothing_waits")
    await record_audit(
        session,
        actor,
        "workflow.run.retry_requested",
        category=CATEGORY,
        subject_type="workflow_run",
        subject_id=run.id,
        details={"was_due_at": run.due_at.isoformat() if run.due_at else None, "state": run.state},
    )
    await scheduling.notify_due(session)
    return updated


def bulk_issues(action: Any, ids: Any, where: RunFilter | None, reason: Any) -> list[Issue]:
    issues: list[Issue] = []
    if action not in BULK_ACTIONS:
        issues.append(Issue("/action", "invalid", "action is cancel or rerun"))
    if ids is None and where is None:
        issues.append(Issue("/ids", "required", "name the runs by ids or by a filter"))
    if ids is not None and where is not None:
        issues.append(Issue("/filter", "conflict", "give ids or a filter, not both"))
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            issues.append(Issue("/ids", "invalid", "ids is a list of run ids"))
        elif not ids:
            issues.append(Issue("/ids", "too_short", "name at least one run"))
        elif len(ids) > BULK_LIMIT:
            issues.append(Issue("/ids", "too_long", f"at most {BULK_LIMIT} runs at once"))
    if where is not None:
        issues.extend(where.issues("/filter/"))
    if reason is not None and (not isinstance(reason, str) or len(reason) > 500):
        issues.append(Issue("/reason", "too_long", "at most 500 characters"))
    if reason is not None and action == "rerun":
        issues.append(Issue("/reason", "not_allowed", "a reason is given for cancelling only"))
    return issues


async def bulk_select(session: AsyncSession, realm_id: str, where: RunFilter) -> tuple[list[str], int]:
    """The newest :data:`BULK_LIMIT` runs the filter matches, and how many it matches in all."""
    from sqlalchemy import func

    query = _runs_query(
        realm_id, workflow_id=where.workflow_id, state=where.state, subject_id=where.subject_id, where=where
    )
    ids = (
        (
            await session.execute(
                query.with_only_columns(col(WorkflowRun.id)).order_by(col(WorkflowRun.id).desc()).limit(BULK_LIMIT)
            )
        )
        .scalars()
        .all()
    )
    matched = len(ids)
    if matched == BULK_LIMIT:
        matched = int((await session.execute(query.with_only_columns(func.count()).order_by(None))).scalar_one())
    return list(ids), matched


async def bulk_action(
    session: AsyncSession,
    actor: Actor,
    action: str,
    *,
    ids: list[str] | None = None,
    where: RunFilter | None = None,
    reason: str | None = None,
) -> read_models.BulkOutcome:
    """Cancel or re-run many runs; one result per run: done, or refused with the problem's code.

    ``capped`` when the filter matched more runs than were acted on."""
    issues = bulk_issues(action, ids, where, reason)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    if ids is not None:
        chosen = list(dict.fromkeys(ids))
        matched = len(chosen)
    else:
        assert where is not None
        chosen, matched = await bulk_select(session, actor.realm_id, where)
    authority: Authority | None = None
    if action == "rerun" and actor.type == "user" and actor.id is not None:
        authority = await load_authority(session, actor.realm_id, "user", actor.id)
    results: list[read_models.BulkResult] = []
    for run_id in chosen:
        try:
            async with session.begin_nested():
                if action == "cancel":
                    await cancel_run(session, actor, run_id, reason=reason)
                    results.append(read_models.BulkResult(run_id=run_id, status="done"))
                else:
                    new = await rerun_run(session, actor, run_id, authority=authority)
                    results.append(read_models.BulkResult(run_id=run_id, status="done", new_run_id=new.id))
        except EngineError as exc:
            results.append(
                read_models.BulkResult(
                    run_id=run_id, status="refused", code=exc.code, status_code=exc.status, detail=exc.detail
                )
            )
    done = sum(1 for r in results if r.status == "done")
    return read_models.BulkOutcome(
        action=action,
        matched=matched,
        capped=matched > len(results),
        done=done,
        refused=len(results) - done,
        results=results,
    )
