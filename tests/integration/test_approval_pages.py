"""The approvers' own pages with an account session (no second factor), and the notices page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.platform.clock import FixedClock
from engine.runs.notices import deliver_due_notices
from testing.factories import HTML, RealmHandle, browser_session
from testing.mail import Mailbox
from testing.runs import drain, load, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def test_an_approver_sees_names_and_decides_on_the_page(realm: RealmHandle, client: Client) -> None:
    org = await realm.organization("Acme")
    subject = await realm.user("hire@example.com", display_name="Hanna Hire")
    approver = await realm.user("bea@example.com", display_name="Bea Boss")
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    await realm.member(org, subject)
    role = await realm.role("Billing admin", ["realm.users.read"], boundary="organization", requires_approval=True)
    wid = await publish(
        realm,
        manual(
            {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "organization"},
            {"id": "tell", "type": "notify", "notice": "access_granted"},
        ),
        name="Billing access",
    )
    run_id = await start(realm, wid, subject.id, org.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock))

    login = await browser_session(realm, approver, mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    waiting = await client.get(f"/realms/{realm.slug}/approvals", headers=HTML)
    assert waiting.status_code == 200
    text = waiting.text
    assert "Billing access for Hanna Hire" in text
    assert "grants role Billing admin in Acme" in text
    assert "sends them the notice “access granted”" in text
    assert f"{realm.admin.display_name}, by hand" in text
    assert "Waiting for me (1)" in text and "usr_" not in text.split("<main", 1)[1]
    [(approval_id,)] = await rows(realm, "SELECT id FROM workflow_approvals WHERE run_id = :r", r=run_id)

    no_csrf = await client.post(
        f"/realms/{realm.slug}/approvals/{approval_id}/decide", data={"decision": "approve"}, headers=HTML
    )
    assert no_csrf.status_code == 403
    decided = await client.post(
        f"/realms/{realm.slug}/approvals/{approval_id}/decide",
        data={"decision": "approve", "comment": "Fine by me", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert decided.status_code == 303
    detail = await client.get(decided.headers["location"], headers=HTML)
    assert "Approved. The run continues" in detail.text and "“Fine by me”" in detail.text
    history = await client.get(f"/realms/{realm.slug}/approvals/decided", headers=HTML)
    assert "Billing access for Hanna Hire" in history.text and "Decided by me (1)" in history.text
    again = await client.post(
        f"/realms/{realm.slug}/approvals/{approval_id}/decide",
        data={"decision": "reject", "_csrf": login.csrf},
        headers=HTML,
    )
    assert again.status_code == 409 and "already approved" in again.text

    # The decision made the run due at the real time it was taken: drain with a clock past it,
    # however long the steps above took on a busy machine.
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(minutes=5))))
    run, _ = await load(realm, run_id)
    assert run.state == "succeeded"
    [(approver_id,)] = await rows(
        realm, "SELECT approver_id FROM role_assignments WHERE user_id = :u AND role_id = :r", u=subject.id, r=role.id
    )
    assert approver_id == approver.id

    # The subject sees nothing: not in a list, 404 on the page.
    client.cookies.clear()
    theirs = await browser_session(realm, subject, mfa=False)
    client.cookies.set("cockpit_session", theirs.cookie, domain="testserver.local")
    assert (await client.get(f"/realms/{realm.slug}/approvals/{approval_id}", headers=HTML)).status_code == 404
    assert "Nothing waits for your decision" in (await client.get(f"/realms/{realm.slug}/approvals", headers=HTML)).text

    # Administrators read the notices with their text.
    client.cookies.clear()
    admin = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", admin.cookie, domain="testserver.local")
    listed = await client.get(f"/realms/{realm.slug}/notices", params={"run_id": run_id}, headers=HTML)
    assert listed.status_code == 200
    assert listed.text.count('data-testid="notice-row"') == 2
    assert "You have been given new access." in listed.text and "A request is waiting for your approval." in listed.text
    assert "not sent: no mail server configured" in listed.text
    # Each notice by its recipient's name and its workflow's name, not by ids.
    assert "Hanna Hire" in listed.text and "Bea Boss" in listed.text and "a former user" not in listed.text
    assert listed.text.count(f'/runs/{run_id}">Billing access</a>') == 4  # two notices, each linked twice
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
    assert re.search(r'id="kpi-pending-approvals".*?data-testid="kpi-value">0<', home.text, re.S)


async def test_the_one_time_link_opens_the_decision_page_once(
    realm: RealmHandle, client: Client, smtp_server: Mailbox
) -> None:
    subject = await realm.user()
    approver = await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock, mail_configured=True))
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 1
    [(approval_id,)] = await rows(realm, "SELECT approval_id FROM workflow_notices WHERE user_id = :u", u=approver.id)
    [mail] = smtp_server.messages
    path = re.search(r"/approval-links/(apl_[A-Za-z0-9_-]+)", mail.message.get_body(("plain",)).get_content())
    assert path is not None
    url = f"/realms/{realm.slug}/approval-links/{path.group(1)}"
    signed_out = await client.get(url, headers=HTML, follow_redirects=False)
    assert signed_out.status_code in (302, 303) and "/sign-in?next=" in signed_out.headers["location"]
    # Someone else cannot spend it.
    other = await browser_session(realm, await realm.user(), mfa=False)
    client.cookies.set("cockpit_session", other.cookie, domain="testserver.local")
    assert (await client.get(url, headers=HTML, follow_redirects=False)).status_code == 404
    client.cookies.clear()
    login = await browser_session(realm, approver, mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    opened = await client.get(url, headers=HTML, follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"].endswith(f"/approvals/{approval_id}")
    assert (await client.get(url, headers=HTML, follow_redirects=False)).status_code == 404  # single use
    stored = await rows(realm, "SELECT token_hash FROM approval_links WHERE approval_id = :a", a=approval_id)
    assert stored and path.group(1) not in stored[0][0]


async def test_the_page_refuses_an_unclear_decision_or_delegation_then_hands_on_and_the_deputy_rejects(
    realm: RealmHandle, client: Client
) -> None:
    subject = await realm.user("subject@example.com")
    approver = await realm.user("approver@example.com")
    deputy = await realm.user("deputy@example.com")
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    run_id = await start(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=5))))
    [(approval_id,)] = await rows(realm, "SELECT id FROM workflow_approvals WHERE run_id = :r", r=run_id)
    url = f"/realms/{realm.slug}/approvals/{approval_id}"
    login = await browser_session(realm, approver, mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")

    unclear = await client.post(
        f"{url}/decide", data={"decision": "maybe", "comment": "Not sure", "_csrf": login.csrf}, headers=HTML
    )
    assert unclear.status_code == 422 and "Choose approve or reject." in unclear.text
    assert ">Not sure</textarea>" in unclear.text  # the comment typed stays

    nobody = await client.post(
        f"{url}/delegate", data={"email": "nobody@example.com", "_csrf": login.csrf}, headers=HTML
    )
    assert nobody.status_code == 422
    assert '<div class="flash bad" role="alert">The delegation is not valid.</div>' in nobody.text
    assert '<p class="field-error" role="alert">no user of this realm has this email address</p>' in nobody.text
    assert 'value="nobody@example.com"' in nobody.text
    starter = await client.post(f"{url}/delegate", data={"email": realm.admin.email, "_csrf": login.csrf}, headers=HTML)
    assert starter.status_code == 422 and f'value="{realm.admin.email}"' in starter.text
    assert re.search(r'id="delegate-email"[^>]*aria-invalid="true"', starter.text)  # beside the email field
    assert (
        '<p class="field-error" role="alert">the run&#39;s starter and its accountable publisher never decide about it</p>'
        in starter.text
    )
    assert await rows(realm, "SELECT approvers, status FROM workflow_approvals WHERE id = :a", a=approval_id) == [
        ([approver.id], "pending")
    ]

    handed = await client.post(
        f"{url}/delegate",
        data={"email": deputy.email, "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert handed.status_code == 303 and handed.headers["location"] == f"{url}?done=delegated"
    assert (
        "Handed on. The person you chose decides now"
        in (await client.get(handed.headers["location"], headers=HTML)).text
    )
    [(approvers, delegated_at)] = await rows(
        realm, "SELECT approvers, delegations -> 0 ->> 'at' FROM workflow_approvals WHERE id = :a", a=approval_id
    )
    assert approvers == [deputy.id] and delegated_at is not None

    client.cookies.clear()
    theirs = await browser_session(realm, deputy, mfa=False)
    client.cookies.set("cockpit_session", theirs.cookie, domain="testserver.local")
    rejected = await client.post(
        f"{url}/decide", data={"decision": "reject", "_csrf": theirs.csrf}, headers=HTML, follow_redirects=False
    )
    assert rejected.status_code == 303 and rejected.headers["location"] == f"{url}?done=rejected"
    shown = await client.get(rejected.headers["location"], headers=HTML)
    assert "Rejected. The run stops and undoes what it did." in shown.text
    assert await rows(realm, "SELECT status, decided_by FROM workflow_approvals WHERE id = :a", a=approval_id) == [
        ("rejected", deputy.id)
    ]
