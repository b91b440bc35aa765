"""Approvals and notices (SPEC §5).

Approvals answer any credential of a user of the realm (an account-audience token or an
account session is enough): each approver sees only what involves them, and the subject of a run
(or anyone not named) gets 404. Notices are for administrators who read workflows.
"""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession, context_of
from engine.platform.clock import SYSTEM_CLOCK
from engine.runs import approval_views, approvals, notices, read_models

ACCOUNT = {"audience": "account"}


class DecideApproval(Body):
    comment: str | None = None


class DelegateApproval(Body):
    user_id: str


class ApprovalsController(Controller):
    path = REALM_BASE + "/approvals"
    tags = ["approvals"]

    @get("/", operation_id="listApprovals", opt={**ACCOUNT, "reads_only": True})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        approval_status: Annotated[str | None, QueryParameter(name="status")] = None,
        decided_by_me: FromQuery[bool] = False,
        run_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.ApprovalPage:
        """What involves me: waiting for my decision (``status=pending``), or decided by me; ``run_id``: one run's."""
        page = await approval_views.list_for_user(
            db_session,
            principal.realm.id,
            principal.id,
            status=approval_status,
            decided_by_me=decided_by_me,
            run_id=run_id,
            cursor=cursor,
            limit=limit,
        )
        return approval_views.approval_page(page)

    @get("/{approval_id:str}", operation_id="getApproval", opt={**ACCOUNT, "reads_only": True})
    async def show(
        self, approval_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Approval:
        """One approval that involves me (waiting for my decision, or decided by me)."""
        row = await approval_views.get_for_user(db_session, principal.realm.id, approval_id, principal.id)
        return approval_views.approval_view(row)

    @post("/{approval_id:str}/approve", operation_id="approveApproval", status_code=200, opt=ACCOUNT)
    async def approve(
        self,
        request: AnyRequest,
        approval_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[DecideApproval | None] = None,
    ) -> read_models.Approval:
        """Approve (the first decision wins; 409 once decided, expired or the run stopped waiting)."""
        row = await approvals.decide(
            db_session,
            principal.actor(request_id_of(request)),
            approval_id,
            approve=True,
            comment=data.comment if data else None,
            now=SYSTEM_CLOCK.now(),
        )
        return approval_views.approval_view(row)

    @post("/{approval_id:str}/reject", operation_id="rejectApproval", status_code=200, opt=ACCOUNT)
    async def reject(
        self,
        request: AnyRequest,
        approval_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: JSONBody[DecideApproval | None] = None,
    ) -> read_models.Approval:
        """Reject: the run fails permanently (approval_rejected) and undoes what it did."""
        row = await approvals.decide(
            db_session,
            principal.actor(request_id_of(request)),
            approval_id,
            approve=False,
            comment=data.comment if data else None,
            now=SYSTEM_CLOCK.now(),
        )
        return approval_views.approval_view(row)

    @post("/{approval_id:str}/delegate", operation_id="delegateApproval", status_code=200, opt=ACCOUNT)
    async def delegate(
        self,
        request: AnyRequest,
        approval_id: FromPath[str],
        data: JSONBody[DelegateApproval],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Approval:
        """Hand my decision to another eligible user of the realm (never the subject)."""
        row = await approvals.delegate(
            db_session,
            principal.actor(request_id_of(request)),
            approval_id,
            user_id=data.user_id,
            now=SYSTEM_CLOCK.now(),
            mail_configured=context_of(request.app).settings.mail is not None,
        )
        return approval_views.approval_view(row)


class NoticesController(Controller):
    path = REALM_BASE + "/notices"
    tags = ["notices"]

    @get("/", operation_id="listNotices", opt={"permission": "realm.workflows.read", "reads_only": True})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        run_id: FromQuery[str | None] = None,
        user_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.NoticePage:
        """Notices recorded by runs: to whom, their state (queued, sent, failed, not_configured), tries."""
        notices.check_filters(run_id, user_id)
        page = await notices.list_notices(
            db_session, principal.realm.id, run_id=run_id, user_id=user_id, cursor=cursor, limit=limit
        )
        return notices.notice_page(page)
