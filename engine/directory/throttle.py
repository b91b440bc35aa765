"""The throttling of failed sign-ins: per account and per client address, over a window.

Failures at realms that exist are rows (``sign_in_failures``); failures at realm slugs that do
not exist are kept in the memory of one process (:class:`UnknownRealmFailures`) and answered the
same way.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.models import SignInFailure
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import TooManyRequests

THROTTLE_WINDOW = timedelta(minutes=15)
THROTTLE_PER_ACCOUNT = 5
THROTTLE_PER_ADDRESS = 20


PASSWORD_FAILURE = "password"  # noqa: S105  (a kind of failure, not a password)
SECOND_FACTOR_FAILURE = "second_factor"

# One transaction at a time counts and records the failures of an account, and of a client
# address: the check, the attempt and its record are one step for everyone else, so a burst of
# concurrent attempts lets exactly the allowed number through. Always the account first, then the
# address (every transaction takes both in that order, so two never wait on each other).
_THROTTLE_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")


async def _lock_throttle(session: AsyncSession, realm_id: str, email: str, client_address: str) -> None:
    await session.execute(_THROTTLE_LOCK, {"key": f"sign-in-throttle:account:{realm_id}:{email.lower()}"})
    await session.execute(_THROTTLE_LOCK, {"key": f"sign-in-throttle:address:{client_address}"})


async def check_throttle(
    session: AsyncSession, realm_id: str, email: str, client_address: str, *, unstored_address_failures: int = 0
) -> None:
    """Refuse (429) once the account or the client address failed too often in the window.

    Wrong passwords and wrong second-factor codes count alike, per account and per address. The
    check holds the account's and the address's throttle until the transaction ends (see
    :data:`_THROTTLE_LOCK`): the caller records the outcome in the same transaction.
    ``unstored_address_failures``: failures of this address that have no row (attempts at realms
    that do not exist, see :class:`UnknownRealmFailures`), counted with the stored ones.
    """
    await _lock_throttle(session, realm_id, email, client_address)
    since = SYSTEM_CLOCK.now() - THROTTLE_WINDOW
    per_account = await session.scalar(
        select(func.count())
        .select_from(SignInFailure)
        .where(
            col(SignInFailure.realm_id) == realm_id,
            col(SignInFailure.email) == email.lower(),
            col(SignInFailure.occurred_at) > since,
        )
    )
    per_address = await session.scalar(
        select(func.count())
        .select_from(SignInFailure)
        .where(col(SignInFailure.client_address) == client_address, col(SignInFailure.occurred_at) > since)
    )
    per_address = (per_address or 0) + unstored_address_failures
    if (per_account or 0) >= THROTTLE_PER_ACCOUNT or per_address >= THROTTLE_PER_ADDRESS:
        raise TooManyRequests(
            "Too many failed sign-ins. Wait a few minutes and try again.",
            retry_after_s=int(THROTTLE_WINDOW.total_seconds()),
        )


async def record_failure(
    session: AsyncSession, realm_id: str, email: str, client_address: str, *, kind: str = PASSWORD_FAILURE
) -> None:
    session.add(SignInFailure(realm_id=realm_id, email=email.lower(), client_address=client_address, kind=kind))
    await session.flush()


async def clear_failures(session: AsyncSession, realm_id: str, email: str, *, kinds: tuple[str, ...]) -> None:
    """Forgive the account's failures of these kinds (after a step that proved who is signing in)."""
    await session.execute(
        delete(SignInFailure).where(
            col(SignInFailure.realm_id) == realm_id,
            col(SignInFailure.email) == email.lower(),
            col(SignInFailure.kind).in_(kinds),
        )
    )


class UnknownRealmFailures:
    """Failed sign-ins at realm slugs that do not exist, kept in the memory of one process.

    They have no realm row to belong to, yet an unknown realm must answer exactly like a known
    one: the same message, the same timing (a dummy password check), and the same 429 after as
    many attempts per account and per client address. Entries older than the window are dropped.
    """

    MAX_KEYS = 10_000

    def __init__(self) -> None:
        self._events: dict[tuple[str, ...], list[datetime]] = {}

    def _recent(self, key: tuple[str, ...], moment: datetime) -> list[datetime]:
        since = moment - THROTTLE_WINDOW
        kept = [at for at in self._events.get(key, []) if at > since]
        if kept:
            self._events[key] = kept
        else:
            self._events.pop(key, None)
        return kept

    def per_address(self, client_address: str, moment: datetime | None = None) -> int:
        return len(self._recent(("address", client_address), moment or SYSTEM_CLOCK.now()))

    def per_account(self, slug: str, email: str, moment: datetime | None = None) -> int:
        return len(self._recent(("account", slug, email.lower()), moment or SYSTEM_CLOCK.now()))

    def record(self, slug: str, email: str, client_address: str, moment: datetime | None = None) -> None:
        moment = moment or SYSTEM_CLOCK.now()
        if len(self._events) >= self.MAX_KEYS:
            for key in list(self._events):
                self._recent(key, moment)
        for key in (("address", client_address), ("account", slug, email.lower())):
            self._events.setdefault(key, []).append(moment)
