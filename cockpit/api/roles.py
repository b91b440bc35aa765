"""The permission catalog, roles and role assignments (SPEC §5, directory)."""

from __future__ import annotations

from datetime import datetime

from litestar import Controller, Response, delete, get, patch, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.api.common import REALM_BASE, Body, check, id_issue
from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import read_models, roles
from engine.directory.authz import Authority, load_authority
from engine.directory.role_assignments import (
    ApprovalNeeded,
    assignment_view,
    create_assignment,
    get_assignment,
    list_assignments,
    revoke_assignment,
)
from engine.runs import approval_views, role_requests
from engine.runs.read_models import PendingRoleAssignment
from engine.workflows.references import refuse_if_referenced


class CreateRole(Body):
    name: str
    permissions: list[str]
    boundary: str
    requires_approval: bool = False
    description: str = ""


class UpdateRole(Body):
    name: str | None = None
    description: str | None = None
    permissions: list[str] | None = None
    requires_approval: bool | None = None


class CreateAssignment(Body):
    role_id: str
    user_id: str | None = None
    service_principal_id: str | None = None
    organization_id: str | None = None
    expires_at: datetime | None = None
    approver_id: str | None = None


async def authority_of(principal: Principal, db_session: AsyncSession) -> Authority:
    """The caller's authority: loaded by the guard for permission routes, else loaded now."""
    if principal.authority is None:
        principal.authority = await load_authority(db_session, principal.realm.id, principal.type, principal.id)
    return principal.authority


class PermissionsController(Controller):
    path = REALM_BASE + "/permissions"
    tags = ["directory"]

    @get("/", operation_id="listPermissions", opt={"permission": "realm.roles.read"})
    async def list(self) -> read_models.PermissionCatalog:
        """The permission catalog: each permission's name, level and what it allows (one list, no pages)."""
        return roles.permission_catalog()


class RolesController(Controller):
    path = REALM_BASE + "/roles"
    tags = ["directory"]

    @post("/", operation_id="createRole", opt={"permission": "realm.roles.write", "location": "/roles/{id}"})
    async def create(
        self, request: AnyRequest, data: JSONBody[CreateRole], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Role:
        """Create a role: the permissions it grants, where it may be assigned, whether it needs approval."""
        role = await roles.create_role(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            name=data.name,
            permissions=data.permissions,
            boundary=data.boundary,
            requires_approval=data.requires_approval,
            description=data.description,
        )
        return roles.role_view(role)

    @get("/", operation_id="listRoles", opt={"permission": "realm.roles.read"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        boundary: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.RolePage:
        """The realm's roles, the built-in ones included."""
        page = await roles.list_roles(
            db_session, principal.realm.id, q=q, boundary=boundary, cursor=cursor, limit=limit
        )
        return read_models.RolePage(items=[roles.role_view(item) for item in page.items], next_cursor=page.next_cursor)

    @get("/{role_id:str}", operation_id="getRole", opt={"permission": "realm.roles.read"})
    async def retrieve(
        self, role_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Role:
        """One role of the realm."""
        return roles.role_view(await roles.get_role(db_session, principal.realm.id, role_id))

    @patch("/{role_id:str}", operation_id="updateRole", opt={"permission": "realm.roles.write"})
    async def update(
        self,
        request: AnyRequest,
        role_id: FromPath[str],
        data: JSONBody[UpdateRole],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Role:
        """Change a role's name, description, permissions or approval rule (never a built-in role's)."""
        role = await roles.update_role(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            role_id,
            name=data.name,
            description=data.description,
            permissions=data.permissions,
            requires_approval=data.requires_approval,
        )
        return roles.role_view(role)

    @delete("/{role_id:str}", operation_id="deleteRole", opt={"permission": "realm.roles.write"})
    async def remove(
        self,
        request: AnyRequest,
        role_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        force: FromQuery[bool] = False,
    ) -> None:
        """409 ``referenced_by_workflows`` while a published workflow names the role, unless ``force=true``."""
        await refuse_if_referenced(db_session, principal.realm.id, role_id, "role", force)
        await roles.delete_role(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            role_id,
        )


class RoleAssignmentsController(Controller):
    path = REALM_BASE + "/role-assignments"
    tags = ["directory"]

    @post(
        "/",
        operation_id="createRoleAssignment",
        opt={
            "permission": "realm.roles.write",
            "location": {201: "/role-assignments/{id}", 202: "/approvals/{approval[id]}"},
        },
        status_code=201,
        responses={
            201: ResponseSpec(read_models.RoleAssignment, description="Assigned"),
            202: ResponseSpec(
                PendingRoleAssignment,
                description="The role requires approval: nothing is assigned until the approver approves",
            ),
        },
    )
    async def create(
        self,
        request: AnyRequest,
        data: JSONBody[CreateAssignment],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[read_models.RoleAssignment | PendingRoleAssignment]:
        """Assign a role to a user or a service principal, realm-wide or in an organization.

        201 with the assignment; 202 with a pending approval when the role requires approval.
        """
        check(
            id_issue("/role_id", data.role_id, "rol")
            + id_issue("/user_id", data.user_id, "usr")
            + id_issue("/service_principal_id", data.service_principal_id, "spn")
            + id_issue("/organization_id", data.organization_id, "org")
            + id_issue("/approver_id", data.approver_id, "usr")
        )
        assignment = await create_assignment(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            role_id=data.role_id,
            user_id=data.user_id,
            service_principal_id=data.service_principal_id,
            organization_id=data.organization_id,
            expires_at=data.expires_at,
            approver_id=data.approver_id,
        )
        if isinstance(assignment, ApprovalNeeded):
            # A role that requires approval: nothing is assigned until the approver approves.
            actor = principal.actor(request_id_of(request))
            approval = await role_requests.request_role_assignment(db_session, actor, assignment)
            return Response(approval_views.pending_role_assignment(approval), status_code=202)
        return Response(assignment_view(assignment), status_code=201)

    @get("/", operation_id="listRoleAssignments", opt={"permission": "realm.roles.read"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        user_id: FromQuery[str | None] = None,
        service_principal_id: FromQuery[str | None] = None,
        role_id: FromQuery[str | None] = None,
        organization_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.RoleAssignmentPage:
        """Role assignments of the realm; filter by user, service principal, role or organization."""
        page = await list_assignments(
            db_session,
            principal.realm.id,
            user_id=user_id,
            service_principal_id=service_principal_id,
            role_id=role_id,
            organization_id=organization_id,
            cursor=cursor,
            limit=limit,
        )
        return read_models.RoleAssignmentPage(
            items=[assignment_view(item) for item in page.items], next_cursor=page.next_cursor
        )

    @get("/{assignment_id:str}", operation_id="getRoleAssignment", opt={"permission": "realm.roles.read"})
    async def retrieve(
        self, assignment_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.RoleAssignment:
        """One role assignment."""
        assignment = await get_assignment(db_session, principal.realm.id, assignment_id)
        return assignment_view(assignment)

    @delete("/{assignment_id:str}", operation_id="revokeRoleAssignment", opt={"permission": "realm.roles.write"})
    async def revoke(
        self, request: AnyRequest, assignment_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> None:
        """Revoke a role assignment."""
        await revoke_assignment(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            assignment_id,
        )
