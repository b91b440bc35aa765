"""Mailed notices: the realm's wording is text in both parts of a mail, never markup."""

from __future__ import annotations

from engine.directory import notice_templates
from engine.platform.clock import SYSTEM_CLOCK
from engine.runs.notices import deliver_due_notices, record_notice
from testing.factories import RealmHandle
from testing.mail import Mailbox

WORDING = 'Hello,\n\n<a href="https://evil.example/login">Sign in here</a> & {{notice}}\n\n<img src=x onerror=alert(1)> {{workflow}}'


async def test_the_realms_wording_is_escaped_in_the_html_part_and_as_written_in_the_plain_part(
    realm: RealmHandle, smtp_server: Mailbox
) -> None:
    user = await realm.user("reader@example.com")
    async with realm.sessions() as session, session.begin():
        await notice_templates.put_template(
            session, realm.actor, notice_templates.WORKFLOW_NOTICE, subject="{{notice}}", body=WORDING
        )
        await record_notice(
            session,
            realm_id=realm.id,
            user_id=user.id,
            to_address=user.email,
            notice="welcome",
            workflow_id=None,
            workflow_name="Onboarding <b>",
            run_id=None,
            now=SYSTEM_CLOCK.now(),
            mail_configured=True,
        )
    assert await deliver_due_notices(realm.sessions, smtp_server.settings) == 1
    [mail] = smtp_server.messages
    html_part = mail.message.get_body(("html",)).get_content()
    assert "<a " not in html_part and "<img" not in html_part
    assert "&lt;a href=&quot;https://evil.example/login&quot;&gt;Sign in here&lt;/a&gt; &amp; Welcome!" in html_part
    assert "Onboarding &lt;b&gt;" in html_part and "</p><p>" in html_part  # values escaped once, paragraphs kept
    plain = mail.message.get_body(("plain",)).get_content()
    assert '<a href="https://evil.example/login">Sign in here</a> & Welcome! Your account is ready to use.' in plain
    assert "onerror=alert(1)> Onboarding <b>" in plain
