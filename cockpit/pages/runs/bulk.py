"""Cancelling or re-running many runs at once (``pages/runs/bulk.html``; the progress fragment
``_bulk_progress.html`` asks for the next chunk by itself)."""

from __future__ import annotations

import msgspec
from litestar import Controller, post
from litestar.params import URLEncodedBody
from litestar.response import Template

from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.pages.common import page, targets, user_by_email
from cockpit.pages.runs.shared import RUN, parse_time, split_state
from cockpit.state import AnyRequest, DbSession
from engine.platform.errors import EngineError, Issue, ValidationFailed
from engine.runs import controls as run_controls
from engine.runs import run_reads
from engine.runs.read_models import BulkResult


class BulkForm(msgspec.Struct):
    """The runs list's bulk form, and each follow-up request while it works through its runs."""

    action: str = ""
    scope: str = "selected"  # selected | filter
    ids: list[str] = msgspec.field(default_factory=list)
    reason: str = ""
    state: str = ""
    workflow_id: str = ""
    subject: str = ""
    trigger_type: str = ""
    created_after: str = ""
    created_before: str = ""
    pending: str = ""  # run ids still to do, comma-separated (follow-up requests)
    total: int = 0
    matched: int = 0
    done: int = 0
    refused: int = 0


BULK_CHUNK = 50
PROGRESS_ID = "bulk-progress"  # the progress component the bulk forms swap


class RunBulkPages(Controller):
    path = "/realms/{realm:str}"
    include_in_schema = False

    # --- Bulk -------------------------------------------------------------------------------------

    @post("/runs/bulk", operation_id="runsPageBulk", opt=RUN)
    async def bulk(
        self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal, data: URLEncodedBody[BulkForm]
    ) -> Template:
        """Works through the chosen runs :data:`BULK_CHUNK` at a time; each answer shows the progress
        and, while runs remain, asks for the next part by itself (``hx-trigger="load"``; without
        JavaScript, a Continue button)."""
        actor = principal.actor(request_id_of(request))
        realm_id = principal.realm.id
        reason = data.reason.strip() or None
        error: str | None = None
        refused_rows: list[BulkResult] = []
        status_code = 200
        if data.pending or data.total:
            todo = [i for i in data.pending.split(",") if i][: run_controls.BULK_LIMIT]
            total, matched = data.total, data.matched
        else:
            todo, total, matched = [], 0, 0
            try:
                if data.action not in run_controls.BULK_ACTIONS:
                    raise ValidationFailed(
                        "The request is not valid.", issues=[Issue("/action", "invalid", "Choose cancel or re-run.")]
                    )
                if data.scope == "filter":
                    one_state, group = split_state(data.state.strip())
                    subject_id: str | None = data.subject.strip() or None
                    if subject_id and "@" in subject_id:
                        subject_id = await user_by_email(db_session, realm_id, subject_id, "/filter/subject")
                    try:
                        after, before = parse_time(data.created_after), parse_time(data.created_before)
                    except ValueError:
                        raise ValidationFailed(
                            "The request is not valid.",
                            issues=[Issue("/filter/created_after", "invalid", "times look like 2026-12-01T09:30")],
                        ) from None
                    where = run_reads.RunFilter(
                        workflow_id=data.workflow_id.strip() or None,
                        state=one_state,
                        state_group=group,
                        subject_id=subject_id,
                        trigger_type=data.trigger_type.strip() or None,
                        created_after=after,
                        created_before=before,
                    )
                    issues = where.issues("/filter/")
                    if issues:
                        raise ValidationFailed("The request is not valid.", issues=issues)
                    todo, matched = await run_controls.bulk_select(db_session, realm_id, where)
                else:
                    todo = list(dict.fromkeys(i.strip() for i in data.ids if i.strip()))
                    matched = len(todo)
                    if not todo:
                        raise ValidationFailed(
                            "The request is not valid.",
                            issues=[
                                Issue("/ids", "required", "Tick the runs to act on, or choose all matching the filter.")
                            ],
                        )
                    todo = todo[: run_controls.BULK_LIMIT]
                total = len(todo)
            except EngineError as exc:
                error = exc.detail + " " + " ".join(i.message for i in exc.issues)
                status_code = exc.status
        chunk, rest = todo[:BULK_CHUNK], todo[BULK_CHUNK:]
        done, refused = data.done, data.refused
        if chunk and error is None:
            outcome = await run_controls.bulk_action(
                db_session, actor, data.action, ids=chunk, reason=reason if data.action == "cancel" else None
            )
            for result in outcome.results:
                if result.status == "done":
                    done += 1
                else:
                    refused += 1
                    refused_rows.append(result)
        return page(
            request,
            "pages/runs/_bulk_progress.html" if targets(request, PROGRESS_ID) else "pages/runs/bulk.html",
            nav="runs",
            status_code=status_code,
            bulk={
                "action": data.action,
                "reason": data.reason,
                "pending": ",".join(rest),
                "total": total,
                "matched": matched,
                "done": done,
                "refused": refused,
                "finished": not rest,
                "refused_rows": refused_rows,
                "error": error,
                "first": not (data.pending or data.total),
            },
        )
