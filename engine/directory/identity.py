"""Realms and the ways people and automation get in: passwords, TOTP, sessions, sign-in links,
API tokens, and the throttling of failed sign-ins.

Nothing secret is stored in clear: cookies, tokens and links are stored as SHA-256 hashes,
TOTP seeds encrypted with the operator key, passwords with argon2id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyotp
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, emit_event, record_audit
from engine.directory.authz import BUILTIN_ROLES, Authority, needs_permission
from engine.directory.models import (
    ApiToken,
    BrowserSession,
    Realm,
    RealmPolicy,
    Role,
    RoleAssignment,
    ServicePrincipal,
    SignInFailure,
    SignInLink,
    User,
)
from engine.platform import crypto, names
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import (
    Conflict,
    Forbidden,
    TooManyRequests,
    Unauthorized,
    ValidationFailed,
    invalid,
)
from engine.platform.ids import new_id

SESSION_IDLE = timedelta(hours=2)
SESSION_ABSOLUTE = timedelta(hours=12)
SIGN_IN_LINK_TTL = timedelta(minutes=15)
THROTTLE_WINDOW = timedelta(minutes=15)
THROTTLE_PER_ACCOUNT = 5
THROTTLE_PER_ADDRESS = 20
TOTP_ISSUER = "Lifecycle Cockpit"
SLUG_PATTERN = r"^[a-z][a-z0-9-]{1,62}$"
TOKEN_DEFAULT_DAYS = 90  # a token's life when none is asked for (API, pages, CLI)
TOKEN_MAX_DAYS = 365
MAX_TOKEN_LIFETIME = timedelta(days=TOKEN_MAX_DAYS)


# --- Realms ---------------------------------------------------------------------------------------


async def realm_by_slug(session: AsyncSession, slug: str) -> Realm | None:
    result = await session.execute(select(Realm).where(col(Realm.slug) == slug))
    return result.scalar_one_or_none()


async def create_realm(
    session: AsyncSession,
    slug: str,
    *,
    admin_email: str,
    admin_display_name: str | None = None,
    name: str | None = None,
    admin_password: str | None = None,
) -> tuple[Realm, User]:
    """A realm with its built-in roles, its policy and a first administrator holding realm-admin."""
    import re

    if not re.match(SLUG_PATTERN, slug):
        raise invalid("/slug", "A realm slug is 2–63 lower-case letters, digits or dashes, starting with a letter.")
    if await realm_by_slug(session, slug):
        raise Conflict(f"A realm {slug!r} already exists.")
    realm = Realm(id=new_id("rlm"), slug=slug, name=name or slug)
    session.add(realm)
    await session.flush()
    session.add(RealmPolicy(realm_id=realm.id, extensions={"workflow_publish_approval": False}))
    system = Actor.system(realm.id)
    await record_audit(
        session, system, "realm.created", subject_type="realm", subject_id=realm.id, details={"slug": slug}
    )
    roles: dict[str, Role] = {}
    for role_name, spec in BUILTIN_ROLES.items():
        role = Role(
            id=new_id("rol"),
            realm_id=realm.id,
            name=role_name,
            description=spec.description,
            permissions=list(spec.permissions),
            boundary=spec.boundary,
            builtin=True,
        )
        session.add(role)
        roles[role_name] = role
    await session.flush()
    admin = await create_user(
        session,
        system,
        email=admin_email,
        display_name=admin_display_name or admin_email.split("@", 1)[0],
        password=admin_password,
        authority=None,
    )
    assignment = RoleAssignment(
        id=new_id("ras"), realm_id=realm.id, role_id=roles["realm-admin"].id, user_id=admin.id, granted_by=None
    )
    session.add(assignment)
    await session.flush()
    await record_audit(
        session,
        system,
        "role.assigned",
        category="authorization",
        subject_type="user",
        subject_id=admin.id,
        details={"role_id": assignment.role_id, "role": "realm-admin", "assignment_id": assignment.id},
    )
    return realm, admin


async def builtin_role(session: AsyncSession, realm_id: str, name: str) -> Role:
    result = await session.execute(select(Role).where(col(Role.realm_id) == realm_id, col(Role.name) == name))
    return result.scalar_one()


# --- Users ----------------------------------------------------------------------------------------


def normalize_email(email: str) -> str:
    """NFKC (a fullwidth ``ｂob@…`` is ``bob@…``), without surrounding white space."""
    return names.normalize(email)


async def user_by_email(session: AsyncSession, realm_id: str, email: str) -> User | None:
    result = await session.execute(
        select(User).where(
            col(User.realm_id) == realm_id, func.lower(col(User.email)) == normalize_email(email).lower()
        )
    )
    return result.scalar_one_or_none()


@needs_permission("realm.users.write")
async def create_user(
    session: AsyncSession,
    actor: Actor,
    *,
    email: str,
    display_name: str,
    guest: bool = False,
    password: str | None = None,
    authority: Authority | None,
) -> User:
    """A user, with its ``user.created`` outbox event and audit event in the same transaction.

    Email and display name are stored NFKC-normalized; invisible and bidirectional-control
    characters are refused in both, and an email mixing Latin with Cyrillic or Greek too.
    """
    issues = names.hidden_character_issues("/email", email) or names.mixed_script_issues("/email", email)
    issues += names.hidden_character_issues("/display_name", display_name, allow=names.JOINERS)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    email = normalize_email(email)
    display_name = names.normalize(display_name)
    if await user_by_email(session, actor.realm_id, email):
        raise Conflict("A user with this email already exists in the realm.")
    user = User(
        id=new_id("usr"),
        realm_id=actor.realm_id,
        email=email,
        display_name=display_name,
        guest=guest,
        password_hash=crypto.hash_password(password) if password else None,
        created_by=actor.principal_id,
    )
    session.add(user)
    await session.flush()
    await emit_event(session, actor, "user.created", subject_id=user.id, payload={"user_id": user.id})
    await record_audit(
        session, actor, "user.created", subject_type="user", subject_id=user.id, details={"email": email}
    )
    return user


# --- Throttling -----------------------------------------------------------------------------------


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


# --- TOTP -----------------------------------------------------------------------------------------

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
    session: AsyncSession, operator_key: str, user: User, code: str, client_address: str
) -> None:
    """Check a TOTP code of an enrolled user, throttled like passwords (wrong codes count as
    failed sign-ins of the account and of the address, and only a right code forgives them).
    :class:`Unauthorized` when the code is wrong or replayed."""
    await check_throttle(session, user.realm_id, user.email, client_address)
    if not await check_user_totp(session, operator_key, user, code):
        await record_failure(session, user.realm_id, user.email, client_address, kind=SECOND_FACTOR_FAILURE)
        raise Unauthorized("The code is not right, or it was used already. Wait for the next code and try again.")
    await clear_failures(session, user.realm_id, user.email, kinds=(PASSWORD_FAILURE, SECOND_FACTOR_FAILURE))


# --- Browser sessions -----------------------------------------------------------------------------


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


# --- One-time sign-in links -----------------------------------------------------------------------


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


# --- API tokens -----------------------------------------------------------------------------------


@dataclass
class TokenInfo:
    token: ApiToken
    principal_type: str
    principal_id: str
    email: str | None
    display_name: str
    touched_at: datetime | None = None  # when this look-up recorded the token's use
    realm: Realm | None = None


async def touch_token(session: AsyncSession, token_id: str, moment: datetime) -> None:
    """Record that the token was used (at most once a minute)."""
    await session.execute(update(ApiToken).where(col(ApiToken.id) == token_id).values(last_used_at=moment))


async def mint_token(
    session: AsyncSession,
    actor: Actor,
    *,
    audience: str,
    user: User | None = None,
    service_principal: ServicePrincipal | None = None,
    name: str = "",
    expires_in: timedelta | None = None,
) -> tuple[str, ApiToken]:
    """A bearer token ``pat_…``; only its hash is stored. Returns the token once.

    Every token expires: after ``expires_in`` (at most 365 days), else after 90 days.
    """
    if audience not in {"admin", "account"}:
        raise invalid("/audience", "audience is admin or account")
    if (user is None) == (service_principal is None):
        raise invalid("/", "A token belongs to exactly one user or service principal.")
    if service_principal is not None and audience != "admin":
        raise invalid("/audience", "Service principals hold admin-audience tokens only.")
    if expires_in is None:
        expires_in = timedelta(days=TOKEN_DEFAULT_DAYS)
    if expires_in <= timedelta(0) or expires_in > MAX_TOKEN_LIFETIME:
        raise invalid("/expires_in", f"A token lives between one second and {TOKEN_MAX_DAYS} days.")
    if user is not None and not await lock_active_holder(session, user.id):
        raise Conflict("The user is suspended: a token would not work.", code="user_suspended")
    token = crypto.new_token("pat_", 32)
    row = ApiToken(
        id=new_id("tok"),
        token_hash=crypto.token_hash(token),
        realm_id=actor.realm_id,
        user_id=user.id if user else None,
        service_principal_id=service_principal.id if service_principal else None,
        name=name,
        audience=audience,
        created_by=actor.id,
        expires_at=SYSTEM_CLOCK.now() + expires_in,
    )
    session.add(row)
    await session.flush()
    await record_audit(
        session,
        actor,
        "token.created",
        category="authentication",
        subject_type="user" if user else "service_principal",
        subject_id=user.id if user else service_principal.id if service_principal else None,
        details={"token_id": row.id, "audience": audience, "name": name},
    )
    return token, row


async def resolve_token(session: AsyncSession, token: str) -> TokenInfo | None:
    if not token.startswith("pat_"):
        return None
    # One round trip: the token, whoever holds it, and its realm.
    found = (
        await session.execute(
            select(ApiToken, User, ServicePrincipal, Realm)
            .outerjoin(User, col(User.id) == col(ApiToken.user_id))
            .outerjoin(ServicePrincipal, col(ServicePrincipal.id) == col(ApiToken.service_principal_id))
            .join(Realm, col(Realm.id) == col(ApiToken.realm_id))
            .where(col(ApiToken.token_hash) == crypto.token_hash(token))
        )
    ).first()
    moment = SYSTEM_CLOCK.now()
    if found is None:
        return None
    row, user, principal, realm = found
    if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= moment):
        return None
    if row.user_id:
        if user is None or user.status != "active":
            return None
        info = TokenInfo(row, "user", user.id, user.email, user.display_name, realm=realm)
    else:
        if principal is None:
            return None
        info = TokenInfo(row, "service_principal", principal.id, None, principal.name, realm=realm)
    if row.last_used_at is None or moment - row.last_used_at > timedelta(minutes=1):
        await touch_token(session, row.id, moment)
        info.touched_at = moment
    return info


def require_user_realm(user: User, realm: Realm) -> None:
    if user.realm_id != realm.id:
        raise Forbidden("This account belongs to another realm.")


async def first_start_done(session: AsyncSession) -> bool:
    return bool(await session.scalar(text("SELECT EXISTS (SELECT 1 FROM realms)")))


def as_dict(model: Any, *, exclude: set[str] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump()
    for key in exclude or set():
        data.pop(key, None)
    return data
