"""TOTP second factors: seeds (encrypted with the operator key), enrolment and verification."""

from __future__ import annotations

from datetime import datetime

import pyotp
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor, record_audit
from engine.directory.models import User
from engine.directory.throttle import (
    PASSWORD_FAILURE,
    SECOND_FACTOR_FAILURE,
    check_throttle,
    clear_failures,
    record_failure,
)
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Forbidden, Unauthorized, invalid

# The code of the refusal that sends a half-finished sign-in back to its first step.
SIGN_IN_AGAIN = "sign_in_again"

TOTP_ISSUER = "Lifecycle Cockpit"


TOTP_PURPOSE = "totp-seed"


def new_totp_secret() -> str:
    return pyotp.random_base32()


def totp_uri(secret: str, email: str, realm_slug: str) -> str:
    return pyotp.TOTP(secret).provisioning_uri(name=email, issuer_name=f"{TOTP_ISSUER} ({realm_slug})")


def verify_totp_code(secret: str, code: str, last_step: int | None, at: datetime | None = None) -> int | None:
    """The time step the code matches (±1 step), or None; a step already used is refused (replay)."""
    code = code.strip().replace(" ", "")
    if not code.isdigit() or len(code) != 6:
        return None
    totp = pyotp.TOTP(secret)
    moment = at or SYSTEM_CLOCK.now()
    current = int(moment.timestamp()) // totp.interval
    for step in (current - 1, current, current + 1):
        if last_step is not None and step <= last_step:
            continue
        if crypto.constant_time_equal(totp.at(step * totp.interval), code):
            return step
    return None


async def enable_totp(
    session: AsyncSession, operator_key: str, user: User, secret: str, code: str, *, mfa_session: bool
) -> None:
    """Enrol a user's first authenticator app, from a browser session that already proved more
    than a password (``mfa_session``: opened with a one-time sign-in link, which an administrator
    or the operator makes). A password alone never sets up the second factor: whoever learned
    the password would otherwise choose the factor too, and reach the administration pages."""
    if not mfa_session:
        raise Forbidden(
            "Setting up two-step verification needs a sign-in link: ask an administrator of the realm for one.",
            code="enrolment_needs_link",
        )
    if user.totp_enabled_at is not None:
        raise Conflict("Two-step verification is set up already.", code="mfa_enrolled")
    step = verify_totp_code(secret, code, None)
    if step is None:
        raise invalid("/code", "The code does not match. Check the time on your phone and try again.", "invalid_code")
    user.totp_secret_enc = crypto.encrypt(operator_key, TOTP_PURPOSE, secret)
    user.totp_enabled_at = SYSTEM_CLOCK.now()
    user.totp_last_step = step
    user.updated_at = SYSTEM_CLOCK.now()
    await session.flush()
    actor = Actor(type="user", id=user.id, realm_id=user.realm_id)
    await record_audit(
        session, actor, "user.mfa_enrolled", category="authentication", subject_type="user", subject_id=user.id
    )


async def check_user_totp(session: AsyncSession, operator_key: str, user: User, code: str) -> bool:
    if not user.totp_secret_enc:
        return False
    secret = crypto.decrypt(operator_key, TOTP_PURPOSE, user.totp_secret_enc)
    step = verify_totp_code(secret, code, user.totp_last_step)
    if step is None:
        return False
    user.totp_last_step = step
    await session.flush()
    return True


async def verify_second_factor(
    session: AsyncSession, operator_key: str, user: User, code: str, client_address: str, *, realm_id: str
) -> None:
    """Check a TOTP code of an enrolled user signing in at ``realm_id``, throttled like passwords
    (wrong codes count as failed sign-ins of the account and of the address, and only a right code
    forgives them). :class:`Unauthorized` when the code is wrong or replayed; with the code
    ``sign_in_again`` (nothing counted) when the user is not of that realm or no longer active."""
    if user.realm_id != realm_id or user.status != "active":
        raise Unauthorized("Sign in again.", code=SIGN_IN_AGAIN)
    await check_throttle(session, user.realm_id, user.email, client_address)
    if not await check_user_totp(session, operator_key, user, code):
        await record_failure(session, user.realm_id, user.email, client_address, kind=SECOND_FACTOR_FAILURE)
        raise Unauthorized("The code is not right, or it was used already. Wait for the next code and try again.")
    await clear_failures(session, user.realm_id, user.email, kinds=(PASSWORD_FAILURE, SECOND_FACTOR_FAILURE))
