"""The batched forms of ``remove_role``, ``remove_membership``, ``suspend_user`` and ``notify``, case by case.

Each case makes one run of a one-step workflow about a subject in a given directory state, on the
batched executor and on the single-run executor, and pins the outcome (succeeded, or failed with
the refusal's category), that the batched executor made the step itself — the refusal included —
or stepped aside for the single-run path exactly where a writer's rule is in play (the realm's last
administrator), and what the step left behind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from engine.directory.audit import Actor
from engine.directory.models import Organization, Role, User
from engine.directory.sessions import open_session
from engine.platform.clock import FixedClock
from engine.runs.runner import Runner, RunnerSettings
from testing.factories import RealmHandle
from testing.runs import drain, load, start
from testing.workflows import publish


@dataclass
class Place:
    realm: RealmHandle
    org: Organization
    viewer: Role
    org_role: Role
    subject: User
    publisher: Actor


Setup = Callable[[Place], Awaitable[None]]


async def nothing(_: Place) -> None:
    return None


async def holds_viewer(p: Place) -> None:
    await p.realm.assign(p.subject, p.viewer)


async def holds_viewer_twice(p: Place) -> None:
    await p.realm.assign(p.subject, p.viewer)
    await p.realm.assign(p.subject, p.viewer, expires_in=timedelta(days=1))


async def member(p: Place) -> None:
    await p.realm.member(p.org, p.subject)


async def member_in_a_group(p: Place) -> None:
    await p.realm.member(p.org, p.subject)
    async with p.realm.sessions() as session, session.begin():
        await session.execute(
            text("INSERT INTO groups (id, realm_id, organization_id, name) VALUES ('grp_batched', :r, :o, 'Team')"),
            {"r": p.realm.id, "o": p.org.id},
        )
        await session.execute(
            text("INSERT INTO group_members (group_id, user_id, realm_id) VALUES ('grp_batched', :u, :r)"),
            {"u": p.subject.id, "r": p.realm.id},
        )


async def stronger(p: Place) -> None:
    """The subject holds what the administrator-published run's publisher has: the same role."""
    await p.realm.assign(p.subject, await p.realm.builtin_role("realm-admin"))


async def stronger_member(p: Place) -> None:
    await member(p)
    await stronger(p)


async def suspended(p: Place) -> None:
    async with p.realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": p.subject.id})


async def signed_in(p: Place) -> None:
    async with p.realm.sessions() as session, session.begin():
        await open_session(session, p.subject, method="password", mfa=False)
    await p.realm.token(p.subject)


async def gone(p: Place) -> None:
    async with p.realm.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM users WHERE id = :u"), {"u": p.subject.id})


async def outranks_narrow_publisher(p: Place) -> None:
    await p.realm.assign(p.subject, await p.realm.role("auditor", ["realm.audit.read"]))


async def member_outranking(p: Place) -> None:
    await member(p)
    await outranks_narrow_publisher(p)


async def viewer_outranking(p: Place) -> None:
    await holds_viewer(p)
    await outranks_narrow_publisher(p)


def step(kind: str, p: Place) -> dict[str, Any]:
    return {
        "revoke": {"type": "remove_role", "role_id": p.viewer.id},
        "revoke_org": {"type": "remove_role", "role_id": p.org_role.id},
        "revoke_admin": {"type": "remove_role", "role_id": p.viewer.id},  # the role is replaced below
        "leave": {"type": "remove_membership", "organization_id": p.org.id},
        "leave_run_org": {"type": "remove_membership"},
        "suspend": {"type": "suspend_user"},
        "notify": {"type": "notify", "notice": "welcome"},
    }[kind]


# (case, step, setup, narrow publisher, expected error category or None, made by the batched executor)
CASES: list[tuple[str, str, Setup, bool, str | None, bool]] = [
    ("revoke a held role", "revoke", holds_viewer, False, None, True),
    ("revoke every grant of the role", "revoke", holds_viewer_twice, False, None, True),
    ("revoke a role not held: nothing to do", "revoke", nothing, False, None, True),
    (
        "revoke an organization role without an organization",
        "revoke_org",
        nothing,
        False,
        "organization_required",
        True,
    ),
    ("revoke from a stronger subject", "revoke", viewer_outranking, True, "target_outranks_actor", True),
    ("revoke realm-admin: the writer keeps an administrator", "revoke_admin", nothing, False, None, False),
    ("leave the organization", "leave", member, False, None, True),
    ("leave the organization and its groups", "leave", member_in_a_group, False, None, True),
    ("leave an organization one is not in", "leave", nothing, False, "not_a_member", True),
    ("leave without an organization", "leave_run_org", member, False, "organization_required", True),
    ("leave, a stronger subject", "leave", member_outranking, True, "target_outranks_actor", True),
    ("leave, an administrator: the writer keeps one", "leave", stronger_member, False, None, False),
    ("suspend", "suspend", nothing, False, None, True),
    ("suspend ends sessions and tokens", "suspend", signed_in, False, None, True),
    ("suspend a suspended subject", "suspend", suspended, False, "conflict", True),
    ("suspend a missing subject", "suspend", gone, False, "not_found", True),
    ("suspend a stronger subject", "suspend", outranks_narrow_publisher, True, "target_outranks_actor", True),
    ("suspend an administrator: the writer keeps one", "suspend", stronger, False, None, False),
    ("notify", "notify", nothing, False, None, True),
    ("notify a missing subject", "notify", gone, False, "subject_missing", True),
]


