"""Notices: one message to one user, recorded in the run's transaction and mailed after it commits.

A ``notify`` step (and every approval request) records a notice with the text already rendered
from the realm's ``workflow_notice`` template. Mail goes out later, outside any transaction, from
the worker's sender pass: it claims due notices with ``FOR UPDATE SKIP LOCKED``, pushes their next
try a little into the future before the transaction ends (so a crash between the claim and the
send only delays the notice), sends through SMTP, and records the outcome. Delivery is therefore
at least once and never lost. Without a mail server (``COCKPIT_SMTP_URL`` and
``COCKPIT_MAIL_FROM``) a notice is recorded ``not_configured`` and shown in the cockpit.
Notices are mandatory: no preference or suppression list mutes them.

A one-time link (an approval request's decision link) is never kept in clear: the stored body
says where the link goes (``LINK_PLACEHOLDER``, what the Notices page shows), the link itself is
kept encrypted with the operator key (``link_enc``) only until the mail carrying it is sent, and
the sender puts it into the message it builds.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, NamedTuple

import aiosmtplib
from sqlalchemy import Select, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from engine.directory.models import User
from engine.directory.notice_templates import render_notice
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.platform.config import MailSettings, get_settings
from engine.platform.errors import Issue, ValidationFailed
from engine.platform.ids import new_id
from engine.platform.pagination import Page, keyset_page
from engine.runs import read_models
from engine.runs.approval_models import WorkflowNotice
from engine.runs.retry import delay_ms
from engine.workflows.models import Workflow

log = logging.getLogger("cockpit.notices")

QUEUED, SENT, FAILED, NOT_CONFIGURED = "queued", "sent", "failed", "not_configured"
MAX_SEND_ATTEMPTS = 8
SEND_BACKOFF_MS = 30_000
CLAIM_HOLD = timedelta(minutes=2)  # a claimed notice is tried again after this if its sender died
SEND_TIMEOUT_S = 20.0
NOT_CONFIGURED_TEXT = "not sent: no mail server configured"
LINK_PLACEHOLDER = "[one-time link: sent by mail only, never stored]"
LINK_PURPOSE = "notice-link"


async def record_notice(
    session: AsyncSession,
    *,
    realm_id: str,
    user_id: str,
    to_address: str | None,
    notice: str,
    workflow_id: str | None,
    workflow_name: str,
    run_id: str | None,
    approval_id: str | None = None,
    now: datetime,
    mail_configured: bool,
    extra_text: str | None = None,
    link: str | None = None,
) -> WorkflowNotice:
    """Record one notice, rendered now in the realm's wording; sent after this transaction commits.

    ``link`` is a one-time link for the mail: ``extra_text`` names it with ``LINK_PLACEHOLDER``,
    and it is stored only encrypted, only when the notice will be mailed.
    """
    assert link is None or (extra_text is not None and LINK_PLACEHOLDER in extra_text)
    rendered = await render_notice(session, realm_id, workflow_name, notice, now)
    body = rendered.body + (f"\n\n{html.escape(extra_text)}" if extra_text else "")
    row = WorkflowNotice(
        id=new_id("ntc"),
        realm_id=realm_id,
        run_id=run_id,
        approval_id=approval_id,
        workflow_id=workflow_id,
        user_id=user_id,
        notice=notice,
        to_address=to_address,
        subject=rendered.subject[:300],
        body=body,
        state=QUEUED if mail_configured else NOT_CONFIGURED,
        next_attempt_at=now if mail_configured else None,
        last_error=None if mail_configured else NOT_CONFIGURED_TEXT,
        created_at=now,
        link_enc=crypto.encrypt(get_settings().secret_key, LINK_PURPOSE, link) if link and mail_configured else None,
    )
    session.add(row)
    return row


def notice_view(row: WorkflowNotice) -> read_models.Notice:
    return read_models.Notice(
        id=row.id,
        run_id=row.run_id,
        approval_id=row.approval_id,
        workflow_id=row.workflow_id,
        user_id=row.user_id,
        notice=row.notice,
        to=row.to_address,
        subject=row.subject,
        state=row.state,
        attempts=row.attempts,
        created_at=row.created_at,
        sent_at=row.sent_at,
        next_attempt_at=row.next_attempt_at if row.state == QUEUED else None,
        last_error=row.last_error,
    )


def notice_page(page: Page[WorkflowNotice]) -> read_models.NoticePage:
    return read_models.NoticePage(items=[notice_view(n) for n in page.items], next_cursor=page.next_cursor)


async def list_notices(
    session: AsyncSession,
    realm_id: str,
    *,
    run_id: str | None = None,
    user_id: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
    user_ids: Sequence[str] | None = None,
    workflow_ids: Sequence[str] | None = None,
) -> Page[WorkflowNotice]:
    """``user_ids`` / ``workflow_ids``: any of these recipients / workflows (what a name matched)."""
    query: Select[Any] = select(WorkflowNotice).where(col(WorkflowNotice.realm_id) == realm_id)
    if run_id:
        query = query.where(col(WorkflowNotice.run_id) == run_id)
    if user_id:
        query = query.where(col(WorkflowNotice.user_id) == user_id)
    if user_ids is not None:
        query = query.where(col(WorkflowNotice.user_id).in_(list(user_ids)))
    if workflow_ids is not None:
        query = query.where(col(WorkflowNotice.workflow_id).in_(list(workflow_ids)))
    return await keyset_page(session, query, col(WorkflowNotice.id), cursor=cursor, limit=limit, descending=True)


def check_filters(run_id: str | None, user_id: str | None) -> None:
    issues = []
    for name, value in (("run_id", run_id), ("user_id", user_id)):
        if value is not None and (len(value) > 40 or not value.strip()):
            issues.append(Issue(f"/{name}", "invalid", "must be an id"))
    if issues:
        raise ValidationFailed("The filters are not valid.", issues=issues)


class NoticeNames(NamedTuple):
    """What a page of notices names, by id: its recipients and the workflows that sent them."""

    people: dict[str, str]  # recipient id -> display name (people of the realm only)
    workflows: dict[str, str]  # workflow id -> name


async def names_for_notices(session: AsyncSession, realm_id: str, notices: Sequence[WorkflowNotice]) -> NoticeNames:
    """The recipients' display names and the workflows' names of ``notices``: a statement for each
    kind named, none when a page names nothing. A former user or a deleted workflow is absent."""
    user_ids = sorted({n.user_id for n in notices})
    workflow_ids = sorted({n.workflow_id for n in notices if n.workflow_id})
    people: dict[str, str] = {}
    if user_ids:
        rows = await session.execute(
            select(col(User.id), col(User.display_name)).where(
                col(User.id).in_(user_ids), col(User.realm_id) == realm_id
            )
        )
        people = {user_id: name for user_id, name in rows}
    workflows: dict[str, str] = {}
    if workflow_ids:
        rows = await session.execute(
            select(col(Workflow.id), col(Workflow.name)).where(
                col(Workflow.id).in_(workflow_ids), col(Workflow.realm_id) == realm_id
            )
        )
        workflows = {workflow_id: name for workflow_id, name in rows}
    return NoticeNames(people, workflows)


# --- Sending ----------------------------------------------------------------------------------------

_CLAIM = text(
    """
    UPDATE workflow_notices n
       SET attempts = n.attempts + 1, next_attempt_at = :hold
     WHERE n.id IN (SELECT id FROM workflow_notices
                     WHERE state = 'queued' AND next_attempt_at <= :now
                     ORDER BY next_attempt_at
                     LIMIT :limit
                     FOR UPDATE SKIP LOCKED)
    RETURNING n.id, n.to_address, n.subject, n.body, n.attempts, n.link_enc
    """
)


def with_link(body: str, link_enc: str | None, operator_key: str) -> str:
    """The body as mailed: the placeholder replaced by the one-time link it stands for."""
    if link_enc is None:
        return body
    link = crypto.decrypt(operator_key, LINK_PURPOSE, link_enc)
    return body.replace(html.escape(LINK_PLACEHOLDER), html.escape(link))


def build_message(mail: MailSettings, notice_id: str, to_address: str, subject: str, body: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = mail.mail_from
    message["To"] = to_address
    message["Subject"] = subject
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(idstring=notice_id)
    message["X-Cockpit-Notice-Id"] = notice_id
    message["Auto-Submitted"] = "auto-generated"
    # The stored body has its values escaped for HTML, but the realm's own wording around them is
    # as the realm wrote it. Both parts start from the text as written: the plain part shows it,
    # the HTML part escapes all of it, so wording can never add markup (a link, a form) to a mail.
    written = html.unescape(body)
    message.set_content(written)
    paragraphs = "</p><p>".join(html.escape(part).replace("\n", "<br>") for part in written.split("\n\n"))
    message.add_alternative(f"<!doctype html><html><body><p>{paragraphs}</p></body></html>", subtype="html")
    return message


async def send_mail(mail: MailSettings, message: EmailMessage) -> None:
    await aiosmtplib.send(
        message,
        hostname=mail.host,
        port=mail.port,
        username=mail.username,
        password=mail.password,
        use_tls=mail.security == "tls",
        start_tls=True if mail.security == "starttls" else False,
        timeout=SEND_TIMEOUT_S,
    )


async def deliver_due_notices(
    sessions: async_sessionmaker[AsyncSession],
    mail: MailSettings | None,
    *,
    clock: Clock | None = None,
    limit: int = 20,
) -> int:
    """Send the notices that are due; returns how many were sent."""
    clock = clock or SYSTEM_CLOCK
    now = clock.now()
    async with sessions() as session, session.begin():
        claimed = (await session.execute(_CLAIM, {"now": now, "hold": now + CLAIM_HOLD, "limit": limit})).all()
    sent = 0
    operator_key = get_settings().secret_key if any(row[5] for row in claimed) else ""
    for notice_id, to_address, subject, body, attempts, link_enc in claimed:
        state, error, next_at = SENT, None, None
        if mail is None:
            state, error = NOT_CONFIGURED, NOT_CONFIGURED_TEXT
        elif not to_address:
            state, error = FAILED, "no_recipients: the user has no email address"
        else:
            try:
                mailed = with_link(body, link_enc, operator_key)
                await send_mail(mail, build_message(mail, notice_id, to_address, subject, mailed))
            except Exception as exc:  # network, refusal, timeout: tried again with backoff
                error = f"{type(exc).__name__}: {exc}"[:2000]
                log.warning("sending a notice failed", extra={"notice_id": notice_id, "attempt": attempts})
                if attempts >= MAX_SEND_ATTEMPTS:
                    state = FAILED
                else:
                    state = QUEUED
                    next_at = clock.now() + timedelta(
                        milliseconds=delay_ms(SEND_BACKOFF_MS, attempts, rand=clock.random)
                    )
        async with sessions() as session, session.begin():
            await session.execute(
                text(
                    "UPDATE workflow_notices SET state = :state, last_error = :error, next_attempt_at = :next_at,"
                    " sent_at = :sent_at, link_enc = CASE WHEN :queued THEN link_enc END WHERE id = :id"
                ),
                {
                    "state": state,
                    "queued": state == QUEUED,  # the link is kept only while the mail may still go
                    "error": error,
                    "next_at": next_at,
                    "sent_at": clock.now() if state == SENT else None,
                    "id": notice_id,
                },
            )
        if state == SENT:
            sent += 1
    return sent
