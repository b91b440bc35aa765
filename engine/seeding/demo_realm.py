"""The demo realm a fresh installation starts with.

``cockpit up`` seeds it once, when no realm exists, so a newcomer lands in a realm that already
has people, organizations, roles and groups to run workflows about. Nobody has a password: the
administrator gets in with the one-time sign-in link printed at first start, the others with
links from ``cockpit admin sign-in-link``.

Seeding holds a transaction-level advisory lock, so two processes starting at once seed once;
a realm ``demo`` that exists already is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.accounts import create_user, user_by_email
from engine.directory.audit import Actor, emit_event, record_audit
from engine.directory.models import (
    Group,
    GroupMember,
    GroupRole,
    Membership,
    Organization,
    Realm,
    Role,
    RoleAssignment,
    User,
)
from engine.directory.realms import builtin_role, create_realm, realm_by_slug
from engine.directory.role_assignments import apply_assignment
from engine.platform.errors import NotFound
from engine.platform.ids import new_id

DEMO_SLUG = "demo"
DEMO_NAME = "Demo"
DEMO_ADMIN_EMAIL = "admin@demo.example"
SEED_LOCK = 7_316_842_101

# email -> display name
_STAFF = {
    "approver@demo.example": "Avery Approver",
    "auditor@demo.example": "Audra Auditor",
}
_PEOPLE = {
    "grace@demo.example": "Grace Hopper",
    "linus@demo.example": "Linus Torvalds",
    "margaret@demo.example": "Margaret Hamilton",
    "ken@demo.example": "Ken Thompson",
    "mary@demo.example": "Mary Jackson",
    "don@demo.example": "Don Draper",
}
_ORGANIZATIONS = {
    "Acme Engineering": ["grace@demo.example", "linus@demo.example", "margaret@demo.example", "ken@demo.example"],
    "Acme Sales": ["mary@demo.example", "don@demo.example"],
}
# The demo realm's own roles (the tests read them to know what each demo person may do):
# name -> (permissions, boundary, requires_approval, description)
DEMO_ROLES: dict[str, tuple[list[str], str, bool, str]] = {
    "engineering-member": (["realm.workflows.read"], "organization", False, "Members of an engineering organization"),
    "platform-operator": (
        ["realm.workflows.read", "realm.workflows.run"],
        "organization",
        False,
        "Start and cancel workflow runs in the organization",
    ),
    "production-access": (
        ["realm.workflows.read", "realm.audit.read"],
        "realm",
        True,
        "Access to production; granted only with an independent approver",
    ),
    "access-approver": (
        ["realm.workflows.read", "realm.audit.read"],
        "realm",
        False,
        "Approves production access (holds every permission of production-access)",
    ),
}
# group -> (organization, parent, roles, members)
_GROUPS: dict[str, tuple[str, str | None, list[str], list[str]]] = {
    "Engineering": ("Acme Engineering", None, ["engineering-member"], ["grace@demo.example", "linus@demo.example"]),
    "Platform": (
        "Acme Engineering",
        "Engineering",
        ["platform-operator"],
        ["margaret@demo.example", "ken@demo.example"],
    ),
}


@dataclass
class DemoRealm:
    realm: Realm
    admin: User
    created: bool
    users: dict[str, User] = field(default_factory=dict)
    organizations: dict[str, Organization] = field(default_factory=dict)
    roles: dict[str, Role] = field(default_factory=dict)
    groups: dict[str, Group] = field(default_factory=dict)


async def seed_demo(session: AsyncSession) -> DemoRealm:
    """Create the demo realm, or return the one that exists. Call inside a transaction."""
    await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SEED_LOCK})
    existing = await realm_by_slug(session, DEMO_SLUG)
    if existing is not None:
        admin = await user_by_email(session, existing.id, DEMO_ADMIN_EMAIL)
        if admin is None:  # changed by an operator since: any administrator of the realm will do
            admin_id = await session.scalar(
                text(
                    "SELECT ra.user_id FROM role_assignments ra JOIN roles r ON r.id = ra.role_id "
                    "WHERE ra.realm_id = :realm AND r.name = 'realm-admin' AND ra.user_id IS NOT NULL "
                    "ORDER BY ra.id LIMIT 1"
                ),
                {"realm": existing.id},
            )
            admin = await session.get(User, admin_id) if admin_id else None
        if admin is None:
            raise NotFound("The demo realm has no administrator left.")
        return DemoRealm(realm=existing, admin=admin, created=False)

    realm, admin = await create_realm(
        session, DEMO_SLUG, admin_email=DEMO_ADMIN_EMAIL, admin_display_name="Ada Admin", name=DEMO_NAME
    )
    system = Actor.system(realm.id)
    users: dict[str, User] = {admin.email: admin}
    for email, name in {**_STAFF, **_PEOPLE}.items():
        users[email] = await create_user(session, system, email=email, display_name=name, authority=None)

    organizations: dict[str, Organization] = {}
    for org_name, members in _ORGANIZATIONS.items():
        org = Organization(id=new_id("org"), realm_id=realm.id, name=org_name)
        session.add(org)
        await session.flush()
        organizations[org_name] = org
        await record_audit(
            session,
            system,
            "organization.created",
            subject_type="organization",
            subject_id=org.id,
            details={"name": org_name},
        )
        for email in members:
            await _add_member(session, system, org, users[email])

    roles: dict[str, Role] = {
        "realm-admin": await builtin_role(session, realm.id, "realm-admin"),
        "realm-auditor": await builtin_role(session, realm.id, "realm-auditor"),
    }
    for role_name, (permissions, boundary, requires_approval, description) in DEMO_ROLES.items():
        role = Role(
            id=new_id("rol"),
            realm_id=realm.id,
            name=role_name,
            description=description,
            permissions=permissions,
            boundary=boundary,
            requires_approval=requires_approval,
        )
        session.add(role)
        await session.flush()
        roles[role_name] = role
        await record_audit(
            session,
            system,
            "role.created",
            category="authorization",
            subject_type="role",
            subject_id=role.id,
            details={"name": role_name, "permissions": permissions, "boundary": boundary},
        )

    await _assign(session, system, users["approver@demo.example"], roles["access-approver"])
    await _assign(session, system, users["auditor@demo.example"], roles["realm-auditor"])
    # An example of a grant that needed an independent approver: granted by the administrator.
    await _assign(
        session,
        Actor(type="user", id=admin.id, realm_id=realm.id),
        users["linus@demo.example"],
        roles["production-access"],
        approver_id=users["approver@demo.example"].id,
    )

    groups: dict[str, Group] = {}
    for group_name, (org_name, parent, role_names, members) in _GROUPS.items():
        org = organizations[org_name]
        group = Group(
            id=new_id("grp"),
            realm_id=realm.id,
            organization_id=org.id,
            parent_id=groups[parent].id if parent else None,
            name=group_name,
        )
        session.add(group)
        await session.flush()
        groups[group_name] = group
        for role_name in role_names:
            session.add(GroupRole(group_id=group.id, role_id=roles[role_name].id))
        await session.flush()
        await record_audit(
            session,
            system,
            "group.created",
            subject_type="group",
            subject_id=group.id,
            details={
                "name": group_name,
                "organization_id": org.id,
                "parent_id": group.parent_id,
                "role_ids": [roles[r].id for r in role_names],
            },
        )
        for email in members:
            session.add(GroupMember(group_id=group.id, user_id=users[email].id, realm_id=realm.id))
            await session.flush()
            await record_audit(
                session,
                system,
                "group.member_added",
                subject_type="user",
                subject_id=users[email].id,
                details={"group_id": group.id, "organization_id": org.id},
            )
    return DemoRealm(
        realm=realm, admin=admin, created=True, users=users, organizations=organizations, roles=roles, groups=groups
    )


async def _add_member(session: AsyncSession, actor: Actor, org: Organization, user: User) -> None:
    membership = Membership(id=new_id("mem"), realm_id=org.realm_id, organization_id=org.id, user_id=user.id)
    session.add(membership)
    await session.flush()
    payload = {"organization_id": org.id, "user_id": user.id}
    await emit_event(
        session, actor, "organization.membership.added", subject_id=user.id, organization_id=org.id, payload=payload
    )
    await record_audit(
        session, actor, "organization.membership.added", subject_type="user", subject_id=user.id, details=payload
    )


async def _assign(
    session: AsyncSession, actor: Actor, user: User, role: Role, *, approver_id: str | None = None
) -> RoleAssignment:
    """A realm-wide grant the seed's rules allow, written as every grant is (its audit event too)."""
    return await apply_assignment(
        session,
        actor,
        assignment_id=new_id("ras"),
        role_id=role.id,
        role_name=role.name,
        subject_type="user",
        subject_id=user.id,
        organization_id=None,
        expires_at=None,
        approver_id=approver_id,
        source_run_id=None,
    )