async def place(realm: RealmHandle, narrow: bool) -> Place:
    org = await realm.organization("Eng")
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    org_role = await realm.role("org-viewer", ["org.groups.read"], boundary="organization")
    subject = await realm.user("subject@example.com")
    publisher = realm.actor
    if narrow:
        person = await realm.user("publisher@example.com")
        await realm.assign(person, await realm.role("power", ["realm.workflows.*", "realm.users.*", "org.*"]))
        publisher = Actor(type="user", id=person.id, realm_id=realm.id)
    return Place(realm, org, viewer, org_role, subject, publisher)


async def publish_as(p: Place, definition: dict[str, Any]) -> str:
    from engine.workflows.catalog import create_workflow
    from engine.workflows.publication import publish_revision

    async with p.realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, p.publisher, name="One step", definition=definition, has_definition=True, requires_approval=False
        )
    async with p.realm.sessions() as session, session.begin():
        await publish_revision(session, p.publisher, workflow.id, 1)
    return workflow.id


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "single"])
@pytest.mark.parametrize(
    ("case", "kind", "setup", "narrow", "category", "made_batched"), CASES, ids=[c[0] for c in CASES]
)
async def test_each_batched_form_decides_and_writes_as_the_single_run_path(
    realm: RealmHandle,
    batched: bool,
    case: str,
    kind: str,
    setup: Setup,
    narrow: bool,
    category: str | None,
    made_batched: bool,
) -> None:
    p = await place(realm, narrow)
    definition_step = {"id": "only"} | step(kind, p)
    if kind == "revoke_admin":
        admin_role = await realm.builtin_role("realm-admin")
        definition_step["role_id"] = admin_role.id
        await realm.assign(p.subject, admin_role)  # the subject and the first administrator hold it
    wid = await (publish_as(p, _one(definition_step)) if narrow else publish(realm, _one(definition_step)))
    run_id = await start(realm, wid, p.subject.id)
    await setup(p)
    clock = FixedClock(datetime.now(UTC) + timedelta(minutes=5), jitter=0.0)
    runner = Runner(
        realm.sessions,
        f"worker-forms-{int(batched)}-aaaa",
        settings=RunnerSettings(lease=timedelta(seconds=30), fast_path=batched),
        clock=clock,
    )
    await drain(runner)
    run, attempts = await load(realm, run_id)
    if category is None:
        assert run.state == "succeeded", (run.error_category, run.last_error)
        assert [(a.step_id, a.state) for a in attempts] == [("only", "succeeded")]
    else:
        assert (run.state, run.error_category) == ("failed", category), run.last_error
        assert [(a.step_id, a.state, a.error_category) for a in attempts] == [("only", "failed", category)]
    # The batched executor made the step itself (a refusal too), or stepped aside exactly where a
    # writer's rule is in play.
    assert runner.fast.moved == (1 if batched and made_batched else 0)
    await _left_behind(p, kind, category, setup, run_id)


def _one(definition_step: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [definition_step]}


async def _left_behind(p: Place, kind: str, category: str | None, setup: Setup, run_id: str) -> None:
    async def scalar(sql: str) -> Any:
        async with p.realm.sessions() as session:
            return await session.scalar(text(sql), {"u": p.subject.id, "r": run_id, "o": p.org.id})

    if category is not None:
        return
    if kind == "revoke":
        assert await scalar("SELECT count(*) FROM role_assignments WHERE user_id = :u") == 0
        revoked = 2 if setup is holds_viewer_twice else 1 if setup is holds_viewer else 0
        assert await scalar(
            "SELECT count(*) FROM audit_events WHERE correlation_id = :r AND type = 'role.revoked'"
        ) == (revoked)
    if kind == "leave":
        assert await scalar("SELECT count(*) FROM memberships WHERE user_id = :u") == 0
        assert await scalar("SELECT count(*) FROM group_members WHERE user_id = :u") == 0
        assert (
            await scalar(
                "SELECT count(*) FROM outbox_events WHERE correlation_id = :r AND type = 'organization.membership.removed'"
            )
            == 1
        )
    if kind == "suspend":
        assert await scalar("SELECT status FROM users WHERE id = :u") == "suspended"
        assert await scalar("SELECT count(*) FROM sessions WHERE user_id = :u AND revoked_at IS NULL") == 0
        assert await scalar("SELECT count(*) FROM api_tokens WHERE user_id = :u AND revoked_at IS NULL") == 0
        ended = await scalar(
            "SELECT details->'ended' FROM audit_events WHERE correlation_id = :r AND type = 'user.suspended'"
        )
        live = 1 if setup is signed_in else 0
        assert ended == {"sessions": live, "tokens": live, "sign_in_links": 0}
        assert (
            await scalar("SELECT count(*) FROM outbox_events WHERE correlation_id = :r AND type = 'user.suspended'")
            == 1
        )
    if kind == "notify":
        row = await scalar("SELECT json_build_array(to_address, state, notice) FROM workflow_notices WHERE run_id = :r")
        assert row == ["subject@example.com", "not_configured", "welcome"]
        result = await scalar("SELECT result->>'notice_id' FROM step_attempts WHERE run_id = :r")
        assert result == await scalar("SELECT id FROM workflow_notices WHERE run_id = :r")
