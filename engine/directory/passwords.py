"""Signing in with a password (argon2id), under the throttle of failed sign-ins."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.accounts import normalize_email, user_by_email
from engine.directory.models import Realm, SignInFailure, User
from engine.directory.realms import realm_by_slug
from engine.directory.throttle import (
    PASSWORD_FAILURE,
    THROTTLE_PER_ACCOUNT,
    THROTTLE_PER_ADDRESS,
    THROTTLE_WINDOW,
    UnknownRealmFailures,
    check_throttle,
    clear_failures,
    record_failure,
)
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import TooManyRequests, Unauthorized


async def authenticate_password(
    session: AsyncSession,
    realm: Realm,
    email: str,
    password: str,
    client_address: str,
    *,
    unstored_address_failures: int = 0,
) -> User:
    """The user whose password this is, or :class:`Unauthorized` (same answer for every reason).

    Failures are committed by the caller even when the sign-in fails, so throttling holds.
    """
    email = normalize_email(email)
    await check_throttle(session, realm.id, email, client_address, unstored_address_failures=unstored_address_failures)
    user = await user_by_email(session, realm.id, email)
    ok = crypto.verify_password(user.password_hash if user else None, password)
    if not user or not ok or user.status != "active":
        await record_failure(session, realm.id, email, client_address)
        raise Unauthorized("The email or password is not right.")
    # The right password forgives wrong passwords, never wrong codes: "right password, four wrong
    # codes" would otherwise start again from nothing each time.
    await clear_failures(session, realm.id, email, kinds=(PASSWORD_FAILURE,))
    return user


async def sign_in_with_password(
    session: AsyncSession,
    realm_slug: str,
    email: str,
    password: str,
    client_address: str,
    unknown_realms: UnknownRealmFailures,
) -> User:
    """Password sign-in at a realm named by its slug; a realm that does not exist answers like a
    wrong password (and is throttled like one), so the page never tells whether it exists."""
    email = normalize_email(email)
    unstored = unknown_realms.per_address(client_address)
    realm = await realm_by_slug(session, realm_slug)
    if realm is not None:
        return await authenticate_password(
            session, realm, email, password, client_address, unstored_address_failures=unstored
        )
    stored = await session.scalar(
        select(func.count())
        .select_from(SignInFailure)
        .where(
            col(SignInFailure.client_address) == client_address,
            col(SignInFailure.occurred_at) > SYSTEM_CLOCK.now() - THROTTLE_WINDOW,
        )
    )
    if (
        unknown_realms.per_account(realm_slug, email) >= THROTTLE_PER_ACCOUNT
        or (stored or 0) + unstored >= THROTTLE_PER_ADDRESS
    ):
        raise TooManyRequests(
            "Too many failed sign-ins. Wait a few minutes and try again.",
            retry_after_s=int(THROTTLE_WINDOW.total_seconds()),
        )
    crypto.verify_password(None, password)  # the time a real check takes
    unknown_realms.record(realm_slug, email, client_address)
    raise Unauthorized("The email or password is not right.")
