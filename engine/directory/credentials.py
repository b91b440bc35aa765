"""Every request's credential check: one statement, and the holder's authority kept by epoch.

The web app's guard asks two things of every request: is the bearer token or browser session it
presents live, and what may its holder do. Both used to be read through the ORM: the credential
with its holder and realm, then the authority (the recursive group query of
:func:`engine.directory.authz.load_authority`), each a few hundred microseconds of Python around
a query PostgreSQL answers in tens. Here:

- **The credential is read afresh on every request**, in one statement on the raw asyncpg
  connection (:data:`TOKEN_SQL`, :data:`SESSION_SQL`): the token or browser session, its holder,
  its realm, and the two authorization epochs (``realms.authz_epoch``, ``users.authz_epoch``;
  migration 0007). A revoked or expired token, an ended session, a suspended user: the next
  request is refused, whatever any process remembers.
- **The authority is kept in the process** (:class:`AuthorityCache`), with the epochs it was read
  at. Triggers move the realm's epoch on every change to its roles, groups, the roles groups
  grant and service principals' assignments, and a user's epoch on every change to that user's
  status, role assignments, group and organization memberships. While both epochs are where they
  were — and the earliest expiring grant has not expired — nothing the authority was computed
  from has changed, so it is used without a statement of its own; when either moved, the
  authority is read again. The epochs are read in the credential's statement *before* the
  authority, so an authority is never older than the epochs it is filed under: a change that
  commits in between moves the epochs past them, and the next request reads it again.

Nothing else is kept: the realm, the holder's name and status come back with every credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.directory.authz import AUTHORITY_SQL, Authority, Grant
from engine.directory.sessions import SESSION_IDLE
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.db import Driver, positional

TOUCH_EVERY = timedelta(minutes=1)  # "last used" marks are written at most this often
CACHE_LIMIT = 10_000  # authorities kept per process; a full cache starts again empty


# A bearer token by its hash, with whoever holds it (a user or a service principal), its realm
# and the authorization epochs its holder's authority is filed under (a service principal's
# assignments move the realm's epoch, so its own is 0). Primary-key and unique-index probes.
TOKEN_SQL = positional(
    """
    SELECT t.id, t.realm_id, t.audience, t.expires_at, t.revoked_at, t.last_used_at,
           t.user_id, t.service_principal_id,
           r.slug, r.name, r.created_at, r.authz_epoch,
           u.status, u.display_name, u.email, u.authz_epoch,
           sp.name
      FROM api_tokens t
      JOIN realms r ON r.id = t.realm_id
      LEFT JOIN users u ON u.id = t.user_id
      LEFT JOIN service_principals sp ON sp.id = t.service_principal_id
     WHERE t.token_hash = :hash
    """
)

# A browser session by its cookie's hash, with its user, realm and epochs.
SESSION_SQL = positional(
    """
    SELECT s.id, s.realm_id, s.mfa, s.expires_at, s.revoked_at, s.last_seen_at,
           s.user_id,
           r.slug, r.name, r.created_at, r.authz_epoch,
           u.status, u.display_name, u.email, u.authz_epoch
      FROM sessions s
      JOIN realms r ON r.id = s.realm_id
      JOIN users u ON u.id = s.user_id
     WHERE s.token_hash = :hash
    """
)

# "Last used": at most once a minute per credential, a statement of its own.
TOUCH_TOKEN_SQL = positional("UPDATE api_tokens SET last_used_at = :moment WHERE id = :id")
TOUCH_SESSION_SQL = positional("UPDATE sessions SET last_seen_at = :moment WHERE id = :id")

_AUTHORITY = positional(AUTHORITY_SQL)


@dataclass(frozen=True)
class RealmRow:
    id: str
    slug: str
    name: str
    created_at: datetime
    authz_epoch: int


@dataclass(frozen=True)
class Caller:
    """A live credential and who holds it, as read by this request."""

    realm: RealmRow
    principal_type: str  # user | service_principal
    principal_id: str
    display_name: str
    email: str | None
    audience: str  # admin | account
    via: str  # token | session
    credential_id: str  # the token's or the browser session's id
    user_epoch: int  # 0 for a service principal
    touched: bool  # this request recorded the credential's use


async def check_token(conn: Driver, token: str, *, moment: datetime | None = None) -> Caller | None:
    """The holder of a live bearer token, or None (unknown, revoked, expired, holder not active)."""
    if not token.startswith("pat_"):
        return None
    moment = moment or SYSTEM_CLOCK.now()
    row = await conn.fetchrow(TOKEN_SQL.sql, crypto.token_hash(token))
    if row is None:
        return None
    (token_id, realm_id, audience, expires_at, revoked_at, last_used_at, user_id, principal_id) = row[:8]
    (slug, realm_name, realm_created, realm_epoch, status, display_name, email, user_epoch, principal_name) = row[8:]
    if revoked_at is not None or (expires_at is not None and expires_at <= moment):
        return None
    realm = RealmRow(realm_id, slug, realm_name, realm_created, realm_epoch)
    if user_id is not None:
        if status != "active":
            return None
        holder = ("user", user_id, display_name, email, user_epoch)
    elif principal_id is not None and principal_name is not None:
        holder = ("service_principal", principal_id, principal_name, None, 0)
    else:
        return None
    touched = last_used_at is None or moment - last_used_at > TOUCH_EVERY
    if touched:
        await conn.execute(TOUCH_TOKEN_SQL.sql, *TOUCH_TOKEN_SQL.args({"moment": moment, "id": token_id}))
    kind, holder_id, name, holder_email, epoch = holder
    return Caller(realm, kind, holder_id, name, holder_email, audience, "token", token_id, epoch, touched)


async def check_session(conn: Driver, cookie: str, *, moment: datetime | None = None) -> Caller | None:
    """The user of a live browser session, or None (unknown, revoked, idle, past its absolute
    expiry, user not active)."""
    moment = moment or SYSTEM_CLOCK.now()
    row = await conn.fetchrow(SESSION_SQL.sql, crypto.token_hash(cookie))
    if row is None:
        return None
    (session_id, realm_id, mfa, expires_at, revoked_at, last_seen_at, user_id) = row[:7]
    (slug, realm_name, realm_created, realm_epoch, status, display_name, email, user_epoch) = row[7:]
    if revoked_at is not None or expires_at <= moment or last_seen_at + SESSION_IDLE <= moment:
        return None
    if status != "active":
        return None
    touched = moment - last_seen_at > TOUCH_EVERY
    if touched:
        await conn.execute(TOUCH_SESSION_SQL.sql, *TOUCH_SESSION_SQL.args({"moment": moment, "id": session_id}))
    realm = RealmRow(realm_id, slug, realm_name, realm_created, realm_epoch)
    audience = "admin" if mfa else "account"
    return Caller(realm, "user", user_id, display_name, email, audience, "session", session_id, user_epoch, touched)


@dataclass(frozen=True)
class _Kept:
    realm_epoch: int
    user_epoch: int
    valid_until: datetime | None  # the earliest expiry of the grants it counts
    grants: tuple[Grant, ...]


class AuthorityCache:
    """Callers' authority, kept per process while the epochs it was read at stand (see the module)."""

    def __init__(self, limit: int = CACHE_LIMIT) -> None:
        self.limit = limit
        self._kept: dict[tuple[str, str, str], _Kept] = {}
        self.reads = 0  # authorities read from the database (for tests and benchmarks)

    def clear(self) -> None:
        self._kept.clear()

    async def authority(self, conn: Driver, caller: Caller, *, moment: datetime | None = None) -> Authority:
        """The caller's authority now: kept, or read on ``conn`` (the credential's connection)."""
        moment = moment or SYSTEM_CLOCK.now()
        key = (caller.realm.id, caller.principal_type, caller.principal_id)
        kept = self._kept.get(key)
        if (
            kept is not None
            and kept.realm_epoch == caller.realm.authz_epoch
            and kept.user_epoch == caller.user_epoch
            and (kept.valid_until is None or kept.valid_until > moment)
        ):
            # A fresh object each time: a handler may not change what the next request sees.
            return Authority(caller.principal_type, caller.principal_id, list(kept.grants))
        self.reads += 1
        rows = await conn.fetch(
            _AUTHORITY.sql, *_AUTHORITY.args({"realm": caller.realm.id, "pid": caller.principal_id, "now": moment})
        )
        grants = tuple(Grant(frozenset(row[0] or ()), row[1]) for row in rows)
        expiries = [row[2] for row in rows if row[2] is not None]
        if len(self._kept) >= self.limit:
            self._kept.clear()
        self._kept[key] = _Kept(caller.realm.authz_epoch, caller.user_epoch, min(expiries, default=None), grants)
        return Authority(caller.principal_type, caller.principal_id, list(grants))
