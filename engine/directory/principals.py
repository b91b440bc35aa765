"""Directory services: users and service principals.

Every change writes its audit event (and, for the SPEC §2 event types, its outbox event) in
the transaction of the change. The JSON API and the cockpit pages both call these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models, rules
from engine.directory.accounts import create_user, password_issues
from engine.directory.admins import is_admin, keeping_an_admin
from engine.directory.audit import Actor, emit_event, record_audit
from engine.directory.authz import Authority, needs_permission, require_authority_over
from engine.directory.models import ServicePrincipal, SignInLink, User
from engine.directory.sessions import end_credentials, end_sessions
from engine.directory.sign_in_links import issue_sign_in_link
from engine.platform import crypto, names
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, NotFound, ValidationFailed, invalid
from engine.platform.ids import new_id
from engine.platform.pagination import Page, keyset_page

__all__ = ["create_user"]

USER_STATUSES = ("active", "suspended")


def user_view(user: User) -> read_models.User:
    return read_models.User(
        id=user.id,
        email=user.email,
        display_name=user.display_name,
        status=user.status,
        guest=user.guest,
        mfa_enrolled=user.totp_enabled_at is not None,
        created_at=user.created_at,
        updated_at=user.updated_at,
    )


async def get_user(session: AsyncSession, realm_id: str, user_id: str) -> User:
    user = await session.get(User, user_id)
    if user is None or user.realm_id != realm_id:
        raise NotFound("No such user.")
    return user


async def users_by_id(session: AsyncSession, realm_id: str, ids: Iterable[str | None]) -> dict[str, User]:
    """The users of the realm among ``ids`` (other ids, such as service principals', are left out), in one query."""
    wanted = sorted({i for i in ids if i and i.startswith("usr_")})
    if not wanted:
        return {}
    found = await session.execute(select(User).where(col(User.realm_id) == realm_id, col(User.id).in_(wanted)))
    return {user.id: user for user in found.scalars()}


async def list_users(
    session: AsyncSession,
    realm_id: str,
    *,
    q: str | None = None,
    status: str | None = None,
    guest: bool | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[User]:
    query = select(User).where(col(User.realm_id) == realm_id)
    if q:
        pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(or_(col(User.email).ilike(pattern), col(User.display_name).ilike(pattern)))
    if status:
        if status not in USER_STATUSES:
            raise invalid("query:status", "status is active or suspended")
        query = query.where(col(User.status) == status)
    if guest is not None:
        query = query.where(col(User.guest) == guest)
    return await keyset_page(session, query, col(User.id), cursor=cursor, limit=limit)


async def require_outranks(
    session: AsyncSession, actor: Actor, authority: Authority | None, user: User, what: str = "change this user"
) -> None:
    """Changing someone needs every permission they hold, in every scope (engine.directory.authz's one rule).

    Otherwise a holder of realm.users.write could take over an administrator's account (or an
    organization administrator's), or a holder of realm.users.suspend lock every administrator out.
    """
    await require_authority_over(session, actor.realm_id, authority, "user", user.id, what=what)


@needs_permission("realm.users.write")
async def update_user(
    session: AsyncSession,
    actor: Actor,
    user_id: str,
    *,
    display_name: str | None,
    guest: bool | None,
    password: str | None,
    authority: Authority | None,
    keep_session_id: str | None = None,
) -> User:
    """Change a user's profile or password. A new password ends every browser session of the user
    but ``keep_session_id`` (the caller's own, when they change their own password): whoever knew
    the old one is signed out."""
    user = await get_user(session, actor.realm_id, user_id)
    issues = password_issues("/password", password)
    if display_name is not None:
        issues = names.hidden_character_issues("/display_name", display_name, allow=names.JOINERS) + issues
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    if display_name is not None:
        display_name = names.normalize(display_name)
    if user.id != actor.id and (display_name, guest, password) != (None, None, None):
        await require_outranks(session, actor, authority, user, "change their profile or password")
    changed: list[str] = []
    if display_name is not None and display_name != user.display_name:
        user.display_name = display_name
        changed.append("display_name")
    if guest is not None and guest != user.guest:
        user.guest = guest
        changed.append("guest")
    ended: list[str] = []
    if password is not None:
        user.password_hash = crypto.hash_password(password)
        changed.append("password")
        ended = await end_sessions(session, user.id, keep=keep_session_id)
    if changed:
        user.updated_at = SYSTEM_CLOCK.now()
        await session.flush()
        details: dict[str, Any] = {"changed": changed}
        if password is not None:
            details["sessions_ended"] = len(ended)
        await record_audit(session, actor, "user.updated", subject_type="user", subject_id=user.id, details=details)
    return user


@needs_permission("realm.users.suspend")
async def set_user_status(
    session: AsyncSession, actor: Actor, user_id: str, status: str, *, authority: Authority | None
) -> User:
    """Suspend or reactivate. A suspension ends the user's browser sessions, revokes their tokens
    and spends their unused sign-in links, so reactivation brings none of them back: the user
    signs in again, and tokens are minted again.

    With ``authority`` (the caller's), suspending or reactivating someone needs every
    permission they hold.
    """
    user = await get_user(session, actor.realm_id, user_id)
    await require_outranks(session, actor, authority, user, "change their status")
    rules.check_status_change(user.status, status, actor_id=actor.id, user_id=user.id)
    return await apply_user_status(session, actor, user, status)


async def apply_user_status(session: AsyncSession, actor: Actor, user: User, status: str) -> User:
    """Change a status every rule already allowed, with its audit and outbox events.

    Whoever decided the change (an administrator or a run), the realm keeps an active
    administrator (409 ``last_admin``), and a suspension ends the user's sessions, tokens and
    unused sign-in links.
    """
    taken = status != "active" and await is_admin(session, actor.realm_id, user.id)
    async with keeping_an_admin(session, actor.realm_id, check=taken, reload=[user]):
        user.status = status
        user.updated_at = SYSTEM_CLOCK.now()
        await session.flush()
    ended = await end_credentials(session, user.id) if status == "suspended" else None
    event = "user.suspended" if status == "suspended" else "user.reactivated"
    await emit_event(session, actor, event, subject_id=user.id, payload={"user_id": user.id})
    await record_audit(
        session, actor, event, subject_type="user", subject_id=user.id, details={"ended": ended} if ended else None
    )
    return user


@needs_permission("realm.users.write")
async def reset_mfa(session: AsyncSession, actor: Actor, user_id: str, *, authority: Authority | None) -> User:
    """Remove a user's second factor (a lost phone): they enrol again at their next MFA sign-in.

    Their browser sessions end too, so a session that relied on the old factor stops at once, and
    their unused sign-in links stop working.
    Resetting someone's factor needs every permission they hold (the one rule).
    """
    user = await get_user(session, actor.realm_id, user_id)
    await require_outranks(session, actor, authority, user, "reset their second factor")
    if user.totp_enabled_at is None and user.totp_secret_enc is None:
        raise Conflict("The user has no second factor to reset.", code="mfa_not_enrolled")
    user.totp_secret_enc = None
    user.totp_enabled_at = None
    user.totp_last_step = None
    user.updated_at = SYSTEM_CLOCK.now()
    await end_sessions(session, user.id)
    # A sign-in link counts as a second factor: one made before the reset no longer opens a session.
    await session.execute(
        update(SignInLink)
        .where(col(SignInLink.user_id) == user.id, col(SignInLink.used_at).is_(None))
        .values(used_at=SYSTEM_CLOCK.now())
    )
    await session.flush()
    await record_audit(
        session, actor, "user.mfa_reset", category="authentication", subject_type="user", subject_id=user.id
    )
    return user


@needs_permission("realm.users.write")
async def create_sign_in_link(
    session: AsyncSession, actor: Actor, user_id: str, *, authority: Authority | None
) -> tuple[str, SignInLink]:
    """A one-time sign-in link for a user of the realm, made by an administrator (automation
    signs a browser in without a person). The same ceiling as changing that user applies: the
    actor holds everything the user holds, in every scope. The token is returned this once."""
    user = await get_user(session, actor.realm_id, user_id)
    if user.id != actor.id:
        await require_outranks(session, actor, authority, user, "sign in as them")
    if user.status != "active":
        raise Conflict("The user is suspended: a sign-in link would not work.", code="user_suspended")
    return await issue_sign_in_link(session, user, actor=actor)


def service_principal_view(sp: ServicePrincipal) -> read_models.ServicePrincipal:
    return read_models.ServicePrincipal(id=sp.id, name=sp.name, description=sp.description, created_at=sp.created_at)


@needs_permission("realm.users.write")
async def create_service_principal(
    session: AsyncSession, actor: Actor, *, name: str, description: str, authority: Authority | None
) -> ServicePrincipal:
    issues = names.hidden_character_issues("/name", name) or names.mixed_script_issues("/name", name)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    name = names.normalize(name)
    exists = await session.scalar(
        select(func.count())
        .select_from(ServicePrincipal)
        .where(col(ServicePrincipal.realm_id) == actor.realm_id, col(ServicePrincipal.name) == name)
    )
    if exists:
        raise Conflict("A service principal with this name already exists.")
    sp = ServicePrincipal(
        id=new_id("spn"), realm_id=actor.realm_id, name=name, description=description, created_by=actor.principal_id
    )
    session.add(sp)
    await session.flush()
    await record_audit(session, actor, "service_principal.created", subject_type="service_principal", subject_id=sp.id)
    return sp


async def get_service_principal(session: AsyncSession, realm_id: str, sp_id: str) -> ServicePrincipal:
    sp = await session.get(ServicePrincipal, sp_id)
    if sp is None or sp.realm_id != realm_id:
        raise NotFound("No such service principal.")
    return sp


async def list_service_principals(
    session: AsyncSession, realm_id: str, *, cursor: str | None, limit: int | None
) -> Page[ServicePrincipal]:
    query = select(ServicePrincipal).where(col(ServicePrincipal.realm_id) == realm_id)
    return await keyset_page(session, query, col(ServicePrincipal.id), cursor=cursor, limit=limit)
