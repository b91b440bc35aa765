"""Who asked for a run never takes its approval over, when the starter and the publisher are two
people (engine/runs/approvals.py, the delegation's askers); what the request's audit records; and
where a too long comment is refused."""

from __future__ import annotations

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.audit import Actor
from engine.platform.errors import Issue, ValidationFailed
from engine.runs import service
from testing.approvals import approval_of, approval_row, decide
from testing.factories import RealmHandle, bearer
from testing.runs import clock_now, drain, make_runner, rows
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]
STARTERS_ONLY = "the run's starter and its accountable publisher never decide about it"


async def test_a_run_approval_is_handed_neither_to_its_starter_nor_to_its_other_publisher(
    realm: RealmHandle, client: Client
) -> None:
    subject = await realm.user()
    approver = await realm.user()
    starter = await realm.user()
    await realm.assign(starter, await realm.role("runner", ["realm.workflows.run"]))
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    async with realm.sessions() as session, session.begin():  # started by hand by the starter
        run = await service.start_manual_run(
            session,
            Actor(type="user", id=starter.id, realm_id=realm.id),
            wid,
            subject_id=subject.id,
            organization_id=None,
        )
        assert (run.starter_id, run.publisher_id) == (starter.id, realm.admin.id)
    await drain(make_runner(realm, clock_now()))
    token = await realm.token(approver, audience="account")
    approval = await approval_of(client, realm, token)
    url = f"{realm.api}/approvals/{approval['id']}/delegate"
    for asker in (starter, realm.admin):
        refused = await client.post(url, json={"user_id": asker.id}, headers=bearer(token))
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == "The delegation is not valid."
        assert refused.json()["errors"] == [{"path": "/user_id", "code": "invalid", "message": STARTERS_ONLY}]
    [(approvers,)] = await rows(realm, "SELECT approvers FROM workflow_approvals WHERE id = :a", a=approval["id"])
    assert approvers == [approver.id]


async def test_an_approvals_request_is_audited_on_the_approval_in_the_workflow_category(realm: RealmHandle) -> None:
    subject = await realm.user()
    approver = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    async with realm.sessions() as session, session.begin():
        run = await service.start_manual_run(session, realm.actor, wid, subject_id=subject.id, organization_id=None)
        run_id = run.id
    await drain(make_runner(realm, clock_now()))
    approval = await approval_row(realm, run_id, "approve")
    asked = await rows(
        realm,
        "SELECT category, subject_type, subject_id FROM audit_events WHERE realm_id = :r AND type = :t",
        r=realm.id,
        t="workflow.approval.requested",
    )
    assert [tuple(a) for a in asked] == [("workflow", "workflow_approval", approval.id)]


async def test_a_comment_over_1000_characters_is_refused_at_the_comment(realm: RealmHandle) -> None:
    subject = await realm.user()
    approver = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    async with realm.sessions() as session, session.begin():
        run = await service.start_manual_run(session, realm.actor, wid, subject_id=subject.id, organization_id=None)
        run_id = run.id
    clock = clock_now()
    await drain(make_runner(realm, clock))
    with pytest.raises(ValidationFailed) as refused:
        await decide(realm, approver, run_id, "approve", approve=True, comment="x" * 1001, now=clock.now())
    assert refused.value.issues == [Issue("/comment", "too_long", "must be at most 1000 characters")]
    assert (await approval_row(realm, run_id, "approve")).status == "pending"
