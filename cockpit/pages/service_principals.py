"""Service principals: the non-human callers of the API, and their tokens.

The same rules as the JSON API: reading needs ``realm.users.read``, creating one
``realm.users.write``; minting, listing and revoking their tokens ``realm.tokens.write``, and
minting or revoking acts on what the principal holds, so the caller must hold all of it (the one
rule, checked by the engine). A minted token is shown once.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import assign_role_from_form, form_errors, may, page
from cockpit.state import AnyRequest, DbSession
from engine.directory import overview, roles, tokens
from engine.directory import principals as directory
from engine.directory.models import ServicePrincipal
from engine.platform.errors import EngineError, Issue, ValidationFailed

READ = {"permission": "realm.users.read"}
WRITE = {"permission": "realm.users.write"}
TOKENS = {"permission": "realm.tokens.write"}
ROLES = {"permission": "realm.roles.write"}


class ServicePrincipalsPages(Controller):
    path = "/realms/{realm:str}/service-principals"
    include_in_schema = False

    async def _list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        cursor: str | None = None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        found = await directory.list_service_principals(db_session, principal.realm.id, cursor=cursor, limit=None)
        context.setdefault("form", {"name": "", "description": ""})
        return page(
            request,
            "pages/service_principals/list.html",
            nav="service-principals",
            status_code=status_code,
            principals=found.items,
            next_cursor=found.next_cursor,
            can_write=may(principal, "realm.users.write"),
            **context,
        )

    @get("/", operation_id="servicePrincipalsPage", opt=READ)
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        return await self._list(request, db_session, principal, cursor=cursor)

    @post("/", operation_id="servicePrincipalsPageCreate", opt=WRITE, status_code=303)
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        form = await request.form()
        values = {"name": str(form.get("name") or ""), "description": str(form.get("description") or "")}
        try:
            name = values["name"].strip()
            if not name or len(name) > 200 or len(values["description"]) > 500:
                raise ValidationFailed(
                    "The request is not valid.",
                    issues=directory_issues(name, values["description"]),
                )
            async with db_session.begin_nested():
                sp = await directory.create_service_principal(
                    db_session,
                    principal.actor(request_id_of(request)),
                    name=name,
                    description=values["description"],
                    authority=principal.authority,
                )
        except EngineError as exc:
            return await self._list(
                request, db_session, principal, status_code=exc.status, form=values, **form_errors(exc)
            )
        return Redirect(f"/realms/{principal.realm.slug}/service-principals/{sp.id}?created=1", status_code=303)

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        sp: ServicePrincipal,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        can_tokens = may(principal, "realm.tokens.write")
        held = (
            await tokens.list_tokens(db_session, principal.realm.id, service_principal_id=sp.id, limit=200)
            if can_tokens
            else None
        )
        context.setdefault("form", {"name": "", "expires_in_days": str(tokens.DEFAULT_LIFETIME_DAYS)})
        realm_id = principal.realm.id
        assignments = await overview.principal_assignments(db_session, realm_id, sp.id)
        names = await overview.principal_names(
            db_session, realm_id, {a.granted_by or "" for a in assignments} | {a.approver_id or "" for a in assignments}
        )
        authority = principal.authority
        # What the form offers: realm-wide roles this caller could hand out at all (the engine decides).
        role_choices = (
            [
                role
                for role in (await roles.list_roles(db_session, realm_id, cursor=None, limit=100)).items
                if role.boundary != "organization" and authority.can_assign(role.permissions, None)
            ]
            if authority and authority.holds("realm.roles.write")
            else []
        )
        return page(
            request,
            "pages/service_principals/detail.html",
            nav="service-principals",
            status_code=status_code,
            sp=sp,
            tokens=[tokens.token_view(t) for t in held.items] if held else [],
            can_tokens=can_tokens,
            max_days=tokens.MAX_LIFETIME_DAYS,
            created=request.query_params.get("created") == "1",
            revoked=request.query_params.get("revoked") == "1",
            assigned=request.query_params.get("assigned") == "1",
            assignments=assignments,
            names=names,
            role_choices=role_choices,
            can_assign=may(principal, "realm.roles.write"),
            **context,
        )

    @get("/{sp_id:str}", operation_id="servicePrincipalPage", opt=READ)
    async def detail(
        self, request: AnyRequest, sp_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        sp = await directory.get_service_principal(db_session, principal.realm.id, sp_id)
        return await self._detail(request, db_session, principal, sp)

    @post("/{sp_id:str}/role-assignments", operation_id="servicePrincipalPageAssignRole", opt=ROLES)
    async def assign_role(
        self,
        request: AnyRequest,
        sp_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[dict[str, str]],
    ) -> Response[Any]:
        """Assign a realm-wide role to this service principal: the grant ceiling applies (in the engine)."""
        sp = await directory.get_service_principal(db_session, principal.realm.id, sp_id)
        # Realm-wide only: the form has no scope (a service principal belongs to no organization).
        realm_wide = {"role_id": data.get("role_id") or ""}
        try:
            await assign_role_from_form(request, db_session, principal, realm_wide, service_principal_id=sp.id)
        except EngineError as exc:
            return await self._detail(request, db_session, principal, sp, status_code=exc.status, role_error=exc.detail)
        return Redirect(f"/realms/{principal.realm.slug}/service-principals/{sp.id}?assigned=1", status_code=303)

    @post("/{sp_id:str}/tokens", operation_id="servicePrincipalPageMintToken", opt=TOKENS, status_code=200)
    async def mint(
        self, request: AnyRequest, sp_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        sp = await directory.get_service_principal(db_session, principal.realm.id, sp_id)
        form = await request.form()
        values = {
            "name": str(form.get("name") or ""),
            "expires_in_days": str(form.get("expires_in_days") or "").strip(),
        }
        try:
            days = int(values["expires_in_days"]) if values["expires_in_days"] else None
        except ValueError:
            days = 0  # out of range: reported by the engine with the other issues
        try:
            async with db_session.begin_nested():
                token, row = await tokens.mint_service_principal_token(
                    db_session,
                    principal.actor(request_id_of(request)),
                    sp.id,
                    name=values["name"],
                    expires_in_days=days,
                    authority=principal.authority,
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, sp, status_code=exc.status, form=values, **form_errors(exc)
            )
        response = await self._detail(request, db_session, principal, sp, minted=tokens.minted_view(token, row))
        response.headers["Cache-Control"] = "no-store"
        return response

    @post("/{sp_id:str}/tokens/{token_id:str}/revoke", operation_id="servicePrincipalPageRevokeToken", opt=TOKENS)
    async def revoke(
        self,
        request: AnyRequest,
        sp_id: FromPath[str],
        token_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        sp = await directory.get_service_principal(db_session, principal.realm.id, sp_id)
        try:
            async with db_session.begin_nested():
                row = await tokens.revoke(
                    db_session,
                    principal.actor(request_id_of(request)),
                    token_id,
                    may_revoke_any=True,
                    authority=principal.authority,
                )
                if row.service_principal_id != sp.id:
                    raise EngineError("That token belongs to someone else.")
        except EngineError as exc:
            return await self._detail(request, db_session, principal, sp, status_code=exc.status, error=exc.detail)
        return Redirect(f"/realms/{principal.realm.slug}/service-principals/{sp.id}?revoked=1", status_code=303)


def directory_issues(name: str, description: str) -> list[Any]:
    issues = []
    if not name:
        issues.append(Issue("/name", "too_short", "must be at least 1 character(s)"))
    elif len(name) > 200:
        issues.append(Issue("/name", "too_long", "must be at most 200 characters"))
    if len(description) > 500:
        issues.append(Issue("/description", "too_long", "must be at most 500 characters"))
    return issues
