"""One group of an organization: its parent, its roles (own and inherited) and its members (a live
component, ``#group-members``)."""

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
)
from cockpit.pages.organizations.shared import FLASHES, GROUPS_WRITE, READ, flash_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import groups as directory_groups
from engine.directory import organizations as orgs
from engine.directory import roles
from engine.directory.group_grants import lineage
from engine.directory.groups import all_groups, get_group, group_role_ids, list_group_members
from engine.directory.models import Group, Organization
from engine.platform.errors import EngineError, invalid

GROUP_MEMBERS_ID = "group-members"


class GroupPages(Controller):
    path = "/realms/{realm:str}/organizations"
    include_in_schema = False

    # --- One group --------------------------------------------------------------------------------

    async def _group(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        org: Organization,
        group: Group,
        *,
        status_code: int = 200,
        errors: dict[str, Any] | None = None,
        forms: dict[str, Any] | None = None,
        flash: str | None = None,
    ) -> Template:
        realm_id = principal.realm.id
        await db_session.refresh(org)  # current values, also after a change that was undone
        await db_session.refresh(group)
        members = await list_group_members(
            db_session, realm_id, org.id, group.id, cursor=request.query_params.get("members_cursor") or None
        )
        can_groups = may(principal, "org.groups.write", org.id)
        context: dict[str, Any] = {
            "org": org,
            "group": group,
            "members": members.items,
            "members_next": members.next_cursor,
            "can_groups": can_groups,
            "errors": errors or {},
            "forms": forms or {},
            "flash": flash if flash is not None else flash_of(request),
        }
        if can_groups:
            in_group = {user.id for user, _ in members.items}
            org_members = await orgs.list_members(db_session, realm_id, org.id, limit=PICKER_LIMIT)
            context["candidates"] = [user for _, user in org_members.items if user.id not in in_group]
        if targets(request, GROUP_MEMBERS_ID):
            return page(
                request,
                "pages/organizations/_group_members.html",
                nav="organizations",
                status_code=status_code,
                **context,
            )
        chain = await lineage(db_session, group.id)
        groups = await all_groups(db_session, realm_id, org.id)
        by_id = {g.id: g for g in groups}
        granted = await group_role_ids(db_session, chain)
        ancestors = [by_id[gid] for gid in chain[1:] if gid in by_id]
        realm_roles = await roles.all_roles(db_session, realm_id)
        return page(
            request,
            "pages/organizations/group.html",
            nav="organizations",
            status_code=status_code,
            ancestors=ancestors,
            own_roles=granted.get(group.id, []),
            inherited=[(a, rid) for a in ancestors for rid in granted.get(a.id, [])],
            groups=[g for g in groups if g.id != group.id],
            group_names={g.id: g.name for g in groups},
            roles=realm_roles,
            roles_by_id={r.id: r for r in realm_roles},
            **context,
        )

    @get("/{org_id:str}/groups/{group_id:str}", operation_id="groupPage", opt=READ)
    async def group_page(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Template:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        group = await get_group(db_session, principal.realm.id, org.id, group_id)
        return await self._group(request, db_session, principal, org, group)

    @post("/{org_id:str}/groups/{group_id:str}", operation_id="groupPageUpdate", opt=GROUPS_WRITE)
    async def update_group(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        group = await get_group(db_session, principal.realm.id, org.id, group_id)
        form = await form_of(request)
        name, parent_id = field(form, "name"), field(form, "parent_id")
        role_ids = [v for v in form.getall("role_ids", []) if isinstance(v, str) and v]
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await directory_groups.update_group(
                    db_session,
                    principal.actor(request_id_of(request)),
                    authority_of(principal),
                    org.id,
                    group.id,
                    name=name,
                    parent_id=parent_id or None,
                    role_ids=role_ids,
                )
        except EngineError as exc:
            return await self._group(
                request,
                db_session,
                principal,
                org,
                group,
                status_code=exc.status,
                errors={"edit": form_errors(exc)},
                forms={"edit": {"name": name, "parent_id": parent_id, "role_ids": role_ids}},
            )
        return Redirect(
            f"/realms/{principal.realm.slug}/organizations/{org.id}/groups/{group.id}?done=group-updated",
            status_code=303,
        )

    @post("/{org_id:str}/groups/{group_id:str}/members", operation_id="groupPageAddMember", opt=GROUPS_WRITE)
    async def add_group_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        group = await get_group(db_session, principal.realm.id, org.id, group_id)
        form = await form_of(request)
        user_id = field(form, "user_id")
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                if not user_id:
                    raise invalid("/user_id", "Pick a member of the organization.", "required")
                await directory_groups.add_group_member(
                    db_session,
                    principal.actor(request_id_of(request)),
                    authority_of(principal),
                    org.id,
                    group.id,
                    user_id,
                )
        except EngineError as exc:
            return await self._group(
                request, db_session, principal, org, group, status_code=exc.status, errors={"members": form_errors(exc)}
            )
        return await self._after_group_change(request, db_session, principal, org, group, "member-added")

    @post(
        "/{org_id:str}/groups/{group_id:str}/members/{user_id:str}/remove",
        operation_id="groupPageRemoveMember",
        opt=GROUPS_WRITE,
    )
    async def remove_group_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        user_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        group = await get_group(db_session, principal.realm.id, org.id, group_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await directory_groups.remove_group_member(
                    db_session,
                    principal.actor(request_id_of(request)),
                    authority_of(principal),
                    org.id,
                    group.id,
                    user_id,
                )
        except EngineError as exc:
            return await self._group(
                request, db_session, principal, org, group, status_code=exc.status, errors={"members": form_errors(exc)}
            )
        return await self._after_group_change(request, db_session, principal, org, group, "member-removed")

    async def _after_group_change(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        org: Organization,
        group: Group,
        done: str,
    ) -> Response[Any]:
        if targets(request, GROUP_MEMBERS_ID):
            return await self._group(request, db_session, principal, org, group, flash=FLASHES[done])
        return Redirect(
            f"/realms/{principal.realm.slug}/organizations/{org.id}/groups/{group.id}?done={done}", status_code=303
        )
