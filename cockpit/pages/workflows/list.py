"""The workflows of the realm (``pages/workflows/list.html``, its table ``_table.html``) and a new
workflow (``new.html``): name, owner, approval, and an optional first definition."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromQuery
from litestar.response import Redirect, Template

from cockpit import health_cache
from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import PICKER_LIMIT, field, form_errors, may, page, targets
from cockpit.pages.workflows.editor_text import parse_text, place
from cockpit.pages.workflows.shared import READ, WRITE, display_names, flash_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import principals as directory
from engine.directory.policy import publish_approval_required
from engine.platform.errors import EngineError, Issue, ValidationFailed
from engine.workflows.catalog import create_workflow, list_workflows, revisions_waiting_for_review
from engine.workflows.models import WORKFLOW_STATES
from engine.workflows.templates import workflow_template, workflow_templates

TABLE_ID = "workflows-table"


class WorkflowListPages(Controller):
    path = "/realms/{realm:str}/workflows"
    include_in_schema = False

    # --- The list ---------------------------------------------------------------------------------

    @get("/", operation_id="workflowsPage", opt=READ | {"reads_only": True})
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        # ``state`` is a reserved handler parameter name in Litestar: read it from the query.
        state = request.query_params.get("state") or ""
        q = (q or "").strip()[:200]
        status_code = 200
        try:
            found = await list_workflows(
                db_session, principal.realm.id, state=state or None, q=q or None, cursor=cursor or None
            )
            items, next_cursor, list_error = found.items, found.next_cursor, None
        except EngineError as exc:
            items, next_cursor = [], None
            list_error = "; ".join(i.message for i in exc.issues) or exc.detail
            status_code = exc.status
        template = "pages/workflows/_table.html" if targets(request, TABLE_ID) else "pages/workflows/list.html"
        return page(
            request,
            template,
            nav="workflows",
            status_code=status_code,
            workflows=items,
            next_cursor=next_cursor,
            q=q,
            state=state,
            states=WORKFLOW_STATES,
            list_error=list_error,
            approval_floor=await publish_approval_required(db_session, principal.realm.id),
            names=await display_names(db_session, principal.realm, (w.owner_id for w in items)),
            health=await health_cache.health_of(db_session, principal.realm.id, [w.id for w in items]),
            reviews=await revisions_waiting_for_review(
                db_session, principal.realm.id, [w.id for w in items], principal.id
            )
            if may(principal, "realm.workflows.publish")
            else {},
            can_create=may(principal, "realm.workflows.write"),
            flash=flash_of(request),
        )

    # --- A new workflow ---------------------------------------------------------------------------

    async def _new(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        form: dict[str, Any] | None = None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        policy_default = await publish_approval_required(db_session, realm_id)
        users = (await directory.list_users(db_session, realm_id, status="active", limit=PICKER_LIMIT)).items
        return page(
            request,
            "pages/workflows/new.html",
            nav="workflows",
            status_code=status_code,
            users=users,
            policy_default=policy_default,
            templates=workflow_templates(),
            form=form
            or {
                "name": "",
                "description": "",
                "owner_id": principal.id,
                "requires_approval": policy_default,
                "definition": "",
                "template": "",
            },
            **context,
        )

    @get("/new", operation_id="workflowNewPage", opt=WRITE)
    async def new_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        template: FromQuery[str | None] = None,
    ) -> Template:
        """The form; ``?template=<key>`` chooses that template and suggests its name."""
        chosen = workflow_template(template or "")
        if chosen is None:
            return await self._new(request, db_session, principal)
        form = {
            "name": chosen.name,
            "description": chosen.summary,
            "owner_id": principal.id,
            "requires_approval": await publish_approval_required(db_session, principal.realm.id),
            "definition": "",
            "template": chosen.key,
        }
        return await self._new(request, db_session, principal, form=form)

    @post("/new", operation_id="workflowNewPageCreate", opt=WRITE, status_code=303)
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        data = await request.form()
        text = field(data, "definition")
        form: dict[str, Any] = {
            "name": field(data, "name"),
            "description": field(data, "description"),
            "owner_id": field(data, "owner_id"),
            # The realm policy is a floor: the page shows the box ticked and locked.
            "requires_approval": bool(field(data, "requires_approval"))
            or await publish_approval_required(db_session, principal.realm.id),
            "definition": text,
            "template": field(data, "template"),
        }
        chosen = workflow_template(form["template"]) if form["template"] else None
        parsed = parse_text(text) if text.strip() else None
        try:
            if form["template"] and chosen is None:
                raise ValidationFailed(
                    "The request is not valid.", issues=[Issue("/template", "invalid", "Choose one of the templates.")]
                )
            if chosen is not None and parsed is not None:
                raise ValidationFailed(
                    "The request is not valid.",
                    issues=[
                        Issue(
                            "/template",
                            "invalid",
                            "Choose a template or paste a definition, not both: a template opens in the editor.",
                        )
                    ],
                )
            if parsed is not None and not parsed.parsed:
                raise ValidationFailed(
                    "The request is not valid.", issues=[Issue(i.path, i.code, i.message) for i in parsed.issues]
                )
            async with db_session.begin_nested():  # an error undoes only this change
                workflow, _ = await create_workflow(
                    db_session,
                    principal.actor(request_id_of(request)),
                    name=form["name"],
                    description=form["description"],
                    owner_id=form["owner_id"] or None,
                    requires_approval=form["requires_approval"],
                    definition=parsed.value if parsed else None,
                    has_definition=parsed is not None,
                )
        except EngineError as exc:
            definition_issues = (
                parsed.issues
                if parsed is not None and not parsed.parsed
                else place([i for i in exc.issues if i.path.startswith("/definition")], text)
            )
            errors = form_errors(exc)
            if exc.issues:
                errors["error"] = "Check the fields marked below."
            return await self._new(
                request,
                db_session,
                principal,
                form=form,
                status_code=exc.status,
                definition_issues=definition_issues,
                **errors,
            )
        then = f"&template={chosen.key}" if chosen is not None else ""
        return Redirect(
            f"/realms/{principal.realm.slug}/workflows/{workflow.id}/edit?done=created{then}", status_code=303
        )
