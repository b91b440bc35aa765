"""Self-service approval pages: "Waiting for me", "Decided by me", one approval with its decision.

Any signed-in user of the realm reaches them (an account session is enough: no second factor).
Everything is shown in names: the workflow, the subject, who started the run, and what the run
will do once approved, step by step in words. The engine decides who may see what; the subject
of a run, or anyone not named, gets 404 like an approval that does not exist.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, page
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory import accounts as directory_accounts
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import EngineError, Issue, ValidationFailed
from engine.runs import approval_links, approval_models, approval_views, approvals

ACCOUNT = {"audience": "account"}
FLASHES = {
    "approved": "Approved. The run continues with the steps below.",
    "rejected": "Rejected. The run stops and undoes what it did.",
    "delegated": "Handed on. The person you chose decides now; this request stays in your history.",
}


async def counts(db_session: DbSession, principal: Principal) -> dict[str, int]:
    realm_id = principal.realm.id
    return {
        "waiting": await approval_views.count_waiting_for(db_session, realm_id, principal.id),
        "decided": await approval_views.count_decided_by(db_session, realm_id, principal.id),
    }


class ApprovalsPages(Controller):
    path = "/realms/{realm:str}/approvals"
    include_in_schema = False

    @get("/", operation_id="approvalsWaitingPage", opt=ACCOUNT | {"reads_only": True})
    async def waiting(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        found = await approval_views.list_for_user(
            db_session, principal.realm.id, principal.id, status=approval_models.PENDING, cursor=cursor
        )
        return page(
            request,
            "pages/approvals/list.html",
            nav="approvals",
            tab="waiting",
            cards=await approval_views.approval_cards(
                db_session, principal.realm.id, found.items, now=SYSTEM_CLOCK.now()
            ),
            next_cursor=found.next_cursor,
            counts=await counts(db_session, principal),
            now=SYSTEM_CLOCK.now(),
        )

    @get("/decided", operation_id="approvalsDecidedPage", opt=ACCOUNT | {"reads_only": True})
    async def decided(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        found = await approval_views.list_for_user(
            db_session, principal.realm.id, principal.id, decided_by_me=True, cursor=cursor
        )
        return page(
            request,
            "pages/approvals/list.html",
            nav="approvals",
            tab="decided",
            cards=await approval_views.approval_cards(
                db_session, principal.realm.id, found.items, now=SYSTEM_CLOCK.now()
            ),
            next_cursor=found.next_cursor,
            counts=await counts(db_session, principal),
            now=SYSTEM_CLOCK.now(),
        )

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        approval_id: str,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        row = await approval_views.get_for_user(db_session, principal.realm.id, approval_id, principal.id)
        [card] = await approval_views.approval_cards(db_session, principal.realm.id, [row], now=SYSTEM_CLOCK.now())
        return page(
            request,
            "pages/approvals/detail.html",
            nav="approvals",
            status_code=status_code,
            card=card,
            mine=principal.id in row.approvers and row.status == approval_models.PENDING,
            flash=FLASHES.get(request.query_params.get("done") or ""),
            now=SYSTEM_CLOCK.now(),
            **context,
        )

    @get("/{approval_id:str}", operation_id="approvalPage", opt=ACCOUNT | {"reads_only": True})
    async def detail(
        self, request: AnyRequest, approval_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        return await self._detail(request, db_session, principal, approval_id)

    @post("/{approval_id:str}/decide", operation_id="approvalPageDecide", opt=ACCOUNT)
    async def decide(
        self, request: AnyRequest, approval_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        form = await request.form()
        decision = str(form.get("decision") or "")
        comment = str(form.get("comment") or "").strip() or None
        try:
            if decision not in ("approve", "reject"):
                raise ValidationFailed(
                    "Choose approve or reject.", issues=[Issue("/decision", "invalid", "approve or reject")]
                )
            await approvals.decide(
                db_session,
                principal.actor(request_id_of(request)),
                approval_id,
                approve=decision == "approve",
                comment=comment,
                now=SYSTEM_CLOCK.now(),
            )
        except EngineError as exc:
            if exc.status == 404:
                raise
            return await self._detail(
                request,
                db_session,
                principal,
                approval_id,
                status_code=exc.status,
                comment=comment or "",
                **form_errors(exc),
            )
        done = "approved" if decision == "approve" else "rejected"
        return Redirect(f"/realms/{principal.realm.slug}/approvals/{approval_id}?done={done}", status_code=303)

    @post("/{approval_id:str}/delegate", operation_id="approvalPageDelegate", opt=ACCOUNT)
    async def delegate(
        self, request: AnyRequest, approval_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        form = await request.form()
        email = str(form.get("email") or "").strip()
        try:
            target = await directory_accounts.user_by_email(db_session, principal.realm.id, email) if email else None
            if target is None:
                raise ValidationFailed(
                    "The delegation is not valid.",
                    issues=[Issue("/email", "not_found", "no user of this realm has this email address")],
                )
            await approvals.delegate(
                db_session,
                principal.actor(request_id_of(request)),
                approval_id,
                user_id=target.id,
                now=SYSTEM_CLOCK.now(),
                mail_configured=context_of(request.app).settings.mail is not None,
            )
        except EngineError as exc:
            if exc.status == 404:
                raise
            errors = form_errors(exc)
            if "user_id" in errors["field_errors"]:
                errors["field_errors"]["email"] = errors["field_errors"].pop("user_id")
            return await self._detail(
                request, db_session, principal, approval_id, status_code=exc.status, email=email, **errors
            )
        return Redirect(f"/realms/{principal.realm.slug}/approvals/{approval_id}?done=delegated", status_code=303)


class ApprovalLinkPages(Controller):
    """The one-time link in an approval notice: spent once, by the person it was sent to, after sign-in."""

    path = "/realms/{realm:str}/approval-links"
    include_in_schema = False

    @get("/{token:str}", operation_id="approvalLinkPage", opt=ACCOUNT)
    async def open(self, token: FromPath[str], db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        approval_id = await approval_links.redeem_link(
            db_session, principal.realm.id, principal.id, token, now=SYSTEM_CLOCK.now()
        )
        return Redirect(f"/realms/{principal.realm.slug}/approvals/{approval_id}", status_code=303)
