"""One organization: its name and state, its members (a live component, ``#org-members``) and its
groups, with a form for a new group."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import (
    PICKER_LIMIT,
    authority_of,
    field,
    form_errors,
    form_of,
    may,
    page,
    targets,
    user_by_email,
)
from cockpit.pages.organizations.shared import FLASHES, GROUPS_WRITE, MEMBERS_WRITE, READ, flash_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import groups as directory_groups
from engine.directory import organizations as orgs
from engine.directory import principals as directory
from engine.directory import roles
from engine.directory.groups import all_groups, group_role_ids
from engine.directory.models import Organization
from engine.platform.errors import EngineError

MEMBERS_ID = "org-members"


class OrganizationPages(Controller):
    path = "/realms/{realm:str}/organizations"
    include_in_schema = False

    # --- One organization -------------------------------------------------------------------------

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        org: Organization,
        *,
        status_code: int = 200,
        errors: dict[str, Any] | None = None,
        forms: dict[str, Any] | None = None,
        flash: str | None = None,
    ) -> Template:
        realm_id = principal.realm.id
        await db_session.refresh(org)  # current values, also after a change that was undone
        members = await orgs.list_members(
            db_session, realm_id, org.id, cursor=request.query_params.get("members_cursor") or None
        )
        can_members = may(principal, "org.members.write", org.id)
        context: dict[str, Any] = {
            "org": org,
            "members": members.items,
            "members_next": members.next_cursor,
            "can_members": can_members,
            "errors": errors or {},
            "forms": forms or {},
            "flash": flash if flash is not None else flash_of(request),
        }
        if can_members:
            users = await directory.list_users(db_session, realm_id, status="active", limit=PICKER_LIMIT)
            context["users"] = users.items
        if targets(request, MEMBERS_ID):
            return page(
                request, "pages/organizations/_members.html", nav="organizations", status_code=status_code, **context
            )
        groups = await all_groups(db_session, realm_id, org.id)
        realm_roles = await roles.all_roles(db_session, realm_id)
        return page(
            request,
            "pages/organizations/detail.html",
            nav="organizations",
            status_code=status_code,
            groups=groups,
            group_roles=await group_role_ids(db_session, [g.id for g in groups]),
            group_names={g.id: g.name for g in groups},
            roles=realm_roles,
            role_names={r.id: r.name for r in realm_roles},
            can_edit=may(principal, "realm.organizations.write"),
            can_groups=may(principal, "org.groups.write", org.id),
            **context,
        )

    @get("/{org_id:str}", operation_id="organizationPage", opt=READ)
    async def detail(
        self, request: AnyRequest, org_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        return await self._detail(request, db_session, principal, org)

    @post("/{org_id:str}", operation_id="organizationPageUpdate", opt={"permission": "realm.organizations.write"})
    async def update(
        self, request: AnyRequest, org_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        form = await form_of(request)
        name, state = field(form, "name"), field(form, "state")
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await orgs.update_organization(
                    db_session, principal.actor(request_id_of(request)), org.id, name=name, state=state or None
                )
        except EngineError as exc:
            return await self._detail(
                request,
                db_session,
                principal,
                org,
                status_code=exc.status,
                errors={"edit": form_errors(exc)},
                forms={"edit": {"name": name, "state": state}},
            )
        return Redirect(f"/realms/{principal.realm.slug}/organizations/{org.id}?done=updated", status_code=303)

    @post("/{org_id:str}/members", operation_id="organizationPageAddMember", opt=MEMBERS_WRITE)
    async def add_member(
        self, request: AnyRequest, org_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        form = await form_of(request)
        email = field(form, "email")
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                user_id = await user_by_email(db_session, principal.realm.id, email)
                await orgs.add_member(
                    db_session, principal.actor(request_id_of(request)), org.id, user_id, authority=principal.authority
                )
        except EngineError as exc:
            return await self._detail(
                request,
                db_session,
                principal,
                org,
                status_code=exc.status,
                errors={"members": form_errors(exc)},
                forms={"members": {"email": email}},
            )
        return await self._after_change(request, db_session, principal, org, MEMBERS_ID, "member-added")

    @post("/{org_id:str}/members/{user_id:str}/remove", operation_id="organizationPageRemoveMember", opt=MEMBERS_WRITE)
    async def remove_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        user_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await orgs.remove_member(
                    db_session,
                    principal.actor(request_id_of(request)),
                    org.id,
                    user_id,
                    authority=principal.authority,
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, org, status_code=exc.status, errors={"members": form_errors(exc)}
            )
        return await self._after_change(request, db_session, principal, org, MEMBERS_ID, "member-removed")

    async def _after_change(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        org: Organization,
        component: str,
        done: str,
    ) -> Response[Any]:
        if targets(request, component):
            return await self._detail(request, db_session, principal, org, flash=FLASHES[done])
        return Redirect(f"/realms/{principal.realm.slug}/organizations/{org.id}?done={done}", status_code=303)

    @post("/{org_id:str}/groups", operation_id="organizationPageCreateGroup", opt=GROUPS_WRITE)
    async def create_group(
        self, request: AnyRequest, org_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        form = await form_of(request)
        name, parent_id = field(form, "name"), field(form, "parent_id")
        role_ids = [v for v in form.getall("role_ids", []) if isinstance(v, str) and v]
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                group, _ = await directory_groups.create_group(
                    db_session,
                    principal.actor(request_id_of(request)),
                    authority_of(principal),
                    org.id,
                    name=name,
                    parent_id=parent_id or None,
                    role_ids=role_ids,
                )
        except EngineError as exc:
            return await self._detail(
                request,
                db_session,
                principal,
                org,
                status_code=exc.status,
                errors={"groups": form_errors(exc)},
                forms={"groups": {"name": name, "parent_id": parent_id, "role_ids": role_ids}},
            )
        return Redirect(
            f"/realms/{principal.realm.slug}/organizations/{org.id}/groups/{group.id}?done=group-created",
            status_code=303,
        )
