"""Approval steps, waits and notices on a real database, a real SMTP server and the real API
(seed 000 "Concepts", "Separation of duties", "Compensation", "Audit events"; SPEC §5)."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.app import create_app
from engine.platform.config import Settings
from engine.runs import diagnostics
from engine.runs.metrics import database_gauges
from engine.runs.notices import deliver_due_notices
from testing.approvals import approval_of
from testing.factories import RealmHandle, bearer
from testing.mail import Mailbox
from testing.runs import clock_now, drain, load, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def audit(realm: RealmHandle, run_id: str) -> list[tuple[str, str | None, str | None, str]]:
    """(type, actor type, actor id, category) of every workflow.* event correlated with the run."""
    return [
        (t, at, a, c)
        for t, at, a, c in await rows(
            realm,
            "SELECT type, actor_type, actor_id, category FROM audit_events"
            " WHERE correlation_id = :r AND type LIKE 'workflow.%' ORDER BY id",
            r=run_id,
        )
    ]


# --- The seed's onboarding, whole -----------------------------------------------------------------


async def test_onboarding_approval_grant_group_notice_then_a_failing_step_compensates(
    realm: RealmHandle, client: Client, smtp_server: Mailbox
) -> None:
    org = await realm.organization("Acme")
    elsewhere = await realm.organization("Globex")
    subject = await realm.user("new.hire@example.com", display_name="New Hire")
    approver = await realm.user("boss@example.com", display_name="Bea Boss")
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    await realm.member(org, subject)
    role = await realm.role("Billing admin", ["realm.users.read"], requires_approval=True)
    group = await client.post(
        f"{realm.api}/organizations/{org.id}/groups", json={"name": "Billing"}, headers=realm.headers
    )
    assert group.status_code == 201, group.text
    group_id = group.json()["id"]
    wid = await publish(
        realm,
        manual(
            {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm", "expires_in": "720h"},
            {"id": "team", "type": "add_to_group", "group_id": group_id},
            {"id": "tell", "type": "notify", "notice": "access_granted"},
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id},
            {"id": "done", "type": "end"},
        ),
        name="Onboarding",
    )
    clock = clock_now()
    runner = make_runner(realm, clock, mail_configured=True)
    run_id = await start(realm, wid, subject.id, org.id)
    await drain(runner)
    run, attempts = await load(realm, run_id)
    assert run.state == "awaiting_approval" and attempts == []

    # The approver got the request by mail, and sees it with an account-audience token.
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 1
    [request_mail] = smtp_server.messages
    assert request_mail.rcpt_tos == ["boss@example.com"]
    assert request_mail.message["To"] == "boss@example.com"
    assert request_mail.message["From"] == "cockpit@example.test"
    assert "A request is waiting for your approval." in request_mail.message.get_body(("plain",)).get_content()
    # Without COCKPIT_PUBLIC_URL the one-time link is the path on the cockpit's address.
    assert f" /realms/{realm.slug}/approval-links/apl_" in request_mail.message.get_body(("plain",)).get_content()
    token = await realm.token(approver, audience="account")
    pending = await approval_of(client, realm, token)
    assert pending["run_id"] == run_id and pending["approvers"] == [approver.id] and pending["decided_by"] is None

    decided = await client.post(
        f"{realm.api}/approvals/{pending['id']}/approve", json={"comment": "Welcome aboard"}, headers=bearer(token)
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["status"] == "approved" and decided.json()["comment"] == "Welcome aboard"
    await drain(runner)

    run, attempts = await load(realm, run_id)
    assert run.state == "compensated", (run.state, run.error_category, run.last_error)
    assert run.error_category == "not_a_member"
    assert [(a.step_id, a.state) for a in attempts] == [
        ("approve", "succeeded"),
        ("grant", "succeeded"),
        ("team", "succeeded"),
        ("tell", "succeeded"),
        ("leave", "failed"),
    ]
    by_step = {a.step_id: a for a in attempts}
    assert by_step["grant"].compensation_state == "done" and by_step["team"].compensation_state == "done"
    assert by_step["tell"].compensation_state == "impossible"
    # The grant took the decider as its independent approver, and was undone with the group.
    assert (
        await rows(realm, "SELECT 1 FROM role_assignments WHERE user_id = :u AND role_id = :r", u=subject.id, r=role.id)
        == []
    )
    assert await rows(realm, "SELECT 1 FROM group_members WHERE user_id = :u", u=subject.id) == []
    granted = await rows(
        realm,
        "SELECT details FROM audit_events WHERE type = 'role.assigned' AND correlation_id = :r",
        r=run_id,
    )
    assert granted and granted[0][0].get("approver_id") == approver.id

    # The notice was recorded in the run's transaction and mailed after it.
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 1
    notice_mail = smtp_server.messages[-1]
    assert notice_mail.rcpt_tos == ["new.hire@example.com"]
    assert notice_mail.message["Subject"].endswith("You have been given new access.")
    plain = notice_mail.message.get_body(("plain",)).get_content()
    assert 'the workflow "Onboarding"' in plain and "You have been given new access." in plain
    listed = await client.get(f"{realm.api}/notices", params={"run_id": run_id}, headers=realm.headers)
    assert listed.status_code == 200
    states = {(n["notice"], n["to"], n["state"], n["attempts"]) for n in listed.json()["items"]}
    assert states == {
        ("approval_requested", "boss@example.com", "sent", 1),
        ("access_granted", "new.hire@example.com", "sent", 1),
    }

    events = await audit(realm, run_id)
    approval_events = [e for e in events if e[0].startswith("workflow.approval.")]
    assert approval_events == [
        ("workflow.approval.requested", "user", realm.admin.id, "workflow"),
        ("workflow.approval.approved", "user", approver.id, "authorization"),
    ]
    assert [e[0] for e in events if e[0].startswith("workflow.run.")] == [
        "workflow.run.started",
        "workflow.run.failed",
        "workflow.run.compensated",
    ]
    detail = await client.get(f"{realm.api}/workflow-runs/{run_id}", headers=realm.headers)
    assert detail.json()["approvals"][0]["decided_by"] == approver.id


# --- Rejection, expiry, reminders, cancellation ---------------------------------------------------


async def test_rejection_fails_the_run_permanently_and_it_compensates(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user()
    approver = await realm.user()
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": viewer.id, "scope": "realm"},
            {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"},
            {"id": "done", "type": "end"},
        ),
    )
    runner = make_runner(realm, clock_now())
    run_id = await start(realm, wid, subject.id)
    await drain(runner)
    token = await realm.token(approver, audience="account")
    pending = await approval_of(client, realm, token)
    rejected = await client.post(
        f"{realm.api}/approvals/{pending['id']}/reject", json={"comment": "No"}, headers=bearer(token)
    )
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert (rejected.json()["comment"], rejected.json()["decided_by"]) == ("No", approver.id)
    again = await client.post(f"{realm.api}/approvals/{pending['id']}/approve", headers=bearer(token))
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    await drain(runner)
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category) == ("compensated", "approval_rejected")
    assert [(a.step_id, a.state, a.error_category, a.max_attempts) for a in attempts] == [
        ("grant", "succeeded", None, 3),
        ("approve", "failed", "approval_rejected", 1),
    ]
    assert await rows(realm, "SELECT 1 FROM role_assignments WHERE user_id = :u", u=subject.id) == []
    assert ("workflow.approval.rejected", "user", approver.id, "authorization") in await audit(realm, run_id)


async def test_expiry_by_the_engine_clock_after_one_reminder(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user()
    approver = await realm.user("late@example.com")
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "2h"})
    )
    clock = clock_now()
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock))
    reminders = "SELECT count(*) FROM workflow_notices WHERE user_id = :u AND notice = 'approval_requested'"
    assert (await rows(realm, reminders, u=approver.id))[0][0] == 1
    clock.advance(minutes=59)
    await drain(make_runner(realm, clock))
    assert (await rows(realm, reminders, u=approver.id))[0][0] == 1  # not yet half the time
    clock.advance(minutes=2)
    # A new runner (a restarted worker) picks up where the last one left: the due time is in the run.
    await drain(make_runner(realm, clock, worker="worker-appr-2-bbbb"))
    assert (await rows(realm, reminders, u=approver.id))[0][0] == 2
    clock.advance(minutes=30)
    await drain(make_runner(realm, clock))
    assert (await rows(realm, reminders, u=approver.id))[0][0] == 2  # the reminder is sent once
    run, _ = await load(realm, run_id)
    assert run.state == "awaiting_approval"
    clock.advance(minutes=31)
    await drain(make_runner(realm, clock, worker="worker-appr-3-cccc"))
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category) == ("failed", "approval_expired")
    assert [(a.step_id, a.state, a.error_category) for a in attempts] == [("approve", "failed", "approval_expired")]
    token = await realm.token(approver, audience="account")
    expired = await approval_of(client, realm, token, status="expired")
    late = await client.post(f"{realm.api}/approvals/{expired['id']}/approve", headers=bearer(token))
    assert late.status_code == 409
    assert ("workflow.approval.expired", "system", None, "workflow") in await audit(realm, run_id)


async def test_cancelling_a_run_cancels_its_pending_approval(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user()
    approver = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    runner = make_runner(realm, clock_now())
    run_id = await start(realm, wid, subject.id)
    await drain(runner)
    # The waiting approval counts in the workflow's diagnostics, the realm's and the /metrics gauge.
    diagnosis = await client.get(f"{realm.api}/workflows/{wid}/diagnostics", headers=realm.headers)
    assert diagnosis.json()["pending_approvals"] == 1, diagnosis.text
    async with realm.sessions() as session:
        assert await diagnostics.pending_approvals(session, realm.id) == 1
        gauges = {m.name: m for m in await database_gauges(session)}
        assert gauges["cockpit_approvals_pending"].samples[0].value >= 1
    cancel = await client.post(f"{realm.api}/workflow-runs/{run_id}/cancel", json={}, headers=realm.headers)
    assert cancel.status_code == 202, cancel.text
    await drain(runner)
    run, _ = await load(realm, run_id)
    assert run.state == "cancelled"
    assert await rows(realm, "SELECT status FROM workflow_approvals WHERE run_id = :r", r=run_id) == [("cancelled",)]
    async with realm.sessions() as session:
        assert await diagnostics.pending_approvals(session, realm.id) == 0
    token = await realm.token(approver, audience="account")
    response = await client.get(f"{realm.api}/approvals", params={"status": "pending"}, headers=bearer(token))
    assert response.json()["items"] == []
    # Cancelled approvals are not audited.
    assert [e for e in await audit(realm, run_id) if e[0] == "workflow.approval.cancelled"] == []


# --- Who may decide --------------------------------------------------------------------------------


async def test_the_subject_and_anyone_not_named_get_404_and_ineligible_approvers_are_left_out(
    realm: RealmHandle, client: Client
) -> None:
    subject = await realm.user()
    approver = await realm.user()
    suspended = await realm.user()
    stranger = await realm.user()
    wid = await publish(
        realm,
        manual(
            {
                "id": "approve",
                "type": "approval",
                "approvers": [subject.id, suspended.id, approver.id],
                "expires_in": "1h",
            }
        ),
    )
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": suspended.id})
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock_now()))
    [(approval_id, approvers)] = await rows(
        realm, "SELECT id, approvers FROM workflow_approvals WHERE run_id = :r", r=run_id
    )
    assert approvers == [approver.id]
    for who in (subject, stranger):
        token = await realm.token(who, audience="account")
        assert (await client.get(f"{realm.api}/approvals/{approval_id}", headers=bearer(token))).status_code == 404
        decided = await client.post(f"{realm.api}/approvals/{approval_id}/approve", headers=bearer(token))
        assert decided.status_code == 404
        listed = await client.get(f"{realm.api}/approvals", params={"status": "pending"}, headers=bearer(token))
        assert listed.json()["items"] == []
    run, _ = await load(realm, run_id)
    assert run.state == "awaiting_approval"


async def test_no_eligible_approver_fails_the_step(realm: RealmHandle) -> None:
    subject = await realm.user()
    guest_to_be = await realm.user()
    wid = await publish(
        realm,
        manual({"id": "approve", "type": "approval", "approvers": [subject.id, guest_to_be.id], "expires_in": "1h"}),
    )
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET guest = true WHERE id = :u"), {"u": guest_to_be.id})
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock_now()))
    run, attempts = await load(realm, run_id)
    assert (run.state, run.error_category) == ("failed", "no_eligible_approver")
    assert [(a.step_id, a.number, a.error_category, a.max_attempts) for a in attempts] == [
        ("approve", 1, "no_eligible_approver", 1)
    ]


async def test_concurrent_decisions_one_wins_the_other_gets_409(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user()
    first, second = await realm.user(), await realm.user()
    wid = await publish(
        realm,
        manual({"id": "approve", "type": "approval", "approvers": [first.id, second.id], "expires_in": "1h"}),
    )
    run_id = await start(realm, wid, subject.id)
    runner = make_runner(realm, clock_now())
    await drain(runner)
    [(approval_id,)] = await rows(realm, "SELECT id FROM workflow_approvals WHERE run_id = :r", r=run_id)
    tokens = [await realm.token(first, audience="account"), await realm.token(second, audience="account")]
    answers = await asyncio.gather(
        client.post(f"{realm.api}/approvals/{approval_id}/approve", headers=bearer(tokens[0])),
        client.post(f"{realm.api}/approvals/{approval_id}/reject", headers=bearer(tokens[1])),
    )
    assert sorted(a.status_code for a in answers) == [200, 409]
    winner = next(a for a in answers if a.status_code == 200).json()
    [(status, decided_by)] = await rows(
        realm, "SELECT status, decided_by FROM workflow_approvals WHERE id = :a", a=approval_id
    )
    assert (status, decided_by) == (winner["status"], winner["decided_by"])
    decisions = await rows(
        realm,
        "SELECT count(*) FROM audit_events WHERE subject_id = :a AND type IN "
        "('workflow.approval.approved', 'workflow.approval.rejected')",
        a=approval_id,
    )
    assert decisions == [(1,)]
    await drain(runner)
    run, _ = await load(realm, run_id)
    assert run.state == ("succeeded" if status == "approved" else "failed")


async def test_delegation_hands_the_decision_on_never_to_the_subject(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user()
    approver = await realm.user()
    delegate = await realm.user("deputy@example.com")
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    run_id = await start(realm, wid, subject.id)
    runner = make_runner(realm, clock_now())
    await drain(runner)
    token = await realm.token(approver, audience="account")
    approval = await approval_of(client, realm, token)
    url = f"{realm.api}/approvals/{approval['id']}"
    refused = await client.post(f"{url}/delegate", json={"user_id": subject.id}, headers=bearer(token))
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "/user_id"
    handed = await client.post(f"{url}/delegate", json={"user_id": delegate.id}, headers=bearer(token))
    assert handed.status_code == 200 and handed.json()["approvers"] == [delegate.id]
    assert (await client.post(f"{url}/approve", headers=bearer(token))).status_code == 409
    assert (await client.get(url, headers=bearer(token))).status_code == 200  # still in their history
    deputy = await realm.token(delegate, audience="account")
    assert (await client.post(f"{url}/approve", headers=bearer(deputy))).status_code == 200
    await drain(runner)
    run, _ = await load(realm, run_id)
    assert run.state == "succeeded"
    events = await audit(realm, run_id)
    assert ("workflow.approval.delegated", "user", approver.id, "authorization") in events
    assert ("workflow.approval.approved", "user", delegate.id, "authorization") in events
    notified = await rows(realm, "SELECT notice, state FROM workflow_notices WHERE user_id = :u", u=delegate.id)
    assert notified == [("approval_requested", "not_configured")]


async def test_a_delegated_decision_is_queued_for_mail_to_the_deputy_when_mail_is_configured(
    realm: RealmHandle, settings: Settings, database_url: str, smtp_server: Mailbox
) -> None:
    subject = await realm.user()
    approver = await realm.user()
    deputy = await realm.user("deputy@example.com")
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock_now()))
    token = await realm.token(approver, audience="account")
    app = create_app(dataclasses.replace(settings, mail=smtp_server.settings), database_url=database_url)
    async with AsyncTestClient(app=app) as client:
        approval = await approval_of(client, realm, token)
        handed = await client.post(
            f"{realm.api}/approvals/{approval['id']}/delegate", json={"user_id": deputy.id}, headers=bearer(token)
        )
    assert handed.status_code == 200, handed.text
    notified = await rows(realm, "SELECT notice, state FROM workflow_notices WHERE user_id = :u", u=deputy.id)
    assert notified == [("approval_requested", "queued")]


# --- Wait and notify ------------------------------------------------------------------------------


async def test_wait_holds_the_run_until_due_and_survives_a_restart(realm: RealmHandle) -> None:
    subject = await realm.user()
    wid = await publish(realm, manual({"id": "pause", "type": "wait", "duration": "2h"}, {"id": "done", "type": "end"}))
    clock = clock_now()
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock))
    run, attempts = await load(realm, run_id)
    assert run.state == "waiting" and attempts == []
    assert run.due_at is not None and abs((run.due_at - (clock.now() + timedelta(hours=2))).total_seconds()) < 1
    clock.advance(minutes=119)
    await drain(make_runner(realm, clock, worker="worker-appr-2-bbbb"))
    assert (await load(realm, run_id))[0].state == "waiting"
    clock.advance(minutes=2)
    await drain(make_runner(realm, clock, worker="worker-appr-3-cccc"))
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded"
    assert [(a.step_id, a.state) for a in attempts] == [("pause", "succeeded"), ("done", "succeeded")]
    assert attempts[0].max_attempts == 1 and attempts[0].started_at < attempts[0].finished_at


async def test_notice_without_a_mail_server_is_recorded_not_configured(realm: RealmHandle, client: Client) -> None:
    subject = await realm.user("someone@example.com")
    wid = await publish(realm, manual({"id": "tell", "type": "notify", "notice": "welcome"}))
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock_now()))
    run, attempts = await load(realm, run_id)
    assert run.state == "succeeded"
    listed = await client.get(f"{realm.api}/notices", params={"user_id": subject.id}, headers=realm.headers)
    [notice] = listed.json()["items"]
    assert (notice["run_id"], notice["notice"], notice["to"], notice["state"], notice["attempts"]) == (
        run_id,
        "welcome",
        "someone@example.com",
        "not_configured",
        0,
    )
    assert notice["last_error"] == "not sent: no mail server configured"
    assert attempts[0].compensation_state == "not_needed"


async def test_mail_failures_are_retried_with_backoff_and_a_claimed_notice_is_never_lost(
    realm: RealmHandle, smtp_server: Mailbox
) -> None:
    subject = await realm.user("retry@example.com")
    wid = await publish(realm, manual({"id": "tell", "type": "notify", "notice": "welcome"}))
    clock = clock_now()
    await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock, mail_configured=True))
    smtp_server.refuse = True
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 0
    [(state, attempts, error, next_at)] = await rows(
        realm,
        "SELECT state, attempts, last_error, next_attempt_at FROM workflow_notices WHERE user_id = :u",
        u=subject.id,
    )
    assert (state, attempts) == ("queued", 1) and "451" in error
    assert next_at > clock.now() + timedelta(seconds=20)
    smtp_server.refuse = False
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 0  # not due yet
    clock.advance(seconds=31)
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 1
    assert [m.rcpt_tos for m in smtp_server.messages] == [["retry@example.com"]]
    [(state, attempts)] = await rows(
        realm, "SELECT state, attempts FROM workflow_notices WHERE user_id = :u", u=subject.id
    )
    assert (state, attempts) == ("sent", 2)


async def test_a_sender_that_dies_after_claiming_leaves_the_notice_for_later(
    realm: RealmHandle, smtp_server: Mailbox
) -> None:
    subject = await realm.user("crash@example.com")
    wid = await publish(realm, manual({"id": "tell", "type": "notify", "notice": "welcome"}))
    clock = clock_now()
    await start(realm, wid, subject.id)
    await drain(make_runner(realm, clock, mail_configured=True))
    # A sender claims the notice and dies before sending: the claim committed, the send never happened.
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE workflow_notices SET attempts = 1, next_attempt_at = :hold WHERE user_id = :u"),
            {"hold": clock.now() + timedelta(minutes=2), "u": subject.id},
        )
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 0
    clock.advance(minutes=3)
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 1
    assert [m.rcpt_tos for m in smtp_server.messages] == [["crash@example.com"]]
