"""What an approval's expiry, decision and delegation leave in its row and in the audit trail
(engine/runs/approvals.py): who acted, on what, under which correlation, with which details."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.audit import Actor
from engine.platform.errors import Conflict, ValidationFailed
from engine.runs import approvals
from testing.approvals import approval_row, decide
from testing.factories import RealmHandle, bearer
from testing.runs import clock_now, drain, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def audited(realm: RealmHandle, event_type: str) -> list[Any]:
    return await rows(
        realm,
        "SELECT actor_type, actor_id, category, subject_type, subject_id, request_id, correlation_id, details"
        " FROM audit_events WHERE realm_id = :r AND type = :t",
        r=realm.id,
        t=event_type,
    )


async def waiting(realm: RealmHandle, approvers: int = 1) -> tuple[str, list[Any], Any]:
    """A run waiting on an approval by ``approvers`` people: (run id, the approvers, the clock)."""
    subject = await realm.user()
    people = [await realm.user() for _ in range(approvers)]
    wid = await publish(
        realm,
        manual({"id": "approve", "type": "approval", "approvers": [p.id for p in people], "expires_in": "1h"}),
    )
    run_id = await start(realm, wid, subject.id)
    clock = clock_now()
    await drain(make_runner(realm, clock))
    return run_id, people, clock


async def test_an_expiry_is_recorded_at_its_instant_and_audited_with_the_system_acting(realm: RealmHandle) -> None:
    """The expiry's event carries the run's organization, like every event of the run."""
    run_id, _, clock = await waiting(realm)
    org = await realm.organization()
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE workflow_runs SET organization_id = :o WHERE id = :r"), {"o": org.id, "r": run_id}
        )
    clock.advance(minutes=61)
    await drain(make_runner(realm, clock))
    row = await approval_row(realm, run_id, "approve")
    [(decided_at,)] = await rows(realm, "SELECT decided_at FROM workflow_approvals WHERE id = :a", a=row.id)
    assert (row.status, decided_at) == ("expired", clock.now())
    [event] = await audited(realm, "workflow.approval.expired")
    assert tuple(event) == (
        "system",
        None,
        "workflow",
        "workflow_approval",
        row.id,
        run_id,
        run_id,
        {"run_id": run_id, "step_id": "approve"},
    )
    expired = await rows(
        realm,
        "SELECT organization_id, payload->>'status' FROM outbox_events"
        " WHERE realm_id = :r AND type = 'workflow.approval.expired'",
        r=realm.id,
    )
    assert expired == [(org.id, "expired")]


async def test_a_decision_is_audited_with_its_step_and_comment_under_the_run(realm: RealmHandle) -> None:
    run_id, [approver], clock = await waiting(realm)
    [(expires_at,)] = await rows(realm, "SELECT expires_at FROM workflow_approvals WHERE run_id = :r", r=run_id)
    [asked] = await audited(realm, "workflow.approval.requested")
    assert asked.details == {
        "run_id": run_id,
        "step_id": "approve",
        "approvers": [approver.id],
        "expires_at": expires_at.isoformat(),
    }
    with pytest.raises(ValidationFailed) as too_long:  # a comment of at most 1000 characters
        await decide(realm, approver, run_id, "approve", approve=True, comment="x" * 1001, now=clock.now())
    assert too_long.value.detail == "The decision is not valid."
    approval_id = await decide(realm, approver, run_id, "approve", approve=True, comment="x" * 1000, now=clock.now())
    [event] = await audited(realm, "workflow.approval.approved")
    assert tuple(event) == (
        "user",
        approver.id,
        "authorization",
        "workflow_approval",
        approval_id,
        None,
        run_id,
        {"run_id": run_id, "step_id": "approve", "comment": "x" * 1000},
    )
    [(status, decided_by, decided_at, comment)] = await rows(
        realm, "SELECT status, decided_by, decided_at, comment FROM workflow_approvals WHERE id = :a", a=approval_id
    )
    assert (status, decided_by, decided_at, comment) == ("approved", approver.id, clock.now(), "x" * 1000)
    emitted = await rows(
        realm,
        "SELECT payload->>'approval_id', payload->>'status', payload->>'decided_by' FROM outbox_events"
        " WHERE realm_id = :r AND type = 'workflow.approval.approved'",
        r=realm.id,
    )
    assert emitted == [(approval_id, "approved", approver.id)]


async def test_a_decision_on_the_api_is_audited_under_the_request_that_made_it(
    realm: RealmHandle, client: Client
) -> None:
    run_id, [approver], _clock = await waiting(realm)
    approval_id = str((await approval_row(realm, run_id, "approve")).id)
    token = await realm.token(approver, audience="account")
    decided = await client.post(f"{realm.api}/approvals/{approval_id}/approve", json={}, headers=bearer(token))
    assert decided.status_code == 200, decided.text
    [event] = await audited(realm, "workflow.approval.approved")
    assert (event.request_id, event.correlation_id) == (decided.headers["x-request-id"], run_id)


async def test_a_delegation_is_kept_on_the_approval_and_audited_from_whom_to_whom(realm: RealmHandle) -> None:
    run_id, [approver, colleague], clock = await waiting(realm, approvers=2)
    deputy = await realm.user()
    approval_id = str((await approval_row(realm, run_id, "approve")).id)
    async with realm.sessions() as session, session.begin():
        handed = await approvals.delegate(
            session,
            Actor(type="user", id=approver.id, realm_id=realm.id),
            approval_id,
            user_id=deputy.id,
            now=clock.now(),
            mail_configured=False,
        )
        assert (handed.id, handed.approvers) == (approval_id, [deputy.id, colleague.id])
    [(approvers, delegations)] = await rows(
        realm, "SELECT approvers, delegations FROM workflow_approvals WHERE id = :a", a=approval_id
    )
    assert approvers == [deputy.id, colleague.id]
    assert delegations == [{"from": approver.id, "to": deputy.id, "at": clock.now().isoformat()}]
    [event] = await audited(realm, "workflow.approval.delegated")
    assert tuple(event) == (
        "user",
        approver.id,
        "authorization",
        "workflow_approval",
        approval_id,
        None,
        run_id,
        {"run_id": run_id, "step_id": "approve", "from": approver.id, "to": deputy.id},
    )


async def test_a_cancelled_run_closes_its_pending_approval_with_the_time_it_closed(
    realm: RealmHandle, client: Client
) -> None:
    run_id, [approver], clock = await waiting(realm)
    cancel = await client.post(f"{realm.api}/workflow-runs/{run_id}/cancel", json={}, headers=realm.headers)
    assert cancel.status_code == 202, cancel.text
    with pytest.raises(Conflict) as refused:  # asked to stop: nobody decides any more
        await decide(realm, approver, run_id, "approve", approve=True, comment=None, now=clock.now())
    assert refused.value.detail == "The run no longer waits for this approval."
    await drain(make_runner(realm, clock))
    [(status, created_at, decided_at)] = await rows(
        realm, "SELECT status, created_at, decided_at FROM workflow_approvals WHERE run_id = :r", r=run_id
    )
    assert status == "cancelled" and decided_at is not None and decided_at >= created_at
