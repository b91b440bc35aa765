"""No route lifts anyone above their own authority: generated from the authorization matrix.

For every mutating route of ``test_authorization_matrix.MATRIX``, an actor holding only that
route's permission tries it against targets stronger than themselves — a realm administrator,
an organization administrator, a service principal holding realm-admin (and, for routes that
change what a group or role grants, the strong roles themselves). None may succeed, and nothing
may change. Every mutating route needs an entry in ``ESCALATIONS``: either its attacks, or the
reason it touches no principal. A route added later without an entry fails
``test_every_mutating_route_has_an_escalation_entry``.

The cockpit's pages get the same treatment (``PAGE_ESCALATIONS``): every unsafe page route of a
realm, found in the application's routes, is tried as form posts carrying the session's CSRF
token, from an MFA browser session of an actor holding only that route's permission.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.models import RoleAssignment, ServicePrincipal, User
from engine.directory.tokens import mint_token
from engine.platform.ids import new_id
from testing.authorization import ACCOUNT, MATRIX
from testing.factories import HTML, BrowserLogin, RealmHandle, bearer, browser_session, enrol_totp

Client = AsyncTestClient[Litestar]
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
TARGETS = ("realm_admin", "org_admin", "sp_admin")


@dataclass
class World:
    """The stronger targets and what surrounds them."""

    api: str
    org: str  # the organization the organization admin administers; every target user is a member
    other_org: str  # an organization none of them belongs to
    users: dict[str, str]  # realm_admin / org_admin -> user id
    suspended: dict[str, str]  # suspended twins, for reactivation
    sp: str  # the service principal holding realm-admin
    roles: dict[str, str]  # realm_admin / org_admin -> role id
    assignments: dict[str, str]  # target -> the id of its strong assignment
    tokens: dict[str, str]  # target -> the id of one of its tokens
    admin_group: str  # a group of ``org`` granting realm-admin
    member_group: str  # a group of ``org`` every target user is in (grants nothing)
    empty_group: str  # a group of ``org`` nobody is in (grants nothing)
    workflow: str  # published: suspends its subject
    actor_user: str = ""  # the actor of the current route
    actor_role: str = ""  # the role holding only the current route's permission
    emails: dict[str, str] = field(default_factory=dict)  # realm_admin / org_admin -> email
    actor_email: str = ""


# A request: (method, path below the realm, JSON body or None).
Request = tuple[str, str, dict[str, Any] | None]
Attack = Callable[[World, str, str], Request | None]  # (world, target kind, actor's role id) -> request


@dataclass(frozen=True)
class Unrelated:
    """The route changes no principal and nothing a principal holds."""

    reason: str


def user_only(build: Callable[[World, str], Request]) -> Attack:
    return lambda w, kind, _role: build(w, w.users[kind]) if kind in w.users else None


def suspended_only(build: Callable[[World, str], Request]) -> Attack:
    return lambda w, kind, _role: build(w, w.suspended[kind]) if kind in w.suspended else None


def strong_role(build: Callable[[World, str], Request]) -> Attack:
    return lambda w, kind, _role: build(w, w.roles[kind]) if kind in w.roles else None


ESCALATIONS: dict[tuple[str, str], list[Attack] | Unrelated] = {
    ("POST", "/users"): Unrelated("creates a new user, who holds nothing"),
    ("PATCH", "/users/{user_id}"): [
        user_only(lambda w, u: ("PATCH", f"/users/{u}", {"password": "taken-over-password"})),
        user_only(lambda w, u: ("PATCH", f"/users/{u}", {"display_name": "Mallory"})),
    ],
    ("POST", "/users/{user_id}/suspend"): [user_only(lambda w, u: ("POST", f"/users/{u}/suspend", None))],
    ("POST", "/users/{user_id}/reactivate"): [suspended_only(lambda w, u: ("POST", f"/users/{u}/reactivate", None))],
    ("POST", "/users/{user_id}/reset-mfa"): [user_only(lambda w, u: ("POST", f"/users/{u}/reset-mfa", None))],
    ("POST", "/sign-in-links"): [user_only(lambda w, u: ("POST", "/sign-in-links", {"user_id": u}))],
    ("POST", "/service-principals"): Unrelated("creates a new service principal, which holds nothing"),
    ("POST", "/organizations"): Unrelated("creates an organization; organizations are not principals"),
    ("PATCH", "/organizations/{org_id}"): Unrelated("renames or deactivates an organization; grants are unchanged"),
    ("POST", "/organizations/{org_id}/members"): [
        user_only(lambda w, u: ("POST", f"/organizations/{w.other_org}/members", {"user_id": u}))
    ],
    ("DELETE", "/organizations/{org_id}/members/{user_id}"): [
        user_only(lambda w, u: ("DELETE", f"/organizations/{w.org}/members/{u}", None))
    ],
    ("POST", "/organizations/{org_id}/groups"): [
        strong_role(lambda w, r: ("POST", f"/organizations/{w.org}/groups", {"name": "Climb", "role_ids": [r]}))
    ],
    ("PATCH", "/organizations/{org_id}/groups/{group_id}"): [
        lambda w, kind, _r: ("PATCH", f"/organizations/{w.org}/groups/{w.admin_group}", {"role_ids": []}),
        strong_role(lambda w, r: ("PATCH", f"/organizations/{w.org}/groups/{w.empty_group}", {"role_ids": [r]})),
        lambda w, kind, _r: ("PATCH", f"/organizations/{w.org}/groups/{w.empty_group}", {"parent_id": w.admin_group}),
    ],
    ("POST", "/organizations/{org_id}/groups/{group_id}/members"): [
        user_only(lambda w, u: ("POST", f"/organizations/{w.org}/groups/{w.empty_group}/members", {"user_id": u})),
    ],
    ("DELETE", "/organizations/{org_id}/groups/{group_id}/members/{user_id}"): [
        user_only(lambda w, u: ("DELETE", f"/organizations/{w.org}/groups/{w.member_group}/members/{u}", None)),
        user_only(lambda w, u: ("DELETE", f"/organizations/{w.org}/groups/{w.admin_group}/members/{u}", None)),
    ],
    ("POST", "/roles"): [
        lambda w, kind, _r: ("POST", "/roles", {"name": "climb", "permissions": ["realm.*"], "boundary": "realm"}),
        lambda w, kind, _r: ("POST", "/roles", {"name": "climb", "permissions": ["*"], "boundary": "organization"}),
    ],
    ("PATCH", "/roles/{role_id}"): [
        lambda w, kind, _r: ("PATCH", f"/roles/{w.roles['org_admin']}", {"name": "renamed"}),
        lambda w, kind, role: ("PATCH", f"/roles/{role}", {"permissions": ["realm.*", "org.*"]}),
    ],
    ("DELETE", "/roles/{role_id}"): [lambda w, kind, _r: ("DELETE", f"/roles/{w.roles['org_admin']}", None)],
    ("POST", "/role-assignments"): [
        # Even a role the actor may hand out is not theirs to give to someone above them.
        user_only(lambda w, u: ("POST", "/role-assignments", {"role_id": w.actor_role, "user_id": u})),
        lambda w, kind, _r: (
            ("POST", "/role-assignments", {"role_id": w.actor_role, "service_principal_id": w.sp})
            if kind == "sp_admin"
            else None
        ),
        lambda w, kind, _r: (
            "POST",
            "/role-assignments",
            {"role_id": w.roles[kind], "user_id": w.actor_user}
            | ({"organization_id": w.org} if kind == "org_admin" else {}),
        ),
    ],
    ("DELETE", "/role-assignments/{assignment_id}"): [
        lambda w, kind, _r: ("DELETE", f"/role-assignments/{w.assignments[kind]}", None)
    ],
    ("POST", "/webhooks"): Unrelated("webhooks deliver events; they grant nothing"),
    ("PATCH", "/webhooks/{webhook_id}"): Unrelated("webhooks deliver events; they grant nothing"),
    ("DELETE", "/webhooks/{webhook_id}"): Unrelated("webhooks deliver events; they grant nothing"),
    ("POST", "/webhooks/{webhook_id}/rotate-secret"): Unrelated("webhooks deliver events; they grant nothing"),
    ("PUT", "/templates/{name}"): Unrelated("the wording of notices"),
    ("DELETE", "/templates/{name}"): Unrelated("the wording of notices"),
    ("PATCH", "/policy"): Unrelated("the policy only adds requirements (publish approval)"),
    ("POST", "/tokens"): Unrelated("mints a token for the caller alone, never above their own credential"),
    # A decision changes what someone holds only through the requester's own grant, re-checked in
    # full at decision time (ceiling, authority over the subject, approver able to assign the role).
    ("POST", "/approvals/{approval_id}/approve"): Unrelated(
        "an approval only lets a run or a requester's own checked grant go on; only named approvers decide"
    ),
    ("POST", "/approvals/{approval_id}/reject"): Unrelated("a rejection stops a run or a request; it grants nothing"),
    ("POST", "/approvals/{approval_id}/delegate"): Unrelated(
        "hands a pending decision to another eligible user; grants nothing"
    ),
    ("DELETE", "/tokens/{token_id}"): [
        lambda w, kind, _r: ("DELETE", f"/tokens/{w.tokens[kind]}", None),
    ],
    ("POST", "/service-principals/{sp_id}/tokens"): [
        lambda w, kind, _r: (
            ("POST", f"/service-principals/{w.sp}/tokens", {"name": "climb"}) if kind == "sp_admin" else None
        )
    ],
    ("POST", "/workflows/validate"): Unrelated("validation has no effect"),
    ("POST", "/workflows"): Unrelated("definitions act only once published, under the publisher's ceiling"),
    ("PATCH", "/workflows/{workflow_id}"): Unrelated("renames a workflow"),
    ("DELETE", "/workflows/{workflow_id}"): Unrelated("removes a workflow; no grant changes"),
    ("POST", "/workflows/{workflow_id}/enable"): Unrelated("publisher's ceiling re-checked at run time"),
    ("POST", "/workflows/{workflow_id}/disable"): Unrelated("stopping a workflow grants nothing"),
    ("POST", "/workflows/{workflow_id}/revisions"): Unrelated("a draft does nothing until published"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/approve"): Unrelated("approval does nothing until published"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/reject"): Unrelated("rejection does nothing"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/publish"): Unrelated(
        "publication passes the delegation ceiling for every step (tests/integration/test_workflows_api.py)"
    ),
    ("POST", "/workflows/{workflow_id}/rollback"): Unrelated("rollback passes the same delegation ceiling"),
    ("POST", "/workflows/{workflow_id}/runs"): [
        user_only(lambda w, u: ("POST", f"/workflows/{w.workflow}/runs", {"subject_id": u}))
    ],
    ("POST", "/workflows/{workflow_id}/preview"): Unrelated(
        "writes nothing; passes the manual start's rules: authority over every step and over the subject"
        " (tests/integration/test_run_preview.py)"
    ),
    ("POST", "/workflow-runs/{run_id}/cancel"): Unrelated(
        "cancelling only undoes what the run did, under its publisher's authority"
    ),
    ("POST", "/workflow-runs/{run_id}/resolve"): Unrelated(
        "records a note that a finished run's leftovers were undone by hand; changes no principal or grant"
    ),
    ("POST", "/workflow-runs/{run_id}/rerun"): Unrelated(
        "a re-run passes the manual start's rules: authority over every step and over the subject"
        " (tests/integration/test_run_controls_api.py::TestRerun refuses a subject who outranks the starter)"
    ),
    ("POST", "/workflow-runs/{run_id}/retry-now"): Unrelated("changes only when a waiting attempt happens"),
    ("POST", "/workflow-runs/bulk"): Unrelated("each run goes through the rules of its own cancel or re-run"),
    ("POST", "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): Unrelated(
        "sends an event delivery again to its subscription; changes no principal or grant"
    ),
}


def mutating_routes() -> set[tuple[str, str]]:
    return {route for route in MATRIX if route[0] in MUTATING}


def test_every_mutating_route_has_an_escalation_entry() -> None:
    missing = sorted(mutating_routes() - ESCALATIONS.keys())
    stale = sorted(ESCALATIONS.keys() - mutating_routes())
    assert not missing, f"mutating routes without an escalation entry: {missing}"
    assert not stale, f"escalation entries for routes that do not exist: {stale}"
    for route, entry in ESCALATIONS.items():
        if isinstance(entry, Unrelated):
            assert entry.reason.strip(), route
        else:
            assert entry, f"{route}: no attack"


FINGERPRINT = text(
    """
    SELECT json_build_object(
      'users', (SELECT json_agg(json_build_array(id, status, password_hash, totp_enabled_at, display_name) ORDER BY id)
                  FROM users WHERE realm_id = :r),
      'assignments', (SELECT json_agg(id ORDER BY id) FROM role_assignments WHERE realm_id = :r),
      'roles', (SELECT json_agg(json_build_array(id, name, permissions) ORDER BY id) FROM roles WHERE realm_id = :r),
      'group_roles', (SELECT json_agg(json_build_array(gr.group_id, gr.role_id) ORDER BY gr.group_id, gr.role_id)
                        FROM group_roles gr JOIN groups g ON g.id = gr.group_id WHERE g.realm_id = :r),
      'groups', (SELECT json_agg(json_build_array(id, parent_id) ORDER BY id) FROM groups WHERE realm_id = :r),
      'group_members', (SELECT json_agg(json_build_array(group_id, user_id) ORDER BY group_id, user_id)
                          FROM group_members WHERE realm_id = :r),
      'memberships', (SELECT json_agg(json_build_array(organization_id, user_id) ORDER BY organization_id, user_id)
                        FROM memberships WHERE realm_id = :r),
      'tokens', (SELECT json_agg(json_build_array(id, revoked_at) ORDER BY id) FROM api_tokens WHERE realm_id = :r),
      'sign_in_links', (SELECT count(*) FROM sign_in_links WHERE realm_id = :r),
      'runs', (SELECT count(*) FROM workflow_runs WHERE realm_id = :r)
    )::text
    """
)


async def fingerprint(realm: RealmHandle) -> str:
    async with realm.sessions() as session:
        return str(await session.scalar(FINGERPRINT, {"r": realm.id}))


async def build_world(client: Client, realm: RealmHandle) -> World:
    api = realm.api
    org, other = await realm.organization("Target org"), await realm.organization("Elsewhere")
    realm_admin_role = await realm.builtin_role("realm-admin")
    org_admin_role = await realm.role("org-admin", ["org.*"], boundary="organization")
    users: dict[str, str] = {}
    suspended: dict[str, str] = {}
    assignments: dict[str, str] = {}
    tokens: dict[str, str] = {}
    emails: dict[str, str] = {}
    for kind, role, scope in (("realm_admin", realm_admin_role, None), ("org_admin", org_admin_role, org.id)):
        for twin, state in ((users, "active"), (suspended, "suspended")):
            user = await realm.user(f"{kind}-{state}@example.com")
            await realm.member(org, user)
            assignment = await realm.assign(user, role, organization_id=scope)
            await enrol_totp(realm, user)
            twin[kind] = user.id
            if twin is users:
                assignments[kind] = assignment.id
                emails[kind] = user.email
        async with realm.sessions() as session, session.begin():
            row = await session.get(User, suspended[kind])
            assert row is not None
            row.status = "suspended"
            tokens[kind] = (
                await mint_token(session, realm.actor, audience="admin", user=await session.get(User, users[kind]))
            )[1].id
    async with realm.sessions() as session, session.begin():
        sp = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="deployer")
        session.add(sp)
        await session.flush()
        sp_assignment = RoleAssignment(
            id=new_id("ras"),
            realm_id=realm.id,
            role_id=realm_admin_role.id,
            service_principal_id=sp.id,
            granted_by=realm.admin.id,
        )
        session.add(sp_assignment)
        tokens["sp_admin"] = (await mint_token(session, realm.actor, audience="admin", service_principal=sp))[1].id
    assignments["sp_admin"] = sp_assignment.id

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await client.post(api + path, json=body, headers=realm.headers)
        assert response.status_code in {200, 201, 202}, (path, response.text)
        data: dict[str, Any] = response.json()
        return data

    groups = f"/organizations/{org.id}/groups"
    admin_group = await post(groups, {"name": "Admins", "role_ids": [realm_admin_role.id]})
    member_group = await post(groups, {"name": "Everyone"})
    empty_group = await post(groups, {"name": "Nobody"})
    for user_id in users.values():
        await post(f"{groups}/{member_group['id']}/members", {"user_id": user_id})
        await post(f"{groups}/{admin_group['id']}/members", {"user_id": user_id})
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "suspend", "type": "suspend_user"}, {"id": "done", "type": "end"}],
    }
    workflow = await post("/workflows", {"name": "Offboard", "definition": definition})
    await post(f"/workflows/{workflow['id']}/revisions/1/publish", {})
    return World(
        api=api,
        org=org.id,
        other_org=other.id,
        users=users,
        suspended=suspended,
        sp=sp.id,
        roles={"realm_admin": realm_admin_role.id, "org_admin": org_admin_role.id, "sp_admin": realm_admin_role.id},
        assignments=assignments,
        tokens=tokens,
        admin_group=admin_group["id"],
        member_group=member_group["id"],
        empty_group=empty_group["id"],
        workflow=workflow["id"],
        emails=emails,
    )


async def test_no_route_lets_an_actor_act_on_someone_stronger(client: Client, realm: RealmHandle) -> None:
    world = await build_world(client, realm)
    actors: dict[str, tuple[str, str, dict[str, str]]] = {}  # permission -> (user id, role id, headers)

    async def actor_for(permission: str) -> tuple[str, str, dict[str, str]]:
        if permission not in actors:
            user = await realm.user()
            if permission == ACCOUNT:
                actors[permission] = (user.id, "", bearer(await realm.token(user, "account")))
            else:
                role = await realm.role(f"only-{permission}", [permission])
                await realm.assign(user, role)
                actors[permission] = (user.id, role.id, bearer(await realm.token(user)))
        return actors[permission]

    failures: list[str] = []
    attempts = 0
    for route, entry in sorted(ESCALATIONS.items()):
        if isinstance(entry, Unrelated):
            continue
        actor_id, role_id, headers = await actor_for(MATRIX[route])
        world.actor_user, world.actor_role = actor_id, role_id
        for attack in entry:
            for kind in TARGETS:
                request = attack(world, kind, role_id)
                if request is None:
                    continue
                method, path, body = request
                before = await fingerprint(realm)
                response = await client.request(method, world.api + path, json=body, headers=headers)
                attempts += 1
                label = f"{route[0]} {route[1]} as {MATRIX[route]} against {kind}: {method} {path} {body}"
                # Someone else's token is 404 to a caller who may not revoke it (ids do not leak).
                refused = {403, 404} if route == ("DELETE", "/tokens/{token_id}") else {403}
                if response.status_code not in refused:
                    failures.append(f"{label} -> {response.status_code} {response.text[:300]}")
                if await fingerprint(realm) != before:
                    failures.append(f"{label} changed something")
    assert attempts >= 40, attempts
    assert not failures, "\n".join(failures)


# --- The same attacks through the cockpit's pages -------------------------------------------------
#
# Every unsafe page route of a realm, found in the application's routes, needs an entry here:
# its form posts (with the session's CSRF token, from an MFA browser session of an actor holding
# only the route's permission), or the reason it touches no principal. A page route added later
# without an entry fails ``test_every_mutating_page_route_has_an_escalation_entry``.

PAGE_PREFIX = "/realms/{realm}"
FormPost = tuple[str, dict[str, Any]]  # (path below the realm, form fields)
PageAttack = Callable[[World, str, str], FormPost | None]  # (world, target kind, actor's role id)


def page_user(build: Callable[[World, str], FormPost]) -> PageAttack:
    return lambda w, kind, _role: build(w, w.users[kind]) if kind in w.users else None


def page_suspended(build: Callable[[World, str], FormPost]) -> PageAttack:
    return lambda w, kind, _role: build(w, w.suspended[kind]) if kind in w.suspended else None


def page_role(build: Callable[[World, str], FormPost]) -> PageAttack:
    return lambda w, kind, _role: build(w, w.roles[kind]) if kind in w.roles else None


def _in_org(w: World, kind: str) -> dict[str, str]:
    return {"organization_id": w.org} if kind == "org_admin" else {}


PAGE_ESCALATIONS: dict[tuple[str, str], list[PageAttack] | Unrelated] = {
    ("POST", "/users"): Unrelated("creates a new user, who holds nothing"),
    ("POST", "/users/{user_id}/suspend"): [page_user(lambda w, u: (f"/users/{u}/suspend", {}))],
    ("POST", "/users/{user_id}/reactivate"): [page_suspended(lambda w, u: (f"/users/{u}/reactivate", {}))],
    ("POST", "/users/{user_id}/sign-in-link"): [page_user(lambda w, u: (f"/users/{u}/sign-in-link", {}))],
    ("POST", "/users/{user_id}/memberships"): [
        page_user(lambda w, u: (f"/users/{u}/memberships", {"organization_id": w.other_org}))
    ],
    ("POST", "/users/{user_id}/role-assignments"): [
        page_user(lambda w, u: (f"/users/{u}/role-assignments", {"role_id": w.actor_role})),
        lambda w, kind, _r: (f"/users/{w.actor_user}/role-assignments", {"role_id": w.roles[kind]} | _in_org(w, kind)),
    ],
    ("POST", "/service-principals"): Unrelated("creates a new service principal, which holds nothing"),
    ("POST", "/service-principals/{sp_id}/tokens"): [
        lambda w, kind, _r: (f"/service-principals/{w.sp}/tokens", {"name": "climb"}) if kind == "sp_admin" else None
    ],
    ("POST", "/service-principals/{sp_id}/role-assignments"): [
        # Even a role the actor may hand out is not theirs to give to a service principal above them,
        # and a role above the actor is not theirs to give to any.
        lambda w, kind, _r: (
            (f"/service-principals/{w.sp}/role-assignments", {"role_id": w.actor_role}) if kind == "sp_admin" else None
        ),
        lambda w, kind, _r: (
            (f"/service-principals/{w.sp}/role-assignments", {"role_id": w.roles[kind]})
            if kind in w.roles and kind != "org_admin"
            else None
        ),
    ],
    ("POST", "/service-principals/{sp_id}/tokens/{token_id}/revoke"): [
        lambda w, kind, _r: (
            (f"/service-principals/{w.sp}/tokens/{w.tokens[kind]}/revoke", {}) if kind == "sp_admin" else None
        )
    ],
    ("POST", "/organizations"): Unrelated("creates an organization; organizations are not principals"),
    ("POST", "/organizations/{org_id}"): Unrelated("renames or deactivates an organization; grants are unchanged"),
    ("POST", "/organizations/{org_id}/members"): [
        lambda w, kind, _r: (
            (f"/organizations/{w.other_org}/members", {"email": w.emails[kind]}) if kind in w.emails else None
        )
    ],
    ("POST", "/organizations/{org_id}/members/{user_id}/remove"): [
        page_user(lambda w, u: (f"/organizations/{w.org}/members/{u}/remove", {}))
    ],
    ("POST", "/organizations/{org_id}/groups"): [
        page_role(lambda w, r: (f"/organizations/{w.org}/groups", {"name": "Climb", "role_ids": [r]}))
    ],
    ("POST", "/organizations/{org_id}/groups/{group_id}"): [
        lambda w, kind, _r: (f"/organizations/{w.org}/groups/{w.admin_group}", {"name": "Admins", "role_ids": []}),
        page_role(lambda w, r: (f"/organizations/{w.org}/groups/{w.empty_group}", {"name": "Nobody", "role_ids": [r]})),
        lambda w, kind, _r: (
            f"/organizations/{w.org}/groups/{w.empty_group}",
            {"name": "Nobody", "parent_id": w.admin_group},
        ),
    ],
    ("POST", "/organizations/{org_id}/groups/{group_id}/members"): [
        page_user(lambda w, u: (f"/organizations/{w.org}/groups/{w.empty_group}/members", {"user_id": u}))
    ],
    ("POST", "/organizations/{org_id}/groups/{group_id}/members/{user_id}/remove"): [
        page_user(lambda w, u: (f"/organizations/{w.org}/groups/{w.member_group}/members/{u}/remove", {})),
        page_user(lambda w, u: (f"/organizations/{w.org}/groups/{w.admin_group}/members/{u}/remove", {})),
    ],
    ("POST", "/roles"): [
        lambda w, kind, _r: ("/roles", {"name": "climb", "permissions": ["realm.*"], "boundary": "realm"}),
        lambda w, kind, _r: ("/roles", {"name": "climb", "permissions": ["*"], "boundary": "organization"}),
    ],
    ("POST", "/roles/{role_id}/delete"): [lambda w, kind, _r: (f"/roles/{w.roles['org_admin']}/delete", {})],
    ("POST", "/roles/{role_id}/assignments"): [
        lambda w, kind, _r: (
            (f"/roles/{w.actor_role}/assignments", {"user_email": w.emails[kind]}) if kind in w.emails else None
        ),
        lambda w, kind, _r: (
            f"/roles/{w.roles[kind]}/assignments",
            {"user_email": w.actor_email} | _in_org(w, kind),
        ),
    ],
    ("POST", "/roles/{role_id}/assignments/{assignment_id}/revoke"): [
        lambda w, kind, _r: (f"/roles/{w.roles[kind]}/assignments/{w.assignments[kind]}/revoke", {})
    ],
    ("POST", "/tokens"): Unrelated("mints a token for the caller alone, never above their own credential"),
    ("POST", "/tokens/{token_id}/revoke"): [lambda w, kind, _r: (f"/tokens/{w.tokens[kind]}/revoke", {})],
    ("POST", "/mfa"): Unrelated("enrols the caller's own second factor"),
    ("POST", "/sign-out"): Unrelated("ends the caller's own session"),
    ("POST", "/approvals/{approval_id}/decide"): Unrelated(
        "only named approvers decide; a role assignment is made by the requester's own grant, re-checked in full"
    ),
    ("POST", "/approvals/{approval_id}/delegate"): Unrelated("hands a pending decision on; grants nothing"),
    ("POST", "/policy"): Unrelated("the policy only adds requirements (publish approval)"),
    ("POST", "/templates"): Unrelated("the wording of notices"),
    ("POST", "/templates/reset"): Unrelated("the wording of notices"),
    ("POST", "/templates/preview"): Unrelated("a preview has no effect"),
    ("POST", "/webhooks"): Unrelated("webhooks deliver events; they grant nothing"),
    ("POST", "/webhooks/{webhook_id}/{action}"): Unrelated("webhooks deliver events; they grant nothing"),
    ("POST", "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): Unrelated(
        "sends an event delivery again; changes no principal or grant"
    ),
    ("POST", "/workflows/new"): Unrelated("definitions act only once published, under the publisher's ceiling"),
    ("POST", "/workflows/{workflow_id}/edit"): Unrelated("a draft does nothing until published"),
    ("POST", "/workflows/{workflow_id}/edit/builder"): Unrelated("renders the builder; no effect"),
    ("POST", "/workflows/{workflow_id}/edit/validate"): Unrelated("validation has no effect"),
    ("POST", "/workflows/{workflow_id}/delete"): Unrelated("removes a workflow; no grant changes"),
    ("POST", "/workflows/{workflow_id}/enable"): Unrelated("publisher's ceiling re-checked at run time"),
    ("POST", "/workflows/{workflow_id}/disable"): Unrelated("stopping a workflow grants nothing"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/approve"): Unrelated("approval does nothing until published"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/reject"): Unrelated("rejection does nothing"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/publish"): Unrelated(
        "publication passes the delegation ceiling for every step"
    ),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/rollback"): Unrelated("rollback passes the same ceiling"),
    ("POST", "/workflows/{workflow_id}/revisions/{n}/preview"): Unrelated(
        "writes nothing: a preview under the manual start's checks (tests/integration/test_run_preview.py)"
    ),
    ("POST", "/workflows/{workflow_id}/runs/start/preview"): Unrelated(
        "writes nothing: a preview under the manual start's checks (tests/integration/test_run_preview.py)"
    ),
    ("POST", "/workflows/{workflow_id}/runs/start"): [
        page_user(lambda w, u: (f"/workflows/{w.workflow}/runs/start", {"subject": u}))
    ],
    ("POST", "/workflows/{workflow_id}/runs/start-many/preview"): Unrelated(
        "writes nothing: a preview per person under the manual start's checks"
    ),
    ("POST", "/workflows/{workflow_id}/runs/start-many"): [
        page_user(lambda w, u: (f"/workflows/{w.workflow}/runs/start-many", {"people": u}))
    ],
    ("POST", "/runs/{run_id}/cancel"): Unrelated("cancelling only undoes what the run did, under its publisher"),
    ("POST", "/runs/{run_id}/rerun"): Unrelated("a re-run passes the manual start's rules"),
    ("POST", "/runs/{run_id}/retry-now"): Unrelated("changes only when a waiting attempt happens"),
    ("POST", "/runs/bulk"): Unrelated("each run goes through the rules of its own cancel or re-run"),
    ("POST", "/attention/{run_id}/resolve"): Unrelated("records a note on a finished run; changes no principal"),
}

# Someone else's token is 404 on the own-tokens page (ids do not leak), as in the API.
PAGE_NOT_FOUND_IS_REFUSAL = {("POST", "/tokens/{token_id}/revoke")}


def mutating_page_routes(app: Litestar) -> dict[tuple[str, str], dict[str, Any]]:
    """Every unsafe page route of a realm that needs a credential, with its guard options."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        if not path.startswith(PAGE_PREFIX + "/"):
            continue
        for method, handler in route.route_handler_map.items():
            if method in MUTATING and not handler[0].opt.get("public"):
                found[(method, path[len(PAGE_PREFIX) :])] = dict(handler[0].opt)
    return found


