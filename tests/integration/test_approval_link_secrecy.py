"""One-time approval links live only in the mail: never stored, shown or logged in clear."""

from __future__ import annotations

import hashlib
import html
import logging
import re
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.platform.clock import FixedClock
from engine.platform.config import get_settings
from engine.runs.notices import LINK_PLACEHOLDER, deliver_due_notices
from testing.factories import HTML, RealmHandle, browser_session
from testing.mail import Mailbox
from testing.runs import drain, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]
LINK = re.compile(r"/approval-links/(apl_[A-Za-z0-9_-]+)")


async def asked(realm: RealmHandle, *, mail: bool) -> tuple[FixedClock, str]:
    """A run waiting for one approver's decision; returns the clock and the approver's id."""
    subject = await realm.user()
    approver = await realm.user("approver@example.com")
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock, mail_configured=mail))
    return clock, approver.id


async def test_the_link_is_mailed_whole_and_stored_only_as_a_placeholder(
    realm: RealmHandle,
    client: Client,
    smtp_server: Mailbox,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setenv("COCKPIT_PUBLIC_URL", "https://cockpit.example.com/")
    get_settings.cache_clear()  # the process's settings are read once; read them again with the address
    request.addfinalizer(get_settings.cache_clear)
    clock, approver_id = await asked(realm, mail=True)

    [(body, link_enc)] = await rows(
        realm, "SELECT body, link_enc FROM workflow_notices WHERE user_id = :u", u=approver_id
    )
    assert "apl_" not in body and "approval-links" not in body
    assert f"one-time link: {LINK_PLACEHOLDER}" in body
    assert link_enc and "apl_" not in link_enc and "approval-links" not in link_enc

    # Administrators reading notices see that a link was sent, never the link.
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    shown = await client.get(f"/realms/{realm.slug}/notices", headers=HTML)
    assert shown.status_code == 200
    assert "one-time link: [one-time link: sent by mail only, never stored]" in shown.text
    assert "apl_" not in shown.text
    listed = await client.get(f"{realm.api}/notices", headers=realm.headers)
    assert "apl_" not in listed.text

    # The mail carries the whole link; the database keeps only its hash, and forgets the
    # encrypted copy once the mail is sent.
    assert await deliver_due_notices(realm.sessions, smtp_server.settings, clock=clock) == 1
    [mail] = smtp_server.messages
    plain = mail.message.get_body(("plain",)).get_content()
    html_part = mail.message.get_body(("html",)).get_content()
    assert f"https://cockpit.example.com/realms/{realm.slug}/approval-links/apl_" in plain
    found = LINK.search(plain)
    assert found is not None and found.group(1) in html_part and LINK_PLACEHOLDER not in plain
    [(token_hash,)] = await rows(realm, "SELECT token_hash FROM approval_links WHERE user_id = :u", u=approver_id)
    assert token_hash == hashlib.sha256(found.group(1).encode()).hexdigest()
    [(state, link_enc, body_after)] = await rows(
        realm, "SELECT state, link_enc, body FROM workflow_notices WHERE user_id = :u", u=approver_id
    )
    assert (state, link_enc, body_after) == ("sent", None, body)


async def test_without_a_mail_server_no_link_is_made(realm: RealmHandle) -> None:
    _clock, approver_id = await asked(realm, mail=False)
    [(body, link_enc, state)] = await rows(
        realm, "SELECT body, link_enc, state FROM workflow_notices WHERE user_id = :u", u=approver_id
    )
    assert state == "not_configured" and link_enc is None
    assert "approval-links" not in body and LINK_PLACEHOLDER not in body
    assert "Decide after signing in on the cockpit's approvals page." in html.unescape(body)
    assert await rows(realm, "SELECT id FROM approval_links WHERE user_id = :u", u=approver_id) == []


async def test_access_logs_redact_the_token_in_a_link_path(
    realm: RealmHandle, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "apl_" + "s3cr3t" * 7
    login = await browser_session(realm, await realm.user(), mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    with caplog.at_level(logging.INFO, logger="cockpit"):
        opened = await client.get(f"/realms/{realm.slug}/approval-links/{secret}", headers=HTML)
    assert opened.status_code == 404
    access = [r for r in caplog.records if r.name == "cockpit.access"]
    assert [getattr(r, "path", None) for r in access] == [f"/realms/{realm.slug}/approval-links/[redacted]"]
    for record in caplog.records:
        assert secret not in record.getMessage() and secret not in str(record.__dict__)
