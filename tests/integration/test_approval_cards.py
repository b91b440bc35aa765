"""The approval pages' cards, read by the engine: in words, and in as many statements for one
approval as for several."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import event

from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.platform.clock import FixedClock
from engine.platform.errors import ValidationFailed
from engine.runs import approval_views
from engine.runs.approval_models import PENDING, WorkflowApproval
from testing.approvals import decide
from testing.factories import RealmHandle, independent_admin, make_realm
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
            {"id": "welcome", "type": "notify", "notice": "welcome"},
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
    # the steps after the approval, not only the last one
    assert card.next_steps == ["grants role Billing admin in Acme", "sends them the notice “welcome”"]
    assert card.approvers == ["Bea Boss"] and card.decided_by is None and card.led_to is None
    assert card.status_words == "waiting for a decision"


async def test_each_kind_of_step_is_described_with_the_names_of_its_realm(realm: RealmHandle) -> None:
    """Every step type in words, names read in this realm only: another realm's role, a group and
    an approver that do not exist are named as gone; the run's organization stands in for a step
    without one, and a plan without any organization says none."""
    org = await realm.organization("Acme")
    role = await realm.role("Billing admin", ["realm.users.read"])
    approver = await realm.user("bea@example.com", display_name="Bea Boss")
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        team, _ = await create_group(session, realm.actor, authority, org.id, name="Team")
    foreign = await (await make_realm(realm.sessions)).role("Foreign", ["realm.users.read"])
    gone = "0" * 26
    steps: list[dict[str, Any]] = [
        {"id": "a", "type": "assign_role", "role_id": role.id, "scope": "organization", "expires_in": "30d"},
        {"id": "b", "type": "assign_role", "role_id": foreign.id, "scope": "realm"},
        {"id": "c", "type": "remove_role", "role_id": role.id, "organization_id": org.id},
        {"id": "d", "type": "add_to_group", "group_id": team.id},
        {"id": "e", "type": "remove_from_group", "group_id": "grp_" + gone},
        {"id": "f", "type": "remove_membership"},
        {"id": "g", "type": "suspend_user"},
        {"id": "h", "type": "notify", "notice": "access_granted"},
        {"id": "i", "type": "call_webhook", "subscription_id": "whs_" + gone},
        {"id": "j", "type": "wait", "duration": "1h"},
        {"id": "k", "type": "approval", "approvers": [approver.id, "usr_" + gone]},
        {"id": "l", "type": "end"},
        {"id": "m", "type": "teleport"},
    ]
    leave = [{"id": "leave", "type": "remove_membership"}]
    async with realm.sessions() as session:
        described = await approval_views.describe_steps(
            session, realm.id, [(steps, org.id), (leave, None), (leave, "org_" + gone), ([], None)]
        )
    assert [[(w.step_id, w.text) for w in plan] for plan in described] == [
        [
            ("a", "grants role Billing admin in Acme, for 30d"),
            ("b", "grants role a role that no longer exists across the realm"),
            ("c", "removes role Billing admin in Acme"),
            ("d", "adds them to group Team"),
            ("e", "removes them from group a group that no longer exists"),
            ("f", "removes their membership in Acme"),
            ("g", "suspends their account"),
            ("h", "sends them the notice “access granted”"),
            ("i", "calls an external service"),
            ("j", "waits 1h"),
            ("k", "asks Bea Boss, a former user for another approval"),
            ("l", "ends the run"),
            ("m", "does teleport"),
        ],
        [("leave", "removes their membership")],
        [("leave", "removes their membership in an organization that no longer exists")],
        [],
    ]


async def test_a_role_assignment_asked_for_by_hand_is_carded_as_its_grant_asked_by_its_granter(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    org = await realm.organization("Acme")
    desk = await realm.role("desk", ["org.members.write"], boundary="organization", requires_approval=True)
    subject = await realm.user("sam@example.com", display_name="Sam Subject")
    approver, _ = await independent_admin(realm, "approver@example.com", display_name="Ann Approver")
    requested = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": desk.id, "user_id": subject.id, "organization_id": org.id, "approver_id": approver.id},
        headers=realm.headers,
    )
    assert requested.status_code == 202, requested.text
    answer = requested.json()
    assert (answer["status"], answer["approval"]["kind"], answer["approval"]["step_id"]) == (
        "pending_approval",
        "role_assignment",
        None,
    )
    asked = answer["approval"]["request"]
    assert (asked["role_id"], asked["user_id"], asked["organization_id"]) == (desk.id, subject.id, org.id)
    async with realm.sessions() as session:
        found = await approval_views.list_for_user(session, realm.id, approver.id, status=PENDING)
    [card], _ = await _cards(realm, found.items)
    assert requested.json()["approval"]["id"] == card.approval.id
    assert card.workflow_name == "Role assignment"
    assert card.started_by == f"{realm.admin.display_name}, by hand"
    assert card.next_steps == ["grants role desk in Acme"]
    assert (card.subject, card.subject_email) == ("Sam Subject", "sam@example.com")
    assert (card.approvers, card.run_state, card.led_to) == (["Ann Approver"], "", None)
    assert card.started_at == card.approval.created_at  # no run: when it was asked for


async def test_an_approvers_list_and_counts_follow_the_run_the_workflow_and_the_decision(realm: RealmHandle) -> None:
    """Two runs wait for the approver; after one decision: one waits, one is decided by them, the
    workflow has one pending (another workflow none), a run's filter finds its own approval only,
    and a run id of another form is refused."""
    approver = await realm.user("bea@example.com", display_name="Bea Boss")
    flow = manual(
        {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "72h"},
        {"id": "done", "type": "end"},
    )
    wid = await publish(realm, flow, name="Access")
    other = await publish(realm, manual({"id": "done", "type": "end"}), name="Other")
    subjects = [await realm.user(f"hire{i}@example.com") for i in range(2)]
    run_ids = [await start(realm, wid, subject.id) for subject in subjects]
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock))
    await decide(realm, approver, run_ids[0], "approve", approve=True, comment=None, now=clock.now())
    async with realm.sessions() as session:
        assert await approval_views.count_waiting_for(session, realm.id, approver.id) == 1
        assert await approval_views.count_decided_by(session, realm.id, approver.id) == 1
        assert await approval_views.count_pending_approvals(session, realm.id, wid) == 1
        assert await approval_views.count_pending_approvals(session, realm.id, other) == 0
        assert await approval_views.count_pending_approvals(session, realm.id) == 1
        for run_id in run_ids:
            page = await approval_views.list_for_user(session, realm.id, approver.id, run_id=run_id)
            [view] = approval_views.approval_page(page).items
            assert (view.run_id, view.workflow_id, view.step_id, view.request) == (run_id, wid, "approve", None)
        with pytest.raises(ValidationFailed) as refused:
            await approval_views.list_for_user(session, realm.id, approver.id, run_id="run_" + "0" * 26)
    assert [(i.path, i.code) for i in refused.value.issues] == [("query:run_id", "invalid_id")]
    async with realm.sessions() as session:
        decided = await approval_views.list_for_user(session, realm.id, approver.id, decided_by_me=True)
    [card], _ = await _cards(realm, decided.items)
    assert card.decided_by == "Bea Boss" and card.status_words == "approved"
    assert card.led_to is not None and card.led_to.startswith("approved — ")
