"""One-time sign-in links: stored as SHA-256 hashes, usable once, for 15 minutes."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.models import Realm, SignInLink, User
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Unauthorized
from engine.platform.ids import new_id

SIGN_IN_LINK_TTL = timedelta(minutes=15)


async def issue_sign_in_link(
    session: AsyncSession, user: User, *, actor: Actor | None = None
) -> tuple[str, SignInLink]:
    """A one-time link token for ``user`` (15 minutes); only its hash is stored, so the token is
    returned this once. Audited with ``actor`` (the system when an operator ran the CLI)."""
    token = crypto.new_token("sil.", 32)
    row = SignInLink(
        id=new_id("sil"),
        token_hash=crypto.token_hash(token),
        realm_id=user.realm_id,
        user_id=user.id,
        expires_at=SYSTEM_CLOCK.now() + SIGN_IN_LINK_TTL,
    )
    session.add(row)
    await session.flush()
    await record_audit(
        session,
        actor or Actor.system(user.realm_id),
        "user.sign_in_link_created",
        category="authentication",
        subject_type="user",
        subject_id=user.id,
        details={"link_id": row.id, "expires_at": row.expires_at.isoformat()},
    )
    return token, row


async def create_sign_in_link(session: AsyncSession, user: User) -> str:
    token, _ = await issue_sign_in_link(session, user)
    return token


async def sign_in_link_usable(session: AsyncSession, realm: Realm, token: str) -> bool:
    """Whether the link would work now, without spending it (the page before "Continue")."""
    found = await session.scalar(
        select(func.count())
        .select_from(SignInLink)
        .join(User, col(User.id) == col(SignInLink.user_id))
        .where(
            col(SignInLink.token_hash) == crypto.token_hash(token),
            col(SignInLink.realm_id) == realm.id,
            col(SignInLink.used_at).is_(None),
            col(SignInLink.expires_at) > SYSTEM_CLOCK.now(),
            col(User.status) == "active",
        )
    )
    return bool(found)


async def consume_sign_in_link(session: AsyncSession, realm: Realm, token: str) -> User:
    """The link's user; the link is spent. Unknown, used or expired links all answer the same."""
    result = await session.execute(
        update(SignInLink)
        .where(
            col(SignInLink.token_hash) == crypto.token_hash(token),
            col(SignInLink.realm_id) == realm.id,
            col(SignInLink.used_at).is_(None),
            col(SignInLink.expires_at) > SYSTEM_CLOCK.now(),
        )
        .values(used_at=SYSTEM_CLOCK.now())
        .returning(col(SignInLink.user_id))
    )
    user_id = result.scalar_one_or_none()
    if user_id is None:
        raise Unauthorized("This sign-in link is not valid: it was used already, has expired, or is wrong.")
    user = await session.get(User, user_id)
    if user is None or user.status != "active":
        raise Unauthorized("This sign-in link is not valid: it was used already, has expired, or is wrong.")
    return user
