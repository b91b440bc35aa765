"""Self-service approval pages: "Waiting for me", "Decided by me", one approval with its decision.

Any signed-in user of the realm reaches them (an account session is enough: no second factor).
Everything is shown in names: the workflow, the subject, who started the run, and what the run
will do once approved, step by step in words. The engine decides who may see what; the subject
of a run, or anyone not named, gets 404 like an approval that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template
from sqlalchemy import func, select

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, page
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory.models import User
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import EngineError, Issue, ValidationFailed
from engine.runs import approval_links, approval_models, approval_views, approvals
from engine.runs.approval_models import WorkflowApproval
from engine.runs.models import WorkflowRun
from engine.runs.outcome import decided_then, people_in, run_outcome
from engine.workflows.models import Workflow, WorkflowRevision

ACCOUNT = {"audience": "account"}
FLASHES = {
    "approved": "Approved. The run continues with the steps below.",
    "rejected": "Rejected. The run stops and undoes what it did.",
    "delegated": "Handed on. The person you chose decides now; this request stays in your history.",
}
STATUS_WORDS = {
    "pending": "waiting for a decision",
    "approved": "approved",
    "rejected": "rejected",
    "expired": "expired without a decision",
    "cancelled": "cancelled (the run stopped)",
}


@dataclass
class ApprovalCard:
    approval: WorkflowApproval
    workflow_name: str
    subject: str
    subject_email: str
    started_by: str
    started_at: datetime | None
    run_state: str
    next_steps: list[str]
    approvers: list[str]
    decided_by: str | None
    delegations: list[str]
    # Once decided: what the decision led to, in words ("approved — then failed: …"); None while
    # pending and for a role assignment asked for by hand (no run follows it).
    led_to: str | None = None

    @property
    def status_words(self) -> str:
        return STATUS_WORDS.get(self.approval.status, self.approval.status)


async def cards(db_session: DbSession, realm_id: str, rows: list[WorkflowApproval]) -> list[ApprovalCard]:
    """Everything a list of approvals shows, in a fixed number of queries whatever its length."""
    if not rows:
        return []
    run_ids = [r.run_id for r in rows if r.run_id]
    run_rows = (await db_session.execute(select(WorkflowRun).where(WorkflowRun.id.in_(run_ids)))).scalars()  # type: ignore[attr-defined]
    runs = {r.id: r for r in run_rows}
    revision_ids = {r.revision_id for r in runs.values()}
    definitions = {
        rid: d
        for rid, d in await db_session.execute(
            select(WorkflowRevision.id, WorkflowRevision.definition).where(WorkflowRevision.id.in_(revision_ids))  # type: ignore[attr-defined]
        )
    }
    workflow_names = {
        wid: n
        for wid, n in await db_session.execute(
            select(Workflow.id, Workflow.name).where(Workflow.id.in_({r.workflow_id for r in rows if r.workflow_id}))  # type: ignore[attr-defined]
        )
    }
    people_ids: set[str] = set()
    for row in rows:
        people_ids |= {row.subject_id, *row.approvers, *(d.get("from", "") for d in row.delegations)}
        people_ids |= {d.get("to", "") for d in row.delegations}
        if row.decided_by:
            people_ids.add(row.decided_by)
        run = runs.get(row.run_id or "")
        if run is not None:
            people_ids |= {run.starter_id or "", run.publisher_id, *people_in(run)}
        if row.request:
            people_ids.add(str(row.request.get("requested_by") or ""))
    people = {
        u.id: u
        for u in (
            await db_session.execute(
                select(User).where(User.id.in_(sorted(i for i in people_ids if i)), User.realm_id == realm_id)  # type: ignore[attr-defined]
            )
        ).scalars()
    }

    def name(user_id: str | None) -> str:
        user = people.get(user_id or "")
        return user.display_name if user else "a former user"

    plans: list[tuple[list[dict[str, Any]], str | None]] = []
    for row in rows:
        if row.request is not None:  # a role assignment asked for by hand: the grant is what follows
            org = row.request.get("organization_id")
            grant = {"type": "assign_role", "role_id": row.request.get("role_id"), "organization_id": org}
            plans.append(([grant | {"scope": "organization" if org else "realm"}], org))
            continue
        run = runs.get(row.run_id or "")
        steps = list((definitions.get(run.revision_id) or {}).get("steps", [])) if run else []
        plans.append((steps[(row.step_index or 0) + 1 :], run.organization_id if run else None))
    words = await approval_views.describe_steps(db_session, realm_id, plans)
    names = {k: u.display_name or u.email for k, u in people.items()}
    moment = SYSTEM_CLOCK.now()
    out = []
    for row, described in zip(rows, words, strict=True):
        run = runs.get(row.run_id or "")
        if row.request is not None:
            started_by = f"{name(row.request.get('requested_by'))}, by hand"
        elif run is None:
            started_by = "unknown"
        elif run.starter_id:
            started_by = f"{name(run.starter_id)}, by hand"
        else:
            started_by = f"a {run.trigger_type} trigger, published by {name(run.publisher_id)}"
        subject = people.get(row.subject_id)
        led_to = None
        if row.status != approval_models.PENDING and row.request is None:
            led_to = decided_then(row.status, run_outcome(run, names, now=moment) if run is not None else None)
        out.append(
            ApprovalCard(
                approval=row,
                workflow_name=(
                    "Role assignment"
                    if row.request is not None
                    else workflow_names.get(row.workflow_id or "", "a deleted workflow")
                ),
                subject=subject.display_name if subject else "a former user",
                subject_email=subject.email if subject else "",
                started_by=started_by,
                started_at=run.created_at if run else row.created_at,
                run_state=run.state if run else "",
                next_steps=[w.text for w in described],
                approvers=[name(a) for a in row.approvers],
                decided_by=name(row.decided_by) if row.decided_by else None,
                delegations=[f"{name(d.get('from'))} handed it to {name(d.get('to'))}" for d in row.delegations],
                led_to=led_to,
            )
        )
    return out


async def counts(db_session: DbSession, principal: Principal) -> dict[str, int]:
    waiting = await approval_views.count_waiting_for(db_session, principal.realm.id, principal.id)
    decided = int(
        await db_session.scalar(
            select(func.count()).where(
                WorkflowApproval.realm_id == principal.realm.id, WorkflowApproval.decided_by == principal.id
            )
        )
        or 0
    )
    return {"waiting": waiting, "decided": decided}


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
            cards=await cards(db_session, principal.realm.id, found.items),
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
            cards=await cards(db_session, principal.realm.id, found.items),
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
        [card] = await cards(db_session, principal.realm.id, [row])
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
            target = await db_session.scalar(
                select(User.id).where(User.realm_id == principal.realm.id, func.lower(User.email) == email.lower())
            )
            if not email or target is None:
                raise ValidationFailed(
                    "The delegation is not valid.",
                    issues=[Issue("/email", "not_found", "no user of this realm has this email address")],
                )
            await approvals.delegate(
                db_session,
                principal.actor(request_id_of(request)),
                approval_id,
                user_id=target,
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
