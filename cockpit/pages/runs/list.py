"""The runs of the realm (``/runs``) or of one workflow (``/workflows/{id}/runs``): the filters,
the table (``pages/runs/list.html``, ``_table.html`` alone for ``HX-Target: runs-table``) and
the bulk form (``_bulk.html``, posted to :mod:`cockpit.pages.runs.bulk`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from litestar import Controller, get
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Template

from cockpit.auth import CurrentPrincipal, Principal
from cockpit.pages.common import PICKER_LIMIT, may, no_user_with, page, subject_id_of, targets
from cockpit.pages.runs.shared import (
    READ_ONLY,
    STATE_GROUP_LABELS,
    TRIGGER_LABELS,
    human_duration,
    parse_time,
    people,
    split_state,
)
from cockpit.state import AnyRequest, DbSession
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import EngineError, Issue, ValidationFailed
from engine.runs import run_reads
from engine.runs.models import WorkflowRun
from engine.runs.outcome import Outcome, people_in, run_outcome, run_title
from engine.runs.states import FINISHED, RUN_STATES
from engine.workflows.catalog import list_workflows
from engine.workflows.lookup import get_workflow
from engine.workflows.models import Workflow

TABLE_ID = "runs-table"


@dataclass(frozen=True)
class RunRow:
    run: WorkflowRun
    workflow_name: str
    subject: str  # the subject's email (or id, when no longer in the directory)
    subject_name: str | None  # the subject's display name, shown first
    current_step: str | None
    duration: str | None
    finished: bool
    title: str
    outcome: Outcome


class RunListPages(Controller):
    path = "/realms/{realm:str}"
    include_in_schema = False

    # --- Lists ------------------------------------------------------------------------------------

    async def _list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        workflow: Workflow | None,
        workflow_id: str | None,
        state: str | None,
        subject: str | None,
        cursor: str | None,
        trigger_type: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
    ) -> Template:
        realm_id = principal.realm.id
        state = (state or "").strip()
        trigger_type = (trigger_type or "").strip()
        created_after = (created_after or "").strip()[:40]
        created_before = (created_before or "").strip()[:40]
        subject = (subject or "").strip()[:254]
        workflow_id = workflow.id if workflow is not None else (workflow_id or "").strip() or None
        status_code = 200
        list_error: str | None = None
        subject_note: str | None = None
        subject_id: str | None = None
        if subject:
            subject_id = await subject_id_of(db_session, realm_id, subject)
            if subject_id is None:
                subject_note = no_user_with(subject)
        items: list[run_reads.RunLine] = []
        next_cursor: str | None = None
        one_state, state_group = split_state(state)
        if subject_note is None:
            try:
                try:
                    after, before = parse_time(created_after), parse_time(created_before)
                except ValueError:
                    raise ValidationFailed(
                        "The request is not valid.",
                        issues=[Issue("query:created_after", "invalid", "times look like 2026-12-01T09:30")],
                    ) from None
                found = await run_reads.list_run_lines(
                    db_session,
                    realm_id,
                    workflow_id=workflow_id,
                    state=one_state,
                    subject_id=subject_id,
                    cursor=cursor,
                    where=run_reads.RunFilter(
                        state_group=state_group,
                        trigger_type=trigger_type or None,
                        created_after=after,
                        created_before=before,
                    ),
                )
                items, next_cursor = found.items, found.next_cursor
            except EngineError as exc:
                list_error = exc.detail + " " + "; ".join(i.message for i in exc.issues)
                status_code = exc.status
        choices = (await list_workflows(db_session, realm_id, limit=PICKER_LIMIT)).items
        names = await people(db_session, realm_id, [i for line in items for i in people_in(line.run)])
        rows = self._rows(items, {k: u.display_name or u.email for k, u in names.items()})
        base = f"/realms/{principal.realm.slug}" + (f"/workflows/{workflow.id}/runs" if workflow else "/runs")
        template = "pages/runs/_table.html" if targets(request, TABLE_ID) else "pages/runs/list.html"
        return page(
            request,
            template,
            nav="workflows" if workflow else "runs",
            status_code=status_code,
            rows=rows,
            next_cursor=next_cursor,
            workflow=workflow,
            workflow_choices=sorted(choices, key=lambda w: w.name.lower()),
            states=RUN_STATES,
            state_groups=STATE_GROUP_LABELS,
            trigger_types=TRIGGER_LABELS,
            filters={
                "state": state,
                "workflow_id": "" if workflow else (workflow_id or ""),
                "subject": subject,
                "trigger_type": trigger_type,
                "created_after": created_after,
                "created_before": created_before,
            },
            base_url=base,
            list_error=list_error,
            subject_note=subject_note,
            can_run=may(principal, "realm.workflows.run"),
            bulk_workflow_id=workflow.id if workflow else (workflow_id or ""),
        )

    @staticmethod
    def _rows(items: Sequence[run_reads.RunLine], names: dict[str, str]) -> list[RunRow]:
        moment = SYSTEM_CLOCK.now()
        rows: list[RunRow] = []
        for line in items:
            run = line.run
            finished = run.state in FINISHED
            rows.append(
                RunRow(
                    run=run,
                    workflow_name=line.workflow_name,
                    subject=line.subject,
                    subject_name=line.subject_name,
                    current_step=line.current_step,
                    duration=human_duration(run.created_at, run.finished_at if finished else moment),
                    finished=finished,
                    title=run_title(line.workflow_name, line.subject_name or line.subject),
                    outcome=run_outcome(run, names, now=moment),
                )
            )
        return rows

    @get("/runs", operation_id="runsPage", opt=READ_ONLY)
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        run_state: Annotated[str | None, QueryParameter(name="state")] = None,
        workflow_id: FromQuery[str | None] = None,
        subject: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        trigger_type: FromQuery[str | None] = None,
        created_after: FromQuery[str | None] = None,
        created_before: FromQuery[str | None] = None,
    ) -> Template:
        return await self._list(
            request,
            db_session,
            principal,
            workflow=None,
            workflow_id=workflow_id,
            state=run_state,
            subject=subject,
            cursor=cursor,
            trigger_type=trigger_type,
            created_after=created_after,
            created_before=created_before,
        )

    @get("/workflows/{workflow_id:str}/runs", operation_id="workflowRunsPage", opt=READ_ONLY)
    async def workflow_list_page(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        run_state: Annotated[str | None, QueryParameter(name="state")] = None,
        subject: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        trigger_type: FromQuery[str | None] = None,
        created_after: FromQuery[str | None] = None,
        created_before: FromQuery[str | None] = None,
    ) -> Template:
        workflow = await get_workflow(db_session, principal.realm.id, workflow_id)
        return await self._list(
            request,
            db_session,
            principal,
            workflow=workflow,
            workflow_id=None,
            state=run_state,
            subject=subject,
            cursor=cursor,
            trigger_type=trigger_type,
            created_after=created_after,
            created_before=created_before,
        )
