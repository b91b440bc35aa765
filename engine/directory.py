"""Directory services: users and service principals.

Every change writes its audit event (and, for the SPEC §2 event types, its outbox event) in
the transaction of the change. The JSON API and the cockpit pages both call these.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from engine import crypto
from engine.audit import Actor, emit_event, record_audit
from engine.authz import Authority, load_authority
from engine.errors import Conflict, Forbidden, NotFound, invalid
from engine.identity import create_user, issue_sign_in_link, now
from engine.ids import new_id
from engine.models import ServicePrincipal, SignInLink, User
from engine.pagination import Page, keyset_page

__all__ = ["create_user"]

USER_STATUSES = ("active", "suspended")


def user_view(user: User) -> dict[str, Any]:
    return {
        "id": user.id,
        "email": user.email,
        "display_name": user.display_name,
        "status": user.status,
        "guest": user.guest,
        "mfa_enrolled": user.totp_enabled_at is not None,
        "created_at": user.created_at,
        "updated_at": user.updated_at,
    }


async def get_user(session: AsyncSession, realm_id: str, user_id: str) -> User:
    user = await session.get(User, user_id)
    if user is None or user.realm_id != realm_id:
        raise NotFound("No such user.")
    return user


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
    query = select(User).where(User.realm_id == realm_id)
    if q:
        pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(or_(User.email.ilike(pattern), User.display_name.ilike(pattern)))  # type: ignore[attr-defined]
    if status:
        if status not in USER_STATUSES:
            raise invalid("query:status", "status is active or suspended")
        query = query.where(User.status == status)
    if guest is not None:
        query = query.where(User.guest == guest)
    return await keyset_page(session, query, User.id, cursor=cursor, limit=limit)


async def require_outranks(session: AsyncSession, actor: Actor, authority: Authority | None, user: User) -> None:
    """Changing someone's password or status, or signing in as them, needs every permission they
    hold, in every scope they hold it: realm-wide, and in each organization.

    Otherwise a holder of realm.users.write could take over an administrator's account (or an
    organization administrator's), or a holder of realm.users.suspend lock every administrator out.
    """
    if authority is None:
        return
    target = await load_authority(session, actor.realm_id, "user", user.id)
    missing = sorted(
        {
            p if grant.organization_id is None else f"{p} in {grant.organization_id}"
            for grant in target.grants
            for p in grant.permissions
            if not authority.holds(p, grant.organization_id)
        }
    )
    if missing:
        raise Forbidden(
            "This user holds permissions you do not hold (" + ", ".join(missing) + "); you cannot change their "
            "password or status, or sign in as them.",
            code="target_outranks_actor",
        )


async def update_user(
    session: AsyncSession,
    actor: Actor,
    user_id: str,
    *,
    display_name: str | None,
    guest: bool | None,
    password: str | None,
    authority: Authority | None = None,
) -> User:
    user = await get_user(session, actor.realm_id, user_id)
    if password is not None and user.id != actor.id:
        await require_outranks(session, actor, authority, user)
    changed: list[str] = []
    if display_name is not None and display_name != user.display_name:
        user.display_name = display_name
        changed.append("display_name")
    if guest is not None and guest != user.guest:
        user.guest = guest
        changed.append("guest")
    if password is not None:
        user.password_hash = crypto.hash_password(password)
        changed.append("password")
    if changed:
        user.updated_at = now()
        await session.flush()
        await record_audit(
            session, actor, "user.updated", subject_type="user", subject_id=user.id, details={"changed": changed}
        )
    return user


async def set_user_status(
    session: AsyncSession, actor: Actor, user_id: str, status: str, *, authority: Authority | None = None
) -> User:
    """Suspend or reactivate; a suspended user's sessions and tokens stop working at once.

    With ``authority`` (the caller's), suspending someone needs every permission they hold.
    """
    user = await get_user(session, actor.realm_id, user_id)
    if status == "suspended":
        await require_outranks(session, actor, authority, user)
    if user.status == status:
        raise Conflict(f"The user is already {status}.")
    if status == "suspended" and actor.id == user.id:
        raise Conflict("You cannot suspend yourself.")
    user.status = status
    user.updated_at = now()
    await session.flush()
    event = "user.suspended" if status == "suspended" else "user.reactivated"
    await emit_event(session, actor, event, subject_id=user.id, payload={"user_id": user.id})
    await record_audit(session, actor, event, subject_type="user", subject_id=user.id)
    return user


async def create_sign_in_link(
    session: AsyncSession, actor: Actor, user_id: str, *, authority: Authority | None
) -> tuple[str, SignInLink]:
    """A one-time sign-in link for a user of the realm, made by an administrator (automation
    signs a browser in without a person). The same ceiling as changing that user applies: the
    actor holds everything the user holds, in every scope. The token is returned this once."""
    user = await get_user(session, actor.realm_id, user_id)
    if user.id != actor.id:
        await require_outranks(session, actor, authority, user)
    if user.status != "active":
        raise Conflict("The user is suspended: a sign-in link would not work.", code="user_suspended")
    return await issue_sign_in_link(session, user, actor=actor)


def service_principal_view(sp: ServicePrincipal) -> dict[str, Any]:
    return {"id": sp.id, "name": sp.name, "description": sp.description, "created_at": sp.created_at}


async def create_service_principal(
    session: AsyncSession, actor: Actor, *, name: str, description: str
) -> ServicePrincipal:
    exists = await session.scalar(
        select(func.count())
        .select_from(ServicePrincipal)
        .where(ServicePrincipal.realm_id == actor.realm_id, ServicePrincipal.name == name)
    )
    if exists:
        raise Conflict("A service principal with this name already exists.")
    sp = ServicePrincipal(id=new_id("spn"), realm_id=actor.realm_id, name=name, description=description)
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
    query = select(ServicePrincipal).where(ServicePrincipal.realm_id == realm_id)
    return await keyset_page(session, query, ServicePrincipal.id, cursor=cursor, limit=limit)
