"""Role pages: the realm's roles with a create form, and one role with its assignments.

The assignments of a role are a live component (``#role-assignments``): assigning and revoking
post with htmx and the component swaps itself, the engine's refusals (grant ceiling, approver
rules, bad input) shown in the form; without JavaScript the same forms are plain POSTs. The
same rules as the API apply, through the same services: ``realm.roles.read`` to read,
``realm.roles.write`` to create, assign and revoke, and the grant ceiling for each.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery
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
from cockpit.state import AnyRequest, DbSession
from engine.directory import organizations as orgs
from engine.directory import principals as directory
from engine.directory import roles
from engine.directory.authz import PERMISSIONS
from engine.directory.models import Role
from engine.directory.role_assignments import (
    ApprovalNeeded,
    create_assignment,
    get_assignment,
    list_assignments,
    principal_labels,
    revoke_assignment,
)
from engine.platform.errors import EngineError, invalid
from engine.runs import role_requests
from engine.workflows.references import refuse_if_referenced

ASSIGNMENTS_ID = "role-assignments"
READ = {"permission": "realm.roles.read"}
WRITE = {"permission": "realm.roles.write"}
WILDCARDS = (("realm.*", "every realm permission"), ("org.*", "every organization permission"))
FLASHES = {
    "created": "Role created.",
    "assigned": "Role assigned.",
    "requested": "Approval requested: the role is assigned once the approver approves it (Approvals page).",
    "revoked": "Assignment revoked.",
    "deleted": "Role deleted.",
}


def parse_expiry(value: str) -> datetime | None:
    """A ``datetime-local`` value (read as UTC), or an ISO time with its offset; empty is none."""
    if not value.strip():
        return None
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise invalid("/expires_at", "Enter a date and time, for example 2030-01-31T17:00.", "invalid_time") from exc


class RolesPages(Controller):
    path = "/realms/{realm:str}/roles"
    include_in_schema = False

    # --- The list ---------------------------------------------------------------------------------

    async def _list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        cursor: str | None = None,
        status_code: int = 200,
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        found = await roles.list_roles(db_session, principal.realm.id, cursor=cursor)
        return page(
            request,
            "pages/roles/list.html",
            nav="roles",
            status_code=status_code,
            roles=found.items,
            next_cursor=found.next_cursor,
            catalog=roles.permission_catalog().items,
            wildcards=WILDCARDS,
            can_create=may(principal, "realm.roles.write"),
            form=form
            or {"name": "", "description": "", "boundary": "realm", "requires_approval": False, "permissions": []},
            flash=FLASHES.get(request.query_params.get("done") or ""),
            **context,
        )

    @get("/", operation_id="rolesPage", opt=READ)
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        return await self._list(request, db_session, principal, cursor=cursor)

    @post("/", operation_id="rolesPageCreate", opt=WRITE)
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        form = await form_of(request)
        name = field(form, "name")
        description = field(form, "description")
        boundary = field(form, "boundary") or "realm"
        requires_approval = bool(field(form, "requires_approval"))
        permissions = [v for v in form.getall("permissions", []) if isinstance(v, str) and v]
        values = {
            "name": name,
            "description": description,
            "boundary": boundary,
            "requires_approval": requires_approval,
            "permissions": permissions,
        }
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                role = await roles.create_role(
                    db_session,
                    principal.actor(request_id_of(request)),
                    authority_of(principal),
                    name=name,
                    permissions=permissions,
                    boundary=boundary,
                    requires_approval=requires_approval,
                    description=description,
                )
        except EngineError as exc:
            return await self._list(
                request, db_session, principal, status_code=exc.status, form=values, **form_errors(exc)
            )
        return Redirect(f"/realms/{principal.realm.slug}/roles/{role.id}?done=created", status_code=303)

    # --- One role ---------------------------------------------------------------------------------

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        role: Role,
        *,
        status_code: int = 200,
        errors: dict[str, Any] | None = None,
        form: dict[str, Any] | None = None,
        flash: str | None = None,
    ) -> Template:
        realm_id = principal.realm.id
        await db_session.refresh(role)  # current values, also after a change that was undone
        found = await list_assignments(
            db_session, realm_id, role_id=role.id, cursor=request.query_params.get("cursor") or None
        )
        items = found.items
        labels = await principal_labels(
            db_session,
            realm_id,
            [a.user_id for a in items]
            + [a.service_principal_id for a in items]
            + [a.granted_by for a in items]
            + [a.approver_id for a in items],
        )
        can_write = may(principal, "realm.roles.write")
        context: dict[str, Any] = {
            "role": role,
            "assignments": items,
            "next_cursor": found.next_cursor,
            "labels": labels,
            "org_names": await orgs.organization_names(db_session, realm_id, [a.organization_id for a in items]),
            "can_write": can_write,
            "errors": errors or {},
            "form": form or {"user_email": "", "organization_id": "", "expires_at": "", "approver_email": ""},
            "flash": flash if flash is not None else FLASHES.get(request.query_params.get("done") or ""),
        }
        if can_write:
            users = await directory.list_users(db_session, realm_id, status="active", limit=PICKER_LIMIT)
            context["users"] = users.items
            if role.boundary == "organization":
                found_orgs = await orgs.list_organizations(db_session, realm_id, limit=PICKER_LIMIT)
                context["organizations"] = found_orgs.items
        if targets(request, ASSIGNMENTS_ID):
            return page(request, "pages/roles/_assignments.html", nav="roles", status_code=status_code, **context)
        return page(
            request,
            "pages/roles/detail.html",
            nav="roles",
            status_code=status_code,
            catalog={name: {"level": level, "description": text} for name, (level, text) in PERMISSIONS.items()},
            **context,
        )

    @get("/{role_id:str}", operation_id="rolePage", opt=READ)
    async def detail(
        self, request: AnyRequest, role_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        role = await roles.get_role(db_session, principal.realm.id, role_id)
        return await self._detail(request, db_session, principal, role)

    @post("/{role_id:str}/assignments", operation_id="rolePageAssign", opt=WRITE)
    async def assign(
        self, request: AnyRequest, role_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        realm_id = principal.realm.id
        role = await roles.get_role(db_session, realm_id, role_id)
        form = await form_of(request)
        values = {
            "user_email": field(form, "user_email"),
            "organization_id": field(form, "organization_id"),
            "expires_at": field(form, "expires_at"),
            "approver_email": field(form, "approver_email"),
        }
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                user_id = await user_by_email(db_session, realm_id, values["user_email"], "/user_email")
                approver_id = (
                    await user_by_email(db_session, realm_id, values["approver_email"], "/approver_email")
                    if values["approver_email"].strip()
                    else None
                )
                made = await create_assignment(
                    db_session,
                    principal.actor(request_id_of(request)),
                    authority_of(principal),
                    role_id=role.id,
                    user_id=user_id,
                    organization_id=values["organization_id"] or None,
                    expires_at=parse_expiry(values["expires_at"]),
                    approver_id=approver_id,
                )
                if isinstance(made, ApprovalNeeded):
                    await role_requests.request_role_assignment(
                        db_session, principal.actor(request_id_of(request)), made
                    )
        except EngineError as exc:
            return await self._detail(
                request,
                db_session,
                principal,
                role,
                status_code=exc.status,
                errors={"assignments": form_errors(exc)},
                form=values,
            )
        if isinstance(made, ApprovalNeeded):
            return await self._after_change(request, db_session, principal, role, "requested")
        return await self._after_change(request, db_session, principal, role, "assigned")

    @post("/{role_id:str}/assignments/{assignment_id:str}/revoke", operation_id="rolePageRevoke", opt=WRITE)
    async def revoke(
        self,
        request: AnyRequest,
        role_id: FromPath[str],
        assignment_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        role = await roles.get_role(db_session, principal.realm.id, role_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                assignment = await get_assignment(db_session, principal.realm.id, assignment_id)
                if assignment.role_id != role.id:
                    raise invalid("/assignment_id", "This assignment is of another role.")
                await revoke_assignment(
                    db_session, principal.actor(request_id_of(request)), authority_of(principal), assignment.id
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, role, status_code=exc.status, errors={"assignments": form_errors(exc)}
            )
        return await self._after_change(request, db_session, principal, role, "revoked")

    async def _after_change(
        self, request: AnyRequest, db_session: DbSession, principal: Principal, role: Role, done: str
    ) -> Response[Any]:
        if targets(request, ASSIGNMENTS_ID):
            return await self._detail(request, db_session, principal, role, flash=FLASHES[done])
        return Redirect(f"/realms/{principal.realm.slug}/roles/{role.id}?done={done}", status_code=303)

    @post("/{role_id:str}/delete", operation_id="rolePageDelete", opt=WRITE)
    async def delete_role(
        self, request: AnyRequest, role_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        role = await roles.get_role(db_session, principal.realm.id, role_id)
        form = await request.form()
        force = form.get("force") == "true"
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await refuse_if_referenced(db_session, principal.realm.id, role.id, "role", force)
                await roles.delete_role(
                    db_session, principal.actor(request_id_of(request)), authority_of(principal), role.id
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, role, status_code=exc.status, errors={"delete": form_errors(exc)}
            )
        return Redirect(f"/realms/{principal.realm.slug}/roles?done=deleted", status_code=303)