def test_every_mutating_page_route_has_an_escalation_entry(app: Litestar) -> None:
    routes = set(mutating_page_routes(app))
    assert len(routes) > 30
    missing = sorted(routes - PAGE_ESCALATIONS.keys())
    stale = sorted(PAGE_ESCALATIONS.keys() - routes)
    assert not missing, f"mutating page routes without an escalation entry: {missing}"
    assert not stale, f"page escalation entries for routes that do not exist: {stale}"
    for route, entry in PAGE_ESCALATIONS.items():
        assert entry.reason.strip() if isinstance(entry, Unrelated) else entry, route


async def test_no_page_lets_an_actor_act_on_someone_stronger(client: Client, app: Litestar, realm: RealmHandle) -> None:
    world = await build_world(client, realm)
    routes = mutating_page_routes(app)
    actors: dict[str, tuple[User, str, BrowserLogin]] = {}  # permission -> (user, role id, MFA session)

    async def actor_for(permission: str | None) -> tuple[User, str, BrowserLogin]:
        key = permission or ACCOUNT
        if key not in actors:
            user = await realm.user()
            role_id = ""
            if permission:
                role = await realm.role(f"page-only-{permission}", [permission])
                await realm.assign(user, role)
                role_id = role.id
            actors[key] = (user, role_id, await browser_session(realm, user))
        return actors[key]

    failures: list[str] = []
    attempts = 0
    for route, entry in sorted(PAGE_ESCALATIONS.items()):
        if isinstance(entry, Unrelated):
            continue
        permission = routes[route].get("permission")
        user, role_id, login = await actor_for(permission)
        world.actor_user, world.actor_role, world.actor_email = user.id, role_id, user.email
        client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
        for attack in entry:
            for kind in TARGETS:
                request = attack(world, kind, role_id)
                if request is None:
                    continue
                path, form = request
                before = await fingerprint(realm)
                response = await client.post(
                    f"/realms/{realm.slug}{path}",
                    data={**form, "_csrf": login.csrf},
                    headers=HTML,
                    follow_redirects=False,
                )
                attempts += 1
                label = f"page {route[1]} as {permission or ACCOUNT} against {kind}: {path} {form}"
                refused = {403, 404} if route in PAGE_NOT_FOUND_IS_REFUSAL else {403}
                if response.status_code not in refused:
                    failures.append(f"{label} -> {response.status_code}")
                if await fingerprint(realm) != before:
                    failures.append(f"{label} changed something")
    assert attempts >= 40, attempts
    assert not failures, "\n".join(failures)
