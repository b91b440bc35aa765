"""Users pages: find and create people, see what they hold, suspend and reactivate them.

The list filters as you type (htmx asks for the table alone, ``HX-Target: users-table``); the
status box on a user's page posts with htmx and swaps itself. Without JavaScript both are plain
GET and POST forms. Permissions are those of the API: ``realm.users.read|write|suspend``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, URLEncodedBody
from litestar.response import Redirect, Template

from cockpit.api.common import check, email_issue, text_issue
from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import assign_role_from_form, form_errors, may, page, targets
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory import organizations, overview, roles
from engine.directory import principals as directory
from engine.directory.accounts import password_issues
from engine.directory.models import User
from engine.platform.errors import EngineError

TABLE_ID = "users-table"
STATUS_ID = "user-status"


class CreateUserForm(msgspec.Struct):
    email: str = ""
    display_name: str = ""
    guest: str = ""
    password: str = ""


class UsersPages(Controller):
    path = "/realms/{realm:str}/users"
    include_in_schema = False

    async def _list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        q: str | None,
        status: str | None,
        cursor: str | None,
        status_code: int = 200,
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        q = (q or "").strip()[:200]
        status = status or None
        try:
            users_page = await directory.list_users(db_session, principal.realm.id, q=q, status=status, cursor=cursor)
            items, next_cursor, list_error = users_page.items, users_page.next_cursor, None
        except EngineError as exc:
            items, next_cursor, list_error = [], None, exc.detail + " " + "; ".join(i.message for i in exc.issues)
            status_code = max(status_code, exc.status)
        template = "pages/users/_table.html" if targets(request, TABLE_ID) else "pages/users/list.html"
        return page(
            request,
            template,
            nav="users",
            status_code=status_code,
            users=items,
            next_cursor=next_cursor,
            q=q,
            status=status or "",
            list_error=list_error,
            can_create=may(principal, "realm.users.write"),
            form=form or {"email": "", "display_name": "", "guest": False},
            **context,
        )

    @get("/", operation_id="usersPage", opt={"permission": "realm.users.read"})
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        status: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        return await self._list(request, db_session, principal, q=q, status=status, cursor=cursor)

    @post("/", operation_id="usersPageCreate", opt={"permission": "realm.users.write"}, status_code=303)
    async def create(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[CreateUserForm],
    ) -> Response[Any]:
        password = data.password or None
        form = {"email": data.email, "display_name": data.display_name, "guest": bool(data.guest)}
        try:
            check(
                email_issue("/email", data.email)
                + text_issue("/display_name", data.display_name)
                + password_issues("/password", password)
            )
            user = await directory.create_user(
                db_session,
                principal.actor(request_id_of(request)),
                email=data.email.strip(),
                display_name=data.display_name.strip(),
                guest=bool(data.guest),
                password=password,
                authority=principal.authority,
            )
        except EngineError as exc:
            return await self._list(
                request,
                db_session,
                principal,
                q=None,
                status=None,
                cursor=None,
                status_code=exc.status,
                form=form,
                **(form_errors(exc) | ({"error": "Check the fields marked below."} if exc.issues else {})),
            )
        return Redirect(f"/realms/{principal.realm.slug}/users/{user.id}?created=1", status_code=303)

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        user: User,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        if targets(request, STATUS_ID):
            return page(
                request,
                "pages/users/_status.html",
                nav="users",
                status_code=status_code,
                user=user,
                can_suspend=may(principal, "realm.users.suspend"),
                **context,
            )
        realm_id = principal.realm.id
        assignments = await overview.user_assignments(db_session, realm_id, user.id)
        names = await overview.principal_names(
            db_session, realm_id, {a.granted_by or "" for a in assignments} | {a.approver_id or "" for a in assignments}
        )
        memberships = await overview.user_memberships(db_session, realm_id, user.id)
        authority = principal.authority
        member_of = {m.organization_id for m in memberships}
        # What the actions offer: only organizations and roles this caller could use at all.
        org_choices = [
            o
            for o in (await organizations.list_organizations(db_session, realm_id, cursor=None, limit=100)).items
            if o.id not in member_of
            and o.state == "active"
            and authority
            and authority.holds("org.members.write", o.id)
        ]
        role_choices = (
            [
                role
                for role in (await roles.list_roles(db_session, realm_id, cursor=None, limit=100)).items
                if authority.can_assign(role.permissions, None) or role.boundary == "organization"
            ]
            if authority and authority.holds("realm.roles.write")
            else []
        )
        return page(
            request,
            "pages/users/detail.html",
            nav="users",
            status_code=status_code,
            user=user,
            memberships=memberships,
            org_choices=org_choices,
            role_choices=role_choices,
            all_memberships=memberships,
            can_link=may(principal, "realm.users.write"),
            can_assign=may(principal, "realm.roles.write"),
            groups=await overview.user_groups(db_session, realm_id, user.id),
            assignments=assignments,
            names=names,
            can_suspend=may(principal, "realm.users.suspend"),
            created=request.query_params.get("created") == "1",
            done={"member": "Added to the organization.", "role": "Role assigned."}.get(
                request.query_params.get("done") or ""
            ),
            **context,
        )

    @get("/{user_id:str}", operation_id="userPage", opt={"permission": "realm.users.read"})
    async def detail(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        user = await directory.get_user(db_session, principal.realm.id, user_id)
        return await self._detail(request, db_session, principal, user)

    async def _set_status(
        self, request: AnyRequest, user_id: str, db_session: DbSession, principal: Principal, status: str
    ) -> Response[Any]:
        user = await directory.get_user(db_session, principal.realm.id, user_id)
        try:
            user = await directory.set_user_status(
                db_session, principal.actor(request_id_of(request)), user_id, status, authority=principal.authority
            )
        except EngineError as exc:
            return await self._detail(request, db_session, principal, user, status_code=exc.status, error=exc.detail)
        if targets(request, STATUS_ID):
            done = "Suspended: their sessions and tokens stopped working." if status == "suspended" else "Reactivated."
            return await self._detail(request, db_session, principal, user, flash=done)
        return Redirect(f"/realms/{principal.realm.slug}/users/{user.id}", status_code=303)

    @post("/{user_id:str}/suspend", operation_id="userPageSuspend", opt={"permission": "realm.users.suspend"})
    async def suspend(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        return await self._set_status(request, user_id, db_session, principal, "suspended")

    @post("/{user_id:str}/reactivate", operation_id="userPageReactivate", opt={"permission": "realm.users.suspend"})
    async def reactivate(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        return await self._set_status(request, user_id, db_session, principal, "active")

    # --- Onboarding from the cockpit -------------------------------------------------------------

    @post(
        "/{user_id:str}/sign-in-link",
        operation_id="userPageSignInLink",
        opt={"permission": "realm.users.write"},
        status_code=200,
    )
    async def sign_in_link(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        """A one-time sign-in link for this user, shown once to copy (same rule as the API)."""
        user = await directory.get_user(db_session, principal.realm.id, user_id)
        try:
            async with db_session.begin_nested():
                token, row = await directory.create_sign_in_link(
                    db_session, principal.actor(request_id_of(request)), user.id, authority=principal.authority
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, user, status_code=exc.status, action_error=("link", exc.detail)
            )
        base = context_of(request.app).settings.link_base_url  # never the request's Host header
        link = f"{base}/realms/{principal.realm.slug}/sign-in/link?token={token}"
        response = await self._detail(
            request, db_session, principal, user, sign_in_link={"url": link, "expires_at": row.expires_at}
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    @post("/{user_id:str}/memberships", operation_id="userPageAddMembership", opt={"permission": "realm.users.read"})
    async def add_membership(
        self,
        request: AnyRequest,
        user_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[dict[str, str]],
    ) -> Response[Any]:
        """Add this user to an organization: ``org.members.write`` there, and the one rule over the user."""
        user = await directory.get_user(db_session, principal.realm.id, user_id)
        org_id = (data.get("organization_id") or "").strip()
        try:
            if not org_id:
                raise EngineError("Choose an organization.")
            async with db_session.begin_nested():
                org = await organizations.get_organization(db_session, principal.realm.id, org_id)
                await organizations.add_member(
                    db_session, principal.actor(request_id_of(request)), org.id, user.id, authority=principal.authority
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, user, status_code=exc.status, action_error=("membership", exc.detail)
            )
        return Redirect(f"/realms/{principal.realm.slug}/users/{user.id}?done=member", status_code=303)

    @post("/{user_id:str}/role-assignments", operation_id="userPageAssignRole", opt={"permission": "realm.roles.write"})
    async def assign_role(
        self,
        request: AnyRequest,
        user_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        data: URLEncodedBody[dict[str, str]],
    ) -> Response[Any]:
        """Assign a role to this user, realm-wide or in one organization: the grant ceiling applies."""
        user = await directory.get_user(db_session, principal.realm.id, user_id)
        try:
            await assign_role_from_form(request, db_session, principal, data, user_id=user.id)
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, user, status_code=exc.status, action_error=("role", exc.detail)
            )
        return Redirect(f"/realms/{principal.realm.slug}/users/{user.id}?done=role", status_code=303)
