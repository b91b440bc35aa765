"""The approval pages' cards, read by the engine: in words, and in as many statements for one
approval as for several."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event

from engine.platform.clock import FixedClock
from engine.runs import approval_views
from engine.runs.approval_models import PENDING, WorkflowApproval
from testing.factories import RealmHandle
from testing.runs import drain, make_runner, start
from testing.workflows import manual, publish


async def _cards(realm: RealmHandle, rows: list[WorkflowApproval]) -> tuple[list[approval_views.ApprovalCard], int]:
    """The cards of ``rows`` and how many statements building them sent."""
    statements: list[str] = []
    async with realm.sessions() as session:
        bind = (await session.connection()).sync_connection
        assert bind is not None

        def count(*args: Any) -> None:
            statements.append(args[2])

        event.listen(bind, "before_cursor_execute", count)
        cards = await approval_views.approval_cards(session, realm.id, rows, now=datetime.now(UTC))
        event.remove(bind, "before_cursor_execute", count)
    return cards, len(statements)


async def test_cards_speak_in_names_in_a_fixed_number_of_statements(realm: RealmHandle) -> None:
    org = await realm.organization("Acme")
    approver = await realm.user("bea@example.com", display_name="Bea Boss")
    role = await realm.role("Billing admin", ["realm.users.read"], boundary="organization", requires_approval=True)
    wid = await publish(
        realm,
        manual(
            {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "organization"},
        ),
        name="Billing access",
    )
    subjects = [await realm.user(f"hire{i}@example.com", display_name=f"Hire {i}") for i in range(3)]
    for subject in subjects:
        await realm.member(org, subject)
        await start(realm, wid, subject.id, org.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5))))
    async with realm.sessions() as session:
        found = await approval_views.list_for_user(session, realm.id, approver.id, status=PENDING)
    assert len(found.items) == 3

    one, one_count = await _cards(realm, found.items[:1])
    three, three_count = await _cards(realm, found.items)
    assert one_count == three_count > 0
    assert await _cards(realm, []) == ([], 0)
    assert {c.subject for c in three} == {"Hire 0", "Hire 1", "Hire 2"}
    card = one[0]
    assert card.workflow_name == "Billing access" and card.subject_email.endswith("@example.com")
    assert card.started_by == f"{realm.admin.display_name}, by hand"
    assert card.next_steps == ["grants role Billing admin in Acme"]
    assert card.approvers == ["Bea Boss"] and card.decided_by is None and card.led_to is None
    assert card.status_words == "waiting for a decision"
