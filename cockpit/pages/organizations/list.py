"""The organizations of the realm, with a form for a new one."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromQuery
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import (
    field,
    form_errors,
    form_of,
    may,
    page,
    targets,
)
from cockpit.state import AnyRequest, DbSession
from engine.directory import organizations as orgs
from engine.platform.errors import EngineError

LIST_TABLE_ID = "orgs-table"


class OrganizationListPages(Controller):
    path = "/realms/{realm:str}/organizations"
    include_in_schema = False

    # --- The list ---------------------------------------------------------------------------------

    async def _list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        q: str | None = None,
        state: str | None = None,
        cursor: str | None = None,
        status_code: int = 200,
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        q = (q or "").strip()[:200]
        try:
            found = await orgs.list_organizations(
                db_session, principal.realm.id, q=q or None, state=state or None, cursor=cursor
            )
            items, next_cursor, list_error = found.items, found.next_cursor, None
        except EngineError as exc:
            items, next_cursor = [], None
            list_error = "; ".join(i.message for i in exc.issues) or exc.detail
            status_code = max(status_code, exc.status)
        template = (
            "pages/organizations/_table.html" if targets(request, LIST_TABLE_ID) else "pages/organizations/list.html"
        )
        return page(
            request,
            template,
            nav="organizations",
            status_code=status_code,
            organizations=items,
            next_cursor=next_cursor,
            q=q,
            state=state or "",
            states=orgs.ORGANIZATION_STATES,
            list_error=list_error,
            can_create=may(principal, "realm.organizations.write"),
            form=form or {"name": ""},
            **context,
        )

    @get("/", operation_id="organizationsPage", opt={"permission": "realm.organizations.read"})
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        # ``state`` is a reserved handler parameter name in Litestar: read it from the query.
        state = request.query_params.get("state")
        return await self._list(request, db_session, principal, q=q, state=state, cursor=cursor)

    @post("/", operation_id="organizationsPageCreate", opt={"permission": "realm.organizations.write"})
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        form = await form_of(request)
        name = field(form, "name")
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                org = await orgs.create_organization(db_session, principal.actor(request_id_of(request)), name=name)
        except EngineError as exc:
            return await self._list(
                request, db_session, principal, status_code=exc.status, form={"name": name}, **form_errors(exc)
            )
        return Redirect(f"/realms/{principal.realm.slug}/organizations/{org.id}?done=created", status_code=303)
