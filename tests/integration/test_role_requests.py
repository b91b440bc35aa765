"""Role-assignment requests (engine/runs/role_requests.py): what a request records, and its expiry
pinned on both sides: pending until the microsecond before its seven days are over, expired at
that instant, by the system, audited; nothing else expires with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.models import Role, User
from engine.platform.clock import FixedClock
from engine.runs.role_requests import expire_role_requests
from testing.factories import RealmHandle, bearer, browser_session
from testing.runs import drain, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]
MICROSECOND = timedelta(microseconds=1)


async def ask(
    realm: RealmHandle, client: Client, role: Role, subject: User, **extra: Any
) -> tuple[dict[str, Any], User, User]:
    """A second administrator asks for ``role`` for ``subject``; (the approval, requester, approver)."""
    requester = await realm.user()
    await realm.assign(requester, await realm.builtin_role("realm-admin"))
    approver = await realm.user()
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role.id, "user_id": subject.id, "approver_id": approver.id, **extra},
        headers=bearer(await realm.token(requester)),
    )
    assert asked.status_code == 202, asked.text
    return asked.json()["approval"], requester, approver


async def expire(realm: RealmHandle, now: datetime) -> int:
    async with realm.sessions() as session, session.begin():
        return await expire_role_requests(session, now)


async def test_a_request_records_what_was_asked_and_who_asked(realm: RealmHandle, client: Client) -> None:
    org = await realm.organization("Acme")
    role = await realm.role("Billing admin", ["realm.users.read"], boundary="organization", requires_approval=True)
    subject = await realm.user()
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    approval, requester, approver = await ask(
        realm, client, role, subject, organization_id=org.id, expires_at=until.isoformat()
    )
    [row] = await rows(
        realm,
        "SELECT kind, request, subject_id, approvers, status, run_id, workflow_id, created_at, expires_at"
        " FROM workflow_approvals WHERE id = :a",
        a=approval["id"],
    )
    assert (row.kind, row.subject_id, row.approvers, row.status, row.run_id, row.workflow_id) == (
        "role_assignment",
        subject.id,
        [approver.id],
        "pending",
        None,
        None,
    )
    assert row.request == {
        "role_id": role.id,
        "role": "Billing admin",
        "user_id": subject.id,
        "service_principal_id": None,
        "organization_id": org.id,
        "expires_at": until.isoformat(),
        "requested_by": requester.id,
    }
    assert row.expires_at - row.created_at == timedelta(days=7)
    [event] = await rows(
        realm,
        "SELECT actor_type, actor_id, category, subject_type, subject_id, details FROM audit_events"
        " WHERE type = 'role.assignment.requested' AND realm_id = :r",
        r=realm.id,
    )
    assert tuple(event) == (
        "user",
        requester.id,
        "authorization",
        "user",
        subject.id,
        {"approval_id": approval["id"], "role_id": role.id, "organization_id": org.id, "approver_id": approver.id},
    )


async def test_an_approved_request_makes_the_assignment_it_asked_for_until_its_end(
    realm: RealmHandle, client: Client
) -> None:
    org = await realm.organization("Acme")
    role = await realm.role("Billing admin", ["realm.users.read"], boundary="organization", requires_approval=True)
    subject = await realm.user()
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    approval, requester, approver = await ask(
        realm, client, role, subject, organization_id=org.id, expires_at=until.isoformat()
    )
    login = await browser_session(realm, approver)
    decided = await client.post(
        f"{realm.api}/approvals/{approval['id']}/approve",
        headers={"Cookie": f"cockpit_session={login.cookie}", "X-CSRF-Token": login.csrf},
    )
    assert decided.status_code == 200, decided.text
    made = await rows(
        realm,
        "SELECT user_id, organization_id, expires_at, approver_id, granted_by FROM role_assignments WHERE role_id = :r",
        r=role.id,
    )
    assert [tuple(m) for m in made] == [(subject.id, org.id, until, approver.id, requester.id)]


async def test_an_approved_request_for_a_service_principal_assigns_the_role_to_it(
    realm: RealmHandle, client: Client
) -> None:
    role = await realm.role("payments", ["realm.users.read"], requires_approval=True)
    bot = (await client.post(realm.api + "/service-principals", json={"name": "bot"}, headers=realm.headers)).json()
    requester = await realm.user()
    await realm.assign(requester, await realm.builtin_role("realm-admin"))
    approver = await realm.user()
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role.id, "service_principal_id": bot["id"], "approver_id": approver.id},
        headers=bearer(await realm.token(requester)),
    )
    assert asked.status_code == 202, asked.text
    login = await browser_session(realm, approver)
    decided = await client.post(
        f"{realm.api}/approvals/{asked.json()['approval']['id']}/approve",
        headers={"Cookie": f"cockpit_session={login.cookie}", "X-CSRF-Token": login.csrf},
    )
    assert decided.status_code == 200, decided.text
    made = await rows(realm, "SELECT user_id, service_principal_id FROM role_assignments WHERE role_id = :r", r=role.id)
    assert [tuple(m) for m in made] == [(None, bot["id"])]


async def test_a_request_expires_at_the_instant_its_seven_days_are_over_and_nothing_else_does(
    realm: RealmHandle, client: Client
) -> None:
    role = await realm.role("payments", ["realm.users.read"], requires_approval=True)
    approval, _requester, _approver = await ask(realm, client, role, await realm.user())
    decided, _r, decider = await ask(realm, client, role, await realm.user())
    # A run's approval long past its expiry is the runner's to expire, not this pass's.
    subject, run_approver = await realm.user(), await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [run_approver.id], "expires_in": "1h"})
    )
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5))))
    [(expires_at,)] = await rows(realm, "SELECT expires_at FROM workflow_approvals WHERE id = :a", a=approval["id"])
    async with realm.sessions() as session, session.begin():  # the other request is decided already
        await session.execute(
            text("UPDATE workflow_approvals SET status = 'rejected', decided_by = :d WHERE id = :a"),
            {"d": decider.id, "a": decided["id"]},
        )

    assert await expire(realm, expires_at - MICROSECOND) == 0
    assert await rows(realm, "SELECT status FROM workflow_approvals WHERE id = :a", a=approval["id"]) == [("pending",)]
    assert await expire(realm, expires_at) == 1
    statuses = dict(
        await rows(realm, "SELECT coalesce(run_id, id), status FROM workflow_approvals WHERE realm_id = :r", r=realm.id)
    )
    assert statuses == {approval["id"]: "expired", decided["id"]: "rejected", run_id: "pending"}
    [(decided_at,)] = await rows(realm, "SELECT decided_at FROM workflow_approvals WHERE id = :a", a=approval["id"])
    assert decided_at == expires_at
    [event] = await rows(
        realm,
        "SELECT actor_type, actor_id, category, subject_type, subject_id, correlation_id FROM audit_events"
        " WHERE type = 'role.assignment.expired' AND realm_id = :r",
        r=realm.id,
    )
    assert tuple(event) == ("system", None, "authorization", "workflow_approval", approval["id"], approval["id"])
    assert await expire(realm, expires_at + timedelta(days=1)) == 0  # once
