"""Organizations, memberships and groups (SPEC §5, directory).

Routes about one organization check their permission in that organization (``org_param``):
a realm-wide grant covers every organization, an organization-scoped grant only its own.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, delete, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit.api.common import REALM_BASE, Body, check, id_issue
from cockpit.api.roles import authority_of
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import organizations as orgs
from engine.directory import read_models
from engine.directory.groups import (
    add_group_member,
    create_group,
    get_group,
    group_member_view,
    group_membership_view,
    group_role_ids,
    group_view,
    list_group_members,
    list_groups,
    remove_group_member,
    update_group,
)

READ = {"permission": "realm.organizations.read", "org_param": "org_id"}
MEMBERS_WRITE = {"permission": "org.members.write", "org_param": "org_id"}
GROUPS_WRITE = {"permission": "org.groups.write", "org_param": "org_id"}


class CreateOrganization(Body):
    name: str


class UpdateOrganization(Body):
    name: str | None = None
    state: str | None = None


class AddMember(Body):
    user_id: str


class CreateGroup(Body):
    name: str
    parent_id: str | None = None
    role_ids: list[str] = msgspec.field(default_factory=list)


class UpdateGroup(Body):
    name: str | None = None
    parent_id: str | msgspec.UnsetType | None = msgspec.UNSET
    role_ids: list[str] | None = None


def _role_id_issues(role_ids: list[str] | None) -> list[Any]:
    return [issue for i, rid in enumerate(role_ids or []) for issue in id_issue(f"/role_ids/{i}", rid, "rol")]


class OrganizationsController(Controller):
    path = REALM_BASE + "/organizations"
    tags = ["directory"]

    @post(
        "/",
        operation_id="createOrganization",
        opt={"permission": "realm.organizations.write", "location": "/organizations/{id}"},
    )
    async def create(
        self,
        request: AnyRequest,
        data: JSONBody[CreateOrganization],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Organization:
        """Create an organization (its name unique in the realm, regardless of case)."""
        org = await orgs.create_organization(db_session, principal.actor(request_id_of(request)), name=data.name)
        return orgs.organization_view(org)

    @get("/", operation_id="listOrganizations", opt={"permission": "realm.organizations.read"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        org_state: Annotated[str | None, QueryParameter(name="state")] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.OrganizationPage:
        """The realm's organizations."""
        page = await orgs.list_organizations(
            db_session, principal.realm.id, q=q, state=org_state, cursor=cursor, limit=limit
        )
        return read_models.OrganizationPage(
            items=[orgs.organization_view(item) for item in page.items], next_cursor=page.next_cursor
        )

    @get("/{org_id:str}", operation_id="getOrganization", opt=READ)
    async def retrieve(
        self, org_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Organization:
        """One organization of the realm."""
        org = await orgs.get_organization(db_session, principal.realm.id, org_id)
        return orgs.organization_view(org)

    @patch("/{org_id:str}", operation_id="updateOrganization", opt={"permission": "realm.organizations.write"})
    async def update(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        data: JSONBody[UpdateOrganization],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Organization:
        """Change an organization's name or state."""
        org = await orgs.update_organization(
            db_session, principal.actor(request_id_of(request)), org_id, name=data.name, state=data.state
        )
        return orgs.organization_view(org)

    @post(
        "/{org_id:str}/members",
        operation_id="addOrganizationMember",
        opt={**MEMBERS_WRITE, "location": "/organizations/{org_id}/members/{user_id}"},
    )
    async def add_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        data: JSONBody[AddMember],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.OrganizationMembership:
        """Add a user to the organization (409 ``already_a_member``); may start workflows."""
        check(id_issue("/user_id", data.user_id, "usr"))
        membership = await orgs.add_member(
            db_session,
            principal.actor(request_id_of(request)),
            org_id,
            data.user_id,
            authority=await authority_of(principal, db_session),
        )
        return orgs.membership_view(membership)

    @get("/{org_id:str}/members", operation_id="listOrganizationMembers", opt=READ)
    async def list_members(
        self,
        org_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.OrganizationMemberPage:
        """The members of an organization, with when they joined."""
        page = await orgs.list_members(db_session, principal.realm.id, org_id, cursor=cursor, limit=limit)
        return read_models.OrganizationMemberPage(
            items=[orgs.member_view(row[0], row[1]) for row in page.items], next_cursor=page.next_cursor
        )

    @delete("/{org_id:str}/members/{user_id:str}", operation_id="removeOrganizationMember", opt=MEMBERS_WRITE)
    async def remove_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        user_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> None:
        """Remove a user from the organization and from its groups; may start workflows."""
        await orgs.remove_member(
            db_session, principal.actor(request_id_of(request)), org_id, user_id, authority=principal.authority
        )


class GroupsController(Controller):
    path = REALM_BASE + "/organizations/{org_id:str}/groups"
    tags = ["directory"]

    @post("/", operation_id="createGroup", opt={**GROUPS_WRITE, "location": "/organizations/{org_id}/groups/{id}"})
    async def create(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        data: JSONBody[CreateGroup],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Group:
        """Create a group in the organization, optionally under a parent group and with roles."""
        check(id_issue("/parent_id", data.parent_id, "grp") + _role_id_issues(data.role_ids))
        group, role_ids = await create_group(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            org_id,
            name=data.name,
            parent_id=data.parent_id,
            role_ids=data.role_ids,
        )
        return group_view(group, role_ids)

    @get("/", operation_id="listGroups", opt=READ)
    async def list(
        self,
        org_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.GroupPage:
        """The groups of an organization, with their parent and roles."""
        page = await list_groups(db_session, principal.realm.id, org_id, cursor=cursor, limit=limit)
        role_ids = await group_role_ids(db_session, [g.id for g in page.items])
        return read_models.GroupPage(
            items=[group_view(g, role_ids[g.id]) for g in page.items], next_cursor=page.next_cursor
        )

    @get("/{group_id:str}", operation_id="getGroup", opt=READ)
    async def retrieve(
        self, org_id: FromPath[str], group_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Group:
        """One group of the organization."""
        group = await get_group(db_session, principal.realm.id, org_id, group_id)
        role_ids = (await group_role_ids(db_session, [group.id]))[group.id]
        return group_view(group, role_ids)

    @patch("/{group_id:str}", operation_id="updateGroup", opt=GROUPS_WRITE)
    async def update(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        data: JSONBody[UpdateGroup],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Group:
        """Rename a group, move it under another parent, or change its roles."""
        parent_id = orgs.UNCHANGED if isinstance(data.parent_id, msgspec.UnsetType) else data.parent_id
        check(
            (id_issue("/parent_id", parent_id, "grp") if isinstance(parent_id, str) else [])
            + _role_id_issues(data.role_ids)
        )
        group, role_ids = await update_group(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            org_id,
            group_id,
            name=data.name,
            parent_id=parent_id,
            role_ids=data.role_ids,
        )
        return group_view(group, role_ids)

    @post(
        "/{group_id:str}/members",
        operation_id="addGroupMember",
        opt={**GROUPS_WRITE, "location": "/organizations/{org_id}/groups/{group_id}/members/{user_id}"},
    )
    async def add_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        data: JSONBody[AddMember],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.GroupMembership:
        """Add a member of the organization to the group; they hold the group's roles through it."""
        check(id_issue("/user_id", data.user_id, "usr"))
        member = await add_group_member(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            org_id,
            group_id,
            data.user_id,
        )
        return group_membership_view(member)

    @get("/{group_id:str}/members", operation_id="listGroupMembers", opt=READ)
    async def list_members(
        self,
        org_id: FromPath[str],
        group_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.GroupMemberPage:
        """The members of a group."""
        page = await list_group_members(db_session, principal.realm.id, org_id, group_id, cursor=cursor, limit=limit)
        return read_models.GroupMemberPage(
            items=[group_member_view(row[1], row[0]) for row in page.items], next_cursor=page.next_cursor
        )

    @delete("/{group_id:str}/members/{user_id:str}", operation_id="removeGroupMember", opt=GROUPS_WRITE)
    async def remove_member(
        self,
        request: AnyRequest,
        org_id: FromPath[str],
        group_id: FromPath[str],
        user_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> None:
        """Take a user out of the group (and so out of the roles it gives)."""
        await remove_group_member(
            db_session,
            principal.actor(request_id_of(request)),
            await authority_of(principal, db_session),
            org_id,
            group_id,
            user_id,
        )
