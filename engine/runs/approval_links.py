"""Telling approvers: an ``approval_requested`` notice each, and one-time links to the decision.

A mailed notice carries a one-time link to the decision page; only the link's hash is kept
(``approval_links``), and redeeming it opens the approval for its one user, once.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.models import Realm, User
from engine.platform.config import get_settings
from engine.platform.errors import NotFound
from engine.platform.ids import new_id
from engine.runs.approval_models import ApprovalLink, WorkflowApproval
from engine.runs.notices import LINK_PLACEHOLDER, record_notice
from engine.workflows.models import Workflow

LINK_BYTES = 32


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def notify_approvers(
    session: AsyncSession,
    approval: WorkflowApproval,
    approvers: list[str],
    *,
    now: datetime,
    mail_configured: bool,
) -> None:
    """An ``approval_requested`` notice to each approver; a mailed one carries a one-time link to
    the decision page. The link exists only in the mail: the notice row keeps a placeholder and
    the link encrypted until it is sent, ``approval_links`` only its hash. Without a mail server
    nobody would receive a link, so none is made."""
    workflow_name = "Role assignment approval"
    if approval.workflow_id:
        workflow_name = await session.scalar(select(Workflow.name).where(Workflow.id == approval.workflow_id)) or ""
    users = (await session.execute(select(User).where(User.id.in_(approvers)))).scalars().all()  # type: ignore[attr-defined]
    slug = await session.scalar(select(Realm.slug).where(Realm.id == approval.realm_id))
    public_url = get_settings().public_url
    for user in users:
        link = None
        if mail_configured:
            token = await create_link(session, approval, user.id)
            link = f"{public_url or ''}/realms/{slug}/approval-links/{token}"
        await record_notice(
            session,
            realm_id=approval.realm_id,
            user_id=user.id,
            to_address=user.email or None,
            notice="approval_requested",
            workflow_id=approval.workflow_id,
            workflow_name=workflow_name,
            run_id=approval.run_id,
            approval_id=approval.id,
            now=now,
            mail_configured=mail_configured,
            extra_text=(
                "Decide after signing in on the cockpit's approvals page."
                if link is None
                else f"Decide after signing in, with this one-time link: {LINK_PLACEHOLDER}"
                if public_url
                else "Decide after signing in: open the cockpit's approvals page, or use this one-time link"
                f" (a path on the cockpit's address): {LINK_PLACEHOLDER}"
            ),
            link=link,
        )


async def create_link(session: AsyncSession, approval: WorkflowApproval, user_id: str) -> str:
    """A one-time link for ``user_id`` (only its hash is kept; it expires with the approval)."""
    token = "apl_" + secrets.token_urlsafe(LINK_BYTES)
    session.add(
        ApprovalLink(
            id=new_id("apl"),
            token_hash=_hash(token),
            approval_id=approval.id,
            user_id=user_id,
            expires_at=approval.expires_at,
        )
    )
    return token


async def redeem_link(session: AsyncSession, realm_id: str, user_id: str, token: str, *, now: datetime) -> str:
    """Use a one-time link: the approval id it opens; 404 when unknown, used, expired or someone else's."""
    result = await session.execute(
        update(ApprovalLink)
        .where(
            ApprovalLink.token_hash == _hash(token),
            ApprovalLink.user_id == user_id,
            ApprovalLink.used_at.is_(None),  # type: ignore[union-attr]
            ApprovalLink.expires_at > now,  # type: ignore[operator]
        )
        .values(used_at=now)
        .returning(ApprovalLink.approval_id)
    )
    approval_id = result.scalar_one_or_none()
    if approval_id is None:
        raise NotFound("This link is not valid any more (used, expired, or not yours).")
    approval = await session.get(WorkflowApproval, approval_id)
    if approval is None or approval.realm_id != realm_id:
        raise NotFound("This link is not valid any more (used, expired, or not yours).")
    return str(approval_id)
