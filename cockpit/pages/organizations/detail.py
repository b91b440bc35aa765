"""Organization pages: the list, one organization with its members and groups, and one group.

Members and group members are live components: their add and remove forms post with htmx and
the component (``#org-members``, ``#group-members``) swaps itself, errors included; without
JavaScript the same forms are plain POSTs answered with a redirect, or with the whole page and
its errors. HTML forms cannot send DELETE, so removals are ``POST …/remove``. Permissions are
those of the API, checked in the organization of the URL: ``realm.organizations.read`` to
read, ``org.members.write`` and ``org.groups.write`` to change members and groups,
``realm.organizations.write`` to create, rename or deactivate an organization.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, page
from cockpit.state import AnyRequest, DbSession
from engine.directory import identity, roles
from engine.directory import organizations as orgs
from engine.directory import principals as directory
from engine.directory.models import Group, Organization
from engine.platform.errors import EngineError, invalid

LIST_TABLE_ID = "orgs-table"
MEMBERS_ID = "org-members"
GROUP_MEMBERS_ID = "group-members"
PICKER_LIMIT = 200

READ = {"permission": "realm.organizations.read", "org_param": "org_id"}
MEMBERS_WRITE = {"permission": "org.members.write", "org_param": "org_id"}
GROUPS_WRITE = {"permission": "org.groups.write", "org_param": "org_id"}

FLASHES = {
    "created": "Organization created.",
    "updated": "Organization saved.",
    "member-added": "Member added.",
    "member-removed": "Member removed.",
    "group-created": "Group created.",
    "group-updated": "Group saved.",
}


def targets(request: AnyRequest, element_id: str) -> bool:
    """An htmx request for one component (not a boosted page load)."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-target") == element_id


def may(principal: Principal, permission: str, organization_id: str | None = None) -> bool:
    return principal.authority is not None and principal.authority.holds(permission, organization_id)


def flash_of(request: AnyRequest) -> str | None:
    return FLASHES.get(request.query_params.get("done") or "")


async def form_of(request: AnyRequest) -> Any:
    return await request.form()


def field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


async def user_by_email(db_session: DbSession, realm_id: str, email: str, path: str = "/email") -> str:
    """The id of the realm's user with this email, or a field error at ``path``."""
    if not email.strip():
        raise invalid(path, "Enter the email of a user of the realm.", "required")
    user = await identity.user_by_email(db_session, realm_id, email)
    if user is None:
        raise invalid(path, f"No user with the email {email.strip()} in this realm.", "not_found")
    return user.id


class OrganizationsPages(Controller):
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
        groups = await orgs.all_groups(db_session, realm_id, org.id)
        realm_roles = await roles.all_roles(db_session, realm_id)
        return page(
            request,
            "pages/organizations/detail.html",
            nav="organizations",
            status_code=status_code,
            groups=groups,
            group_roles=await orgs.group_role_ids(db_session, [g.id for g in groups]),
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
                group, _ = await orgs.create_group(
                    db_session,
                    principal.actor(request_id_of(request)),
                    self._authority(principal),
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

    @staticmethod
    def _authority(principal: Principal) -> Any:
        assert principal.authority is not None  # loaded by the guard for every route with a permission
        return principal.authority

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
        members = await orgs.list_group_members(
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
        chain = await orgs.lineage(db_session, group.id)
        groups = await orgs.all_groups(db_session, realm_id, org.id)
        by_id = {g.id: g for g in groups}
        granted = await orgs.group_role_ids(db_session, chain)
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
        group = await orgs.get_group(db_session, principal.realm.id, org.id, group_id)
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
        group = await orgs.get_group(db_session, principal.realm.id, org.id, group_id)
        form = await form_of(request)
        name, parent_id = field(form, "name"), field(form, "parent_id")
        role_ids = [v for v in form.getall("role_ids", []) if isinstance(v, str) and v]
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await orgs.update_group(
                    db_session,
                    principal.actor(request_id_of(request)),
                    self._authority(principal),
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
        group = await orgs.get_group(db_session, principal.realm.id, org.id, group_id)
        form = await form_of(request)
        user_id = field(form, "user_id")
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                if not user_id:
                    raise invalid("/user_id", "Pick a member of the organization.", "required")
                await orgs.add_group_member(
                    db_session,
                    principal.actor(request_id_of(request)),
                    self._authority(principal),
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
        group = await orgs.get_group(db_session, principal.realm.id, org.id, group_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await orgs.remove_group_member(
                    db_session,
                    principal.actor(request_id_of(request)),
                    self._authority(principal),
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
