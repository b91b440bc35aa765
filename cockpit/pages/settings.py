"""Realm settings pages: the wording of the workflow notice, and the realm policy.

The template editor previews as you type: htmx posts the form to ``…/templates/preview`` and
swaps ``#template-preview`` with the notice rendered server-side, for a sample workflow, by
the same code that renders real notices. Permissions are those of the API.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, may, page
from cockpit.state import AnyRequest, DbSession
from engine.directory import notice_templates, policy, read_models
from engine.platform.errors import EngineError, ValidationFailed

NAME = notice_templates.WORKFLOW_NOTICE


def _preview_context(principal: Principal, subject: str, body: str) -> dict[str, Any]:
    try:
        rendered = notice_templates.preview(subject, body, principal.realm.name)
    except ValidationFailed as exc:
        return {"rendered": None, "preview_issues": [f"{i.path.lstrip('/')}: {i.message}" for i in exc.issues]}
    return {"rendered": rendered, "preview_issues": []}


class TemplatesPages(Controller):
    path = "/realms/{realm:str}/templates"
    include_in_schema = False

    async def _render(
        self,
        request: AnyRequest,
        principal: Principal,
        current: read_models.NoticeTemplate,
        *,
        subject: str,
        body: str,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        return page(
            request,
            "pages/settings/templates.html",
            nav="templates",
            status_code=status_code,
            notice_template=current,
            subject=subject,
            body=body,
            notices=notice_templates.NOTICE_TEXTS,
            sample=notice_templates.SAMPLE_VALUES,
            can_edit=may(principal, "realm.templates.write"),
            saved=request.query_params.get("saved"),
            **_preview_context(principal, subject, body),
            **context,
        )

    @get("/", operation_id="templatesPage", opt={"permission": "realm.workflows.read"})
    async def show(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Template:
        current = await notice_templates.get_template(db_session, principal.realm.id, NAME)
        return await self._render(request, principal, current, subject=current.subject, body=current.body)

    @post("/", operation_id="templatesPageSave", opt={"permission": "realm.templates.write"})
    async def save(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        form = await request.form()
        subject, body = str(form.get("subject") or ""), str(form.get("body") or "").replace("\r\n", "\n")
        try:
            await notice_templates.put_template(
                db_session, principal.actor(request_id_of(request)), NAME, subject=subject, body=body
            )
        except EngineError as exc:
            current = await notice_templates.get_template(db_session, principal.realm.id, NAME)
            return await self._render(
                request, principal, current, subject=subject, body=body, status_code=exc.status, **form_errors(exc)
            )
        return Redirect(f"/realms/{principal.realm.slug}/templates?saved=1", status_code=303)

    @post("/reset", operation_id="templatesPageReset", opt={"permission": "realm.templates.write"})
    async def reset(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        await notice_templates.reset_template(db_session, principal.actor(request_id_of(request)), NAME)
        return Redirect(f"/realms/{principal.realm.slug}/templates?saved=reset", status_code=303)

    @post("/preview", operation_id="templatesPagePreview", opt={"permission": "realm.workflows.read"}, status_code=200)
    async def preview(self, request: AnyRequest, principal: CurrentPrincipal) -> Template:
        """The preview component alone; changes nothing."""
        form = await request.form()
        subject, body = str(form.get("subject") or ""), str(form.get("body") or "").replace("\r\n", "\n")
        return page(
            request,
            "pages/settings/_preview.html",
            nav="templates",
            **_preview_context(principal, subject, body),
        )


class PolicyPages(Controller):
    path = "/realms/{realm:str}/policy"
    include_in_schema = False

    @get("/", operation_id="policyPage", opt={"permission": "realm.workflows.read"})
    async def show(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Template:
        return page(
            request,
            "pages/settings/policy.html",
            nav="policy",
            policy=await policy.get_policy(db_session, principal.realm.id),
            can_edit=may(principal, "realm.policy.write"),
            saved=request.query_params.get("saved") == "1",
        )

    @post("/", operation_id="policyPageSave", opt={"permission": "realm.policy.write"})
    async def save(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        form = await request.form()
        await policy.update_policy(
            db_session,
            principal.actor(request_id_of(request)),
            {"workflow_publish_approval": form.get("workflow_publish_approval") == "on"},
        )
        return Redirect(f"/realms/{principal.realm.slug}/policy?saved=1", status_code=303)
