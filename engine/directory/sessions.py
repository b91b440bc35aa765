"""Browser sessions: opening, resolving, closing and ending them, and ending every credential of a user.

A session cookie is stored as its SHA-256 hash; a session ends after two idle hours and twelve hours
at most.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.directory.models import ApiToken, BrowserSession, Realm, SignInLink, User
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Unauthorized
from engine.platform.ids import new_id

SESSION_IDLE = timedelta(hours=2)
SESSION_ABSOLUTE = timedelta(hours=12)


@dataclass
class SessionInfo:
    session: BrowserSession
    user: User
    touched_at: datetime | None = None  # when this look-up recorded the session's activity
    realm: Realm | None = None


async def touch_session(session: AsyncSession, browser_session_id: str, moment: datetime) -> None:
    """Record that the session was used (at most once a minute; idle expiry counts from it)."""
    await session.execute(
        update(BrowserSession).where(col(BrowserSession.id) == browser_session_id).values(last_seen_at=moment)
    )


async def create_session(
    session: AsyncSession,
    user: User,
    *,
    mfa: bool,
    client_address: str | None = None,
    user_agent: str | None = None,
    replaces: BrowserSession | None = None,
) -> tuple[str, BrowserSession]:
    """A new session (a new id every time: sign-in and MFA rotate it). Returns the cookie value."""
    if not await lock_active_holder(session, user.id):
        raise Unauthorized("This account is suspended.")
    if replaces is not None:
        replaces.revoked_at = SYSTEM_CLOCK.now()
    cookie = crypto.new_token("ses.", 32)
    moment = SYSTEM_CLOCK.now()
    row = BrowserSession(
        id=new_id("ses"),
        token_hash=crypto.token_hash(cookie),
        realm_id=user.realm_id,
        user_id=user.id,
        mfa=mfa,
        expires_at=moment + SESSION_ABSOLUTE,
        client_address=client_address,
        user_agent=(user_agent or "")[:300] or None,
    )
    session.add(row)
    await session.flush()
    return cookie, row


async def resolve_session(session: AsyncSession, cookie: str) -> SessionInfo | None:
    """The live session for this cookie, or None (unknown, revoked, idle or past its absolute expiry)."""
    # One round trip: the session, its user and its realm.
    result = await session.execute(
        select(BrowserSession, User, Realm)
        .join(User, col(User.id) == col(BrowserSession.user_id))
        .join(Realm, col(Realm.id) == col(BrowserSession.realm_id))
        .where(col(BrowserSession.token_hash) == crypto.token_hash(cookie))
    )
    row = result.first()
    if row is None:
        return None
    browser, user, realm = row
    moment = SYSTEM_CLOCK.now()
    if browser.revoked_at or browser.expires_at <= moment or browser.last_seen_at + SESSION_IDLE <= moment:
        return None
    if user.status != "active":
        return None
    touched_at = None
    if moment - browser.last_seen_at > timedelta(minutes=1):
        await touch_session(session, browser.id, moment)
        touched_at = moment
    return SessionInfo(browser, user, touched_at, realm)


async def revoke_session(session: AsyncSession, browser_session_id: str) -> None:
    await session.execute(
        update(BrowserSession).where(col(BrowserSession.id) == browser_session_id).values(revoked_at=SYSTEM_CLOCK.now())
    )


async def lock_active_holder(session: AsyncSession, user_id: str) -> bool:
    """Before a credential is made for a user: the user is active, and stays so until this
    transaction ends (a share lock on their row). A suspension running at the same time either
    waits for this transaction, and then ends the new credential with the others, or commits first,
    and then no credential is made: none outlives a suspension to come back at reactivation."""
    active = await session.scalar(
        select(col(User.id)).where(col(User.id) == user_id, col(User.status) == "active").with_for_update(read=True)
    )
    return active is not None


async def end_sessions(session: AsyncSession, user_id: str, *, keep: str | None = None) -> list[str]:
    """End every live browser session of a user (but ``keep``, the caller's own); their ids."""
    query = update(BrowserSession).where(
        col(BrowserSession.user_id) == user_id,
        col(BrowserSession.revoked_at).is_(None),
        col(BrowserSession.expires_at) > SYSTEM_CLOCK.now(),
    )
    if keep is not None:
        query = query.where(col(BrowserSession.id) != keep)
    result = await session.execute(query.values(revoked_at=SYSTEM_CLOCK.now()).returning(col(BrowserSession.id)))
    return sorted(result.scalars())


async def end_credentials(session: AsyncSession, user_id: str) -> dict[str, int]:
    """End everything that lets a user in: browser sessions, API tokens and unused sign-in links.

    A suspension calls it, so that reactivation starts from nothing: a session, token or link
    made before the suspension never works again."""
    moment = SYSTEM_CLOCK.now()
    sessions_ended = await end_sessions(session, user_id)
    tokens = await session.execute(
        update(ApiToken)
        .where(col(ApiToken.user_id) == user_id, col(ApiToken.revoked_at).is_(None))
        .values(revoked_at=moment)
        .returning(col(ApiToken.id))
    )
    links = await session.execute(
        update(SignInLink)
        .where(col(SignInLink.user_id) == user_id, col(SignInLink.used_at).is_(None))
        .values(used_at=moment)
        .returning(col(SignInLink.id))
    )
    return {"sessions": len(sessions_ended), "tokens": len(tokens.all()), "sign_in_links": len(links.all())}


async def open_session(
    session: AsyncSession,
    user: User,
    *,
    method: str,
    mfa: bool,
    client_address: str | None = None,
    user_agent: str | None = None,
    replaces: BrowserSession | None = None,
    request_id: str | None = None,
) -> tuple[str, BrowserSession]:
    """Sign a user in (or upgrade a session to MFA): a new session id, the replaced one revoked,
    and an audit event. ``method``: password, totp, sign_in_link or mfa_upgrade."""
    cookie, row = await create_session(
        session, user, mfa=mfa, client_address=client_address, user_agent=user_agent, replaces=replaces
    )
    actor = Actor(type="user", id=user.id, realm_id=user.realm_id, request_id=request_id)
    await record_audit(
        session,
        actor,
        "user.mfa_verified" if method == "mfa_upgrade" else "user.signed_in",
        category="authentication",
        subject_type="user",
        subject_id=user.id,
        details={
            "method": method,
            "mfa": mfa,
            "session_id": row.id,
            "replaced_session_id": replaces.id if replaces is not None else None,
        },
    )
    return cookie, row


async def close_session(
    session: AsyncSession, user_id: str, realm_id: str, browser_session_id: str, request_id: str | None = None
) -> None:
    """Sign out: the session stops working at once."""
    await revoke_session(session, browser_session_id)
    actor = Actor(type="user", id=user_id, realm_id=realm_id, request_id=request_id)
    await record_audit(
        session,
        actor,
        "user.signed_out",
        category="authentication",
        subject_type="user",
        subject_id=user_id,
        details={"session_id": browser_session_id},
    )
