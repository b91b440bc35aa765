"""Every engine function that changes a principal checks the permission itself, not only its page.

Generated two ways, so that a function added later cannot slip through:

- every public coroutine of the engine that takes an ``actor`` is
  either registered in ``authz.PERMISSION_CHECKED`` (by ``@needs_permission``) or named in
  ``NOT_A_PRINCIPAL_CHANGE`` with the reason;
- every registered function has a case in ``CASES``, and is called with an actor who holds
  every permission of the catalog but the one it needs: it refuses (403 naming the permission)
  and changes nothing. The same call with the permission succeeds, so the refusal is the
  permission's and nothing else's.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

import engine.directory
from engine.directory import organizations, principals, roles, tokens
from engine.directory.accounts import create_user
from engine.directory.audit import Actor
from engine.directory.authz import PERMISSION_CHECKED, PERMISSIONS, Authority, Grant
from engine.directory.groups import add_group_member, create_group, remove_group_member, update_group
from engine.directory.models import GroupMember
from engine.directory.role_assignments import create_assignment, revoke_assignment
from engine.directory.tokens import mint_token
from engine.platform.errors import Forbidden
from testing.factories import RealmHandle, enrol_totp


def _modules() -> list[ModuleType]:
    return [importlib.import_module(m.name) for m in pkgutil.walk_packages(engine.__path__, "engine.")]


def acting_functions() -> dict[str, Callable[..., Any]]:
    """Public coroutines defined anywhere in the engine that take an ``actor``."""
    out: dict[str, Callable[..., Any]] = {}
    for module in _modules():
        for name, function in vars(module).items():
            if name.startswith("_") or not inspect.iscoroutinefunction(function):
                continue
            if inspect.unwrap(function).__module__ != module.__name__:
                continue
            if "actor" in inspect.signature(function).parameters:
                out[f"{module.__name__}.{name}"] = function
    return out


NOT_A_PRINCIPAL_CHANGE: dict[str, str] = {
    "engine.directory.audit.record_audit": "writes the audit trail of a change checked elsewhere",
    # The writers of what a rule already allowed: the checked service that decides calls them, and so
    # does a run's step after its decision (the publisher's authority and the grant ceiling, decided
    # in engine/runs/decisions.py). A writer keeps only the invariants no decision can, such as the
    # realm's last administrator.
    "engine.directory.role_assignments.apply_assignment": "writes a grant create_assignment or a run's decision allowed",
    "engine.directory.role_assignments.apply_revocation": "writes a revocation revoke_assignment or a run allowed",
    "engine.directory.groups.apply_group_join": "writes what add_group_member or a run's decision allowed",
    "engine.directory.groups.apply_group_leave": "writes what remove_group_member or a run allowed",
    "engine.directory.organizations.apply_member_removal": "writes what remove_member or a run's decision allowed",
    "engine.directory.principals.apply_user_status": "writes what set_user_status or a run's decision allowed",
    "engine.runs.service.check_start_request": "checks a start request (realm.workflows.run, starter authority)",
    "engine.runs.preview.preview_run": "writes nothing: a preview, under the manual start's checks",
    "engine.directory.audit.emit_event": "writes the outbox event of a change checked elsewhere",
    "engine.directory.authz.require_authority_over": "is the authority rule itself",
    "engine.directory.principals.require_outranks": "is the authority rule itself",
    "engine.directory.independence.require_independent": "is the independent-reviewer rule itself",
    "engine.directory.sign_in_links.issue_sign_in_link": (
        "the primitive behind principals.create_sign_in_link (checked) and the operator's CLI"
    ),
    "engine.directory.tokens.mint_token": (
        "the primitive behind tokens.mint_own_token and tokens.mint_service_principal_token, and the CLI"
    ),
    "engine.directory.tokens.mint_own_token": "a user mints a token for themselves only",
    "engine.directory.notice_templates.put_template": "changes wording, no principal",
    "engine.directory.notice_templates.reset_template": "changes wording, no principal",
    "engine.directory.organizations.create_organization": "an organization, not a principal",
    "engine.directory.organizations.update_organization": "an organization, not a principal",
    "engine.directory.policy.update_policy": "the realm policy, not a principal",
    "engine.directory.webhooks.create_subscription": "a webhook subscription, not a principal",
    "engine.directory.webhooks.rotate_secret": "a webhook subscription, not a principal",
    "engine.directory.webhooks.update_subscription": "a webhook subscription, not a principal",
    "engine.directory.webhooks.delete_subscription": "a webhook subscription, not a principal",
    "engine.runs.approvals.request_approval": "a run's approval step asks; the run's publisher is checked",
    "engine.runs.approvals.decide": (
        "only a named approver decides; an approved role assignment is made by create_assignment (checked)"
    ),
    "engine.runs.approvals.delegate": "only a named approver hands their decision on",
    "engine.runs.role_requests.request_role_assignment": "records what create_assignment (checked) answered",
    "engine.endpoints.deliveries.redeliver": "sends an event delivery again; changes no principal",
    "engine.runs.controls.rerun_run": "a re-run goes through start_manual_run's rules",
    "engine.runs.controls.set_workflow_enabled": "goes through engine.workflows.catalog.set_enabled's rules",
    "engine.runs.controls.retry_now": "changes only when a waiting attempt happens",
    "engine.runs.controls.bulk_action": "each run goes through its own cancel or re-run",
    "engine.runs.attention.resolve_run": "records a note on a finished run",
    "engine.runs.service.start_manual_run": (
        "starts a run: the starter's authority over the subject and every step is checked there; the run's"
        " steps change principals through the functions registered here, with the publisher's authority"
    ),
    "engine.runs.service.start_manual_runs": "each person's run goes through start_manual_run's rules",
    "engine.runs.service.cancel_run": "cancelling only undoes what the run did, under its publisher",
    "engine.workflows.catalog.create_workflow": "a workflow definition; it acts only once published",
    "engine.workflows.catalog.update_workflow": "renames a workflow",
    "engine.workflows.catalog.delete_workflow": "removes a workflow",
    "engine.workflows.catalog.set_enabled": "enables or disables a workflow",
    "engine.workflows.revisions.stage_revision": "a draft does nothing until published",
    "engine.workflows.revisions.add_revision": "writes the draft that create_workflow or stage_revision accepted",
    "engine.workflows.revisions.decide_revision": "a decision on a revision (engine/directory/independence.py)",
    "engine.workflows.publication.publish_revision": "publication passes the delegation ceiling for every step",
    "engine.workflows.publication.rollback": "rollback passes the same delegation ceiling",
}


@dataclass
class World:
    realm: RealmHandle
    org: str
    group: str  # the target is a member
    other_group: str  # the target is not in it
    role: str  # a custom realm role nobody holds
    target: str  # a user who is a member of ``org`` and of ``group``, holding ``role``-less nothing
    outsider: str  # a user of no organization
    assignment: str  # ``target``'s assignment of ``held_role``
    sp: str
    sp_token: str  # the id of a token of ``sp``


Case = Callable[[AsyncSession, Actor, Authority, World], Awaitable[Any]]

CASES: dict[str, Case] = {
    "engine.directory.accounts.create_user": lambda s, a, auth, w: create_user(
        s, a, email="new@example.com", display_name="New", authority=auth
    ),
    "engine.directory.principals.update_user": lambda s, a, auth, w: principals.update_user(
        s, a, w.target, display_name="Renamed", guest=None, password=None, authority=auth
    ),
    "engine.directory.principals.set_user_status": lambda s, a, auth, w: principals.set_user_status(
        s, a, w.target, "suspended", authority=auth
    ),
    "engine.directory.principals.reset_mfa": lambda s, a, auth, w: principals.reset_mfa(s, a, w.target, authority=auth),
    "engine.directory.principals.create_sign_in_link": lambda s, a, auth, w: principals.create_sign_in_link(
        s, a, w.target, authority=auth
    ),
    "engine.directory.principals.create_service_principal": lambda s, a, auth, w: principals.create_service_principal(
        s, a, name="robot-2", description="", authority=auth
    ),
    "engine.directory.organizations.add_member": lambda s, a, auth, w: organizations.add_member(
        s, a, w.org, w.outsider, authority=auth
    ),
    "engine.directory.organizations.remove_member": lambda s, a, auth, w: organizations.remove_member(
        s, a, w.org, w.target, authority=auth
    ),
    "engine.directory.groups.create_group": lambda s, a, auth, w: create_group(s, a, auth, w.org, name="Another"),
    "engine.directory.groups.update_group": lambda s, a, auth, w: update_group(
        s, a, auth, w.org, w.group, name="Renamed"
    ),
    "engine.directory.groups.add_group_member": lambda s, a, auth, w: add_group_member(
        s, a, auth, w.org, w.other_group, w.target
    ),
    "engine.directory.groups.remove_group_member": lambda s, a, auth, w: remove_group_member(
        s, a, auth, w.org, w.group, w.target
    ),
    "engine.directory.roles.create_role": lambda s, a, auth, w: roles.create_role(
        s, a, auth, name="Readers", permissions=["realm.users.read"], boundary="realm"
    ),
    "engine.directory.roles.update_role": lambda s, a, auth, w: roles.update_role(
        s, a, auth, w.role, description="changed"
    ),
    "engine.directory.roles.delete_role": lambda s, a, auth, w: roles.delete_role(s, a, auth, w.role),
    "engine.directory.role_assignments.create_assignment": lambda s, a, auth, w: create_assignment(
        s, a, auth, role_id=w.role, user_id=w.outsider
    ),
    "engine.directory.role_assignments.revoke_assignment": lambda s, a, auth, w: revoke_assignment(
        s, a, auth, w.assignment
    ),
    "engine.directory.tokens.mint_service_principal_token": lambda s, a, auth, w: tokens.mint_service_principal_token(
        s, a, w.sp, name="t", expires_in_days=30, authority=auth
    ),
    "engine.directory.tokens.revoke": lambda s, a, auth, w: tokens.revoke(
        s, a, w.sp_token, may_revoke_any=True, authority=auth
    ),
}


def test_every_function_that_acts_is_checked_or_says_why_not() -> None:
    acting = set(acting_functions())
    unclassified = acting - set(PERMISSION_CHECKED) - set(NOT_A_PRINCIPAL_CHANGE)
    assert not unclassified, (
        f"register these with @needs_permission or say why they change no principal: {unclassified}"
    )
    assert not set(NOT_A_PRINCIPAL_CHANGE) - acting, "stale entries in NOT_A_PRINCIPAL_CHANGE"
    assert not set(PERMISSION_CHECKED) & set(NOT_A_PRINCIPAL_CHANGE)


def test_every_checked_function_has_a_case() -> None:
    assert set(CASES) == set(PERMISSION_CHECKED)


def test_only_run_steps_and_own_tokens_are_exempt() -> None:
    exempt = {name for name, check in PERMISSION_CHECKED.items() if check.exempt}
    assert exempt == {
        "engine.directory.role_assignments.create_assignment",
        "engine.directory.role_assignments.revoke_assignment",
        "engine.directory.tokens.revoke",
    }


async def _world(realm: RealmHandle) -> World:
    org = await realm.organization("Engineering")
    target = await realm.user("target@example.com")
    outsider = await realm.user("outsider@example.com")
    await realm.member(org, target)
    await enrol_totp(realm, target)
    held_role = await realm.role("Held", ["realm.users.read"])
    role = await realm.role("Unused", ["realm.users.read"])
    assignment = await realm.assign(target, held_role)
    async with realm.sessions() as session, session.begin():
        group, _ = await create_group(session, realm.actor, None, org.id, name="Team")
        other, _ = await create_group(session, realm.actor, None, org.id, name="Other")
        session.add(GroupMember(group_id=group.id, user_id=target.id, realm_id=realm.id, added_by=realm.admin.id))
        sp = await principals.create_service_principal(
            session, realm.actor, name="robot", description="", authority=None
        )
        _, token = await mint_token(session, realm.actor, audience="admin", service_principal=sp)
    return World(realm, org.id, group.id, other.id, role.id, target.id, outsider.id, assignment.id, sp.id, token.id)


def _everything_but(permission: str, clerk_id: str) -> Authority:
    held = frozenset(name for name in PERMISSIONS if name != permission)
    return Authority("user", clerk_id, [Grant(held, None)])


async def _fingerprint(session: AsyncSession, realm_id: str) -> tuple[Any, ...]:
    counts = []
    for table in (
        "users",
        "service_principals",
        "memberships",
        "groups",
        "group_members",
        "roles",
        "role_assignments",
        "api_tokens",
        "sign_in_links",
    ):
        counts.append(await session.scalar(text(f"SELECT count(*) FROM {table} WHERE realm_id = :r"), {"r": realm_id}))
    states = await session.execute(
        text(
            "SELECT (SELECT string_agg(display_name || status || (totp_enabled_at IS NULL)::text, ',' ORDER BY id)"
            "          FROM users WHERE realm_id = :r),"
            "       (SELECT string_agg(name, ',' ORDER BY id) FROM groups WHERE realm_id = :r),"
            "       (SELECT string_agg(description, ',' ORDER BY id) FROM roles WHERE realm_id = :r),"
            "       (SELECT count(*) FROM api_tokens WHERE realm_id = :r AND revoked_at IS NOT NULL),"
            "       (SELECT count(*) FROM group_roles gr JOIN groups g ON g.id = gr.group_id WHERE g.realm_id = :r)"
        ),
        {"r": realm_id},
    )
    return (*counts, *states.one())


@pytest.mark.parametrize("name", sorted(PERMISSION_CHECKED))
async def test_each_function_refuses_an_actor_without_its_permission(realm: RealmHandle, name: str) -> None:
    world = await _world(realm)
    clerk = await realm.user("clerk@example.com")
    actor = Actor(type="user", id=clerk.id, realm_id=realm.id)
    check = PERMISSION_CHECKED[name]
    async with realm.sessions() as session:
        before = await _fingerprint(session, realm.id)
    async with realm.sessions() as session:
        with pytest.raises(Forbidden) as refused:
            async with session.begin():
                await CASES[name](session, actor, _everything_but(check.permission, clerk.id), world)
    assert refused.value.code == "forbidden" and check.permission in refused.value.detail
    async with realm.sessions() as session:
        assert await _fingerprint(session, realm.id) == before
    # With the permission (and everything else), the same call goes through: the refusal was the permission's.
    everything = Authority("user", clerk.id, [Grant(frozenset(PERMISSIONS), None)])
    async with realm.sessions() as session, session.begin():
        await CASES[name](session, actor, everything, world)
    async with realm.sessions() as session:
        assert await _fingerprint(session, realm.id) != before


@pytest.mark.parametrize("name", sorted(n for n, c in PERMISSION_CHECKED.items() if c.organization_param is not None))
async def test_an_organization_permission_held_in_another_organization_does_not_count(
    realm: RealmHandle, name: str
) -> None:
    world = await _world(realm)
    elsewhere = await realm.organization("Elsewhere")
    clerk = await realm.user("clerk@example.com")
    check = PERMISSION_CHECKED[name]
    authority = _everything_but(check.permission, clerk.id)
    authority.grants.append(Grant(frozenset({check.permission}), elsewhere.id))
    async with realm.sessions() as session:
        with pytest.raises(Forbidden) as refused:
            async with session.begin():
                await CASES[name](session, Actor(type="user", id=clerk.id, realm_id=realm.id), authority, world)
    assert check.permission in refused.value.detail
