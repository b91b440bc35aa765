"""API tokens: minting and resolving them, tokens people mint for themselves, and tokens for service principals.

Who may mint what (SPEC §3):

- a token never mints a token: only a browser session may, so a leaked token cannot breed;
- an admin-audience token comes only from a session with a verified second factor;
- any signed-in user may mint an account-audience token for themselves;
- an administrator holding ``realm.tokens.write`` mints admin tokens for service principals.

A token is shown once; only its SHA-256 is stored (:func:`mint_token`). People
revoke their own tokens; holders of ``realm.tokens.write`` revoke any token of the realm.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models
from engine.directory.audit import Actor, record_audit
from engine.directory.authz import Authority, needs_permission, require_authority_over
from engine.directory.models import ApiToken, Realm, ServicePrincipal, User
from engine.directory.sessions import lock_active_holder
from engine.directory.token_limits import TOKEN_DEFAULT_DAYS, TOKEN_MAX_DAYS
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Forbidden, Issue, NotFound, ValidationFailed, invalid
from engine.platform.ids import new_id
from engine.platform.pagination import Page, keyset_page

MAX_TOKEN_LIFETIME = timedelta(days=TOKEN_MAX_DAYS)


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


AUDIENCES = ("admin", "account")
DEFAULT_LIFETIME_DAYS = TOKEN_DEFAULT_DAYS
MAX_LIFETIME_DAYS = TOKEN_MAX_DAYS


def token_view(row: ApiToken) -> read_models.ApiToken:
    """What a list shows: never the token or its hash."""
    return read_models.ApiToken(
        id=row.id,
        name=row.name,
        audience=row.audience,
        owner=read_models.TokenOwner(
            type="user" if row.user_id else "service_principal",
            id=row.user_id or row.service_principal_id,
        ),
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked=row.revoked_at is not None,
        revoked_at=row.revoked_at,
    )


def minted_view(token: str, row: ApiToken) -> read_models.MintedToken:
    """The answer to a mint: the token, this once."""
    return read_models.MintedToken(
        id=row.id,
        name=row.name,
        audience=row.audience,
        created_at=row.created_at,
        expires_at=row.expires_at,
        token=token,
    )


def request_issues(name: str | None, audience: str | None, expires_in_days: int | None) -> list[Issue]:
    issues: list[Issue] = []
    if name is not None:
        stripped = name.strip()
        if not stripped:
            issues.append(Issue("/name", "too_short", "must be at least 1 character(s)"))
        elif len(name) > 200:
            issues.append(Issue("/name", "too_long", "must be at most 200 characters"))
        elif "\n" in name or "\r" in name:
            issues.append(Issue("/name", "invalid", "must not contain line breaks"))
    if audience is not None and audience not in AUDIENCES:
        issues.append(Issue("/audience", "invalid", "audience is admin or account"))
    if expires_in_days is not None and not 1 <= expires_in_days <= MAX_LIFETIME_DAYS:
        issues.append(Issue("/expires_in_days", "out_of_range", f"must be between 1 and {MAX_LIFETIME_DAYS}"))
    return issues


def _lifetime(expires_in_days: int | None) -> timedelta:
    return timedelta(days=expires_in_days or DEFAULT_LIFETIME_DAYS)


async def mint_own_token(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    audience: str,
    expires_in_days: int | None,
    credential: str,
    mfa: bool,
) -> tuple[str, ApiToken]:
    """A token for the calling user. ``credential`` is how they came (``session`` or ``token``)
    and ``mfa`` whether that session verified a second factor.
    """
    if credential != "session":
        raise Forbidden("A token cannot mint tokens; sign in to the cockpit to create one.")
    issues = request_issues(name, audience, expires_in_days)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    if audience == "admin" and not mfa:
        raise Forbidden("Admin tokens are minted only from a session with a second factor.", code="mfa_required")
    if actor.type != "user" or actor.id is None:
        raise Forbidden("Only users mint tokens for themselves.")
    user = await session.get(User, actor.id)
    if user is None or user.realm_id != actor.realm_id:
        raise NotFound("No such user.")
    return await mint_token(
        session, actor, audience=audience, user=user, name=name.strip(), expires_in=_lifetime(expires_in_days)
    )


@needs_permission("realm.tokens.write")
async def mint_service_principal_token(
    session: AsyncSession,
    actor: Actor,
    sp_id: str,
    *,
    name: str,
    expires_in_days: int | None,
    authority: Authority | None,
) -> tuple[str, ApiToken]:
    """An admin-audience token for a service principal of the realm.

    A token acts with everything its principal holds, so with the caller's ``authority`` the
    caller must hold all of it (the one rule): nobody mints their way above themselves.
    """
    issues = request_issues(name, None, expires_in_days)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    principal = await session.get(ServicePrincipal, sp_id)
    if principal is None or principal.realm_id != actor.realm_id:
        raise NotFound("No such service principal.")
    await require_authority_over(
        session, actor.realm_id, authority, "service_principal", principal.id, what="mint a token for it"
    )
    return await mint_token(
        session,
        actor,
        audience="admin",
        service_principal=principal,
        name=name.strip(),
        expires_in=_lifetime(expires_in_days),
    )


async def list_tokens(
    session: AsyncSession,
    realm_id: str,
    *,
    user_id: str | None = None,
    service_principal_id: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[ApiToken]:
    """Tokens of one user or one service principal, oldest first, revoked ones included."""
    query = select(ApiToken).where(col(ApiToken.realm_id) == realm_id)
    if user_id is not None:
        query = query.where(col(ApiToken.user_id) == user_id)
    if service_principal_id is not None:
        query = query.where(col(ApiToken.service_principal_id) == service_principal_id)
    return await keyset_page(session, query, col(ApiToken.id), cursor=cursor, limit=limit)


@needs_permission(
    "realm.tokens.write",
    unless=lambda args: not args["may_revoke_any"],
    exempt="only the caller's own tokens: anyone else's answers 404",
)
async def revoke(
    session: AsyncSession,
    actor: Actor,
    token_id: str,
    *,
    may_revoke_any: bool,
    authority: Authority | None,
) -> ApiToken:
    """Revoke a token of the caller (or any token of the realm when ``may_revoke_any``).

    Someone else's token answers 404 to a caller who may not revoke it, so token ids do not
    leak. Revoking someone else's token needs every permission its owner holds (``authority``,
    the one rule). Revoking a revoked token changes nothing.
    """
    row = await session.get(ApiToken, token_id, with_for_update=True)
    if row is None or row.realm_id != actor.realm_id:
        raise NotFound("No such token.")
    own = actor.type == "user" and row.user_id == actor.id
    if not may_revoke_any and not own:
        raise NotFound("No such token.")
    if not own:
        owner_type = "user" if row.user_id else "service_principal"
        owner_id = row.user_id or row.service_principal_id
        assert owner_id is not None
        await require_authority_over(session, actor.realm_id, authority, owner_type, owner_id, what="revoke its tokens")
    if row.revoked_at is not None:
        return row
    row.revoked_at = SYSTEM_CLOCK.now()
    await session.flush()
    await record_audit(
        session,
        actor,
        "token.revoked",
        category="authentication",
        subject_type="user" if row.user_id else "service_principal",
        subject_id=row.user_id or row.service_principal_id,
        details={"token_id": row.id, "audience": row.audience, "name": row.name},
    )
    return row
