"""What a refused reviewer is told, and the audit event the refusal leaves: who was refused, on what,
why, and whose work it was."""

from __future__ import annotations

from datetime import timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.accounts import create_user
from engine.directory.audit import Actor
from engine.platform.errors import Forbidden
from engine.workflows.catalog import create_workflow
from engine.workflows.revisions import decide_revision
from testing.factories import RealmHandle, grant_realm_admin_aged

Client = AsyncTestClient[Litestar]
DEFINITION = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


async def refusals(realm: RealmHandle, event: str) -> list[tuple[object, ...]]:
    async with realm.sessions() as session:
        found = await session.execute(
            text(
                "SELECT actor_type, actor_id, category, subject_type, subject_id, details FROM audit_events"
                " WHERE realm_id = :r AND type = :t ORDER BY id"
            ),
            {"r": realm.id, "t": event},
        )
        return [tuple(row) for row in found]


async def test_a_reviewer_the_author_made_is_told_so_and_the_refusal_is_audited_on_the_workflow(
    realm: RealmHandle,
) -> None:
    reviewer = await realm.user("made-by-author@example.com")
    await grant_realm_admin_aged(realm, reviewer, by=None, age=timedelta(days=400))
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, realm.actor, name="Reviewed", requires_approval=True, definition=DEFINITION, has_definition=True
        )
    actor = Actor(type="user", id=reviewer.id, realm_id=realm.id, mfa_session=True)
    with pytest.raises(Forbidden) as refused:
        async with realm.sessions() as session, session.begin():
            await decide_revision(session, actor, workflow.id, 1, approve=False, comment=None)
    assert refused.value.code == "reviewer_not_independent"
    assert refused.value.detail == (
        "You are not an independent second person here: "
        "the author (or an account the author made) created this account."
    )
    assert await refusals(realm, "workflow.revision.review_refused") == [
        (
            "user",
            reviewer.id,
            "authorization",
            "workflow",
            workflow.id,
            {
                "revision": 1,
                "decision": "reject",
                "reason": "created_by_author",
                "author_id": realm.admin.id,
                "reviewer_id": reviewer.id,
            },
        )
    ]


async def test_an_approver_whose_authority_the_requester_gave_is_refused_with_the_window_in_days(
    client: Client, realm: RealmHandle
) -> None:
    role = await realm.role("Payroll", ["realm.users.read"], requires_approval=True)
    async with realm.sessions() as session, session.begin():
        system = Actor.system(realm.id)
        subject = await create_user(session, system, email="subject@example.com", display_name="S", authority=None)
        approver = await create_user(session, system, email="approver@example.com", display_name="A", authority=None)
    await grant_realm_admin_aged(realm, approver, by=realm.admin.id, age=timedelta(days=29))
    answer = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role.id, "user_id": subject.id, "approver_id": approver.id},
        headers=realm.headers,
    )
    assert answer.status_code == 403, answer.text
    assert answer.json()["detail"] == (
        "The approver is not an independent second person here: "
        "the authority to decide comes from what the author made within the last 30 days."
    )
    assert await refusals(realm, "role.assignment.approver_refused") == [
        (
            "user",
            realm.admin.id,
            "authorization",
            "user",
            subject.id,
            {
                "role_id": role.id,
                "organization_id": None,
                "reason": "authority_from_author",
                "author_id": realm.admin.id,
                "reviewer_id": approver.id,
            },
        )
    ]
