"""Factories for rows the tests need, written through the same SQL the product uses."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.platform.clock import SYSTEM_CLOCK
from engine.worker.heartbeats import new_worker_id, record_heartbeat


async def make_worker_heartbeat(session: AsyncSession, *, age_seconds: float = 0.0) -> str:
    """A worker that was last seen ``age_seconds`` ago."""
    worker_id = new_worker_id()
    await record_heartbeat(session, worker_id)
    if age_seconds:
        await session.execute(
            text("UPDATE worker_heartbeats SET last_seen_at = now() - make_interval(secs => :s) WHERE worker_id = :w"),
            {"s": age_seconds, "w": worker_id},
        )
    await session.commit()
    return worker_id


# --- Directory ------------------------------------------------------------------------------------

from dataclasses import dataclass, field  # noqa: E402
from datetime import timedelta  # noqa: E402
from typing import Any  # noqa: E402

from sqlalchemy.ext.asyncio import async_sessionmaker  # noqa: E402

from engine.directory import realms as directory_realms  # noqa: E402
from engine.directory.accounts import create_user  # noqa: E402
from engine.directory.audit import Actor  # noqa: E402
from engine.directory.mfa import TOTP_PURPOSE, new_totp_secret  # noqa: E402
from engine.directory.models import Membership, Organization, Role, RoleAssignment, User  # noqa: E402
from engine.directory.realms import create_realm  # noqa: E402
from engine.directory.sessions import create_session  # noqa: E402
from engine.directory.sign_in_links import create_sign_in_link  # noqa: E402
from engine.directory.tokens import mint_token  # noqa: E402
from engine.platform.ids import new_id  # noqa: E402


@dataclass
class RealmHandle:
    """A realm made for a test, with its first administrator and an admin token for them."""

    id: str
    slug: str
    admin: User
    admin_token: str
    sessions: async_sessionmaker[AsyncSession]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"/api/v1/realms/{self.slug}"

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.admin_token)

    @property
    def actor(self) -> Actor:
        return Actor(type="user", id=self.admin.id, realm_id=self.id)

    async def user(
        self,
        email: str | None = None,
        *,
        display_name: str | None = None,
        password: str | None = None,
        guest: bool = False,
    ) -> User:
        email = email or f"{new_id('usr')[-8:]}@example.com"
        async with self.sessions() as session, session.begin():
            return await create_user(
                session,
                self.actor,
                email=email,
                display_name=display_name or email.split("@")[0],
                password=password,
                guest=guest,
                authority=None,
            )

    async def token(self, user: User, audience: str = "admin", expires_in: timedelta | None = None) -> str:
        async with self.sessions() as session, session.begin():
            token, _ = await mint_token(session, self.actor, audience=audience, user=user, expires_in=expires_in)
            return token

    async def role(
        self, name: str, permissions: list[str], *, boundary: str = "realm", requires_approval: bool = False
    ) -> Role:
        async with self.sessions() as session, session.begin():
            role = Role(
                id=new_id("rol"),
                realm_id=self.id,
                name=name,
                permissions=permissions,
                boundary=boundary,
                requires_approval=requires_approval,
            )
            session.add(role)
            return role

    async def builtin_role(self, name: str) -> Role:
        async with self.sessions() as session:
            return await directory_realms.builtin_role(session, self.id, name)

    async def assign(
        self, user: User, role: Role, *, organization_id: str | None = None, expires_in: timedelta | None = None
    ) -> RoleAssignment:
        async with self.sessions() as session, session.begin():
            assignment = RoleAssignment(
                id=new_id("ras"),
                realm_id=self.id,
                role_id=role.id,
                user_id=user.id,
                organization_id=organization_id,
                expires_at=SYSTEM_CLOCK.now() + expires_in if expires_in else None,
                granted_by=self.admin.id,
            )
            session.add(assignment)
            return assignment

    async def organization(self, name: str | None = None) -> Organization:
        async with self.sessions() as session, session.begin():
            org = Organization(id=new_id("org"), realm_id=self.id, name=name or f"Org {new_id('org')[-6:]}")
            session.add(org)
            return org

    async def member(self, org: Organization, user: User) -> Membership:
        async with self.sessions() as session, session.begin():
            membership = Membership(id=new_id("mem"), realm_id=self.id, organization_id=org.id, user_id=user.id)
            session.add(membership)
            return membership


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def make_realm(sessions: async_sessionmaker[AsyncSession], slug: str | None = None) -> RealmHandle:
    slug = slug or "r" + new_id("rlm")[-10:]
    async with sessions() as session, session.begin():
        realm, admin = await create_realm(session, slug, admin_email=f"admin@{slug}.example")
        token, _ = await mint_token(
            session, Actor(type="system", id=None, realm_id=realm.id), audience="admin", user=admin
        )
    return RealmHandle(id=realm.id, slug=slug, admin=admin, admin_token=token, sessions=sessions)


# --- Browser sign-in ------------------------------------------------------------------------------

import re  # noqa: E402

from engine.platform import crypto  # noqa: E402

TEST_SECRET_KEY = "test-secret-key-0123456789abcdef0123456789"  # noqa: S105 (the operator key of the test settings)
HTML = {"Accept": "text/html"}


async def enrol_totp(realm: RealmHandle, user: User, operator_key: str = TEST_SECRET_KEY) -> str:
    """Give ``user`` an authenticator app; returns the TOTP secret (compute codes with pyotp)."""
    secret = new_totp_secret()
    async with realm.sessions() as session, session.begin():
        row = await session.get(User, user.id)
        assert row is not None
        row.totp_secret_enc = crypto.encrypt(operator_key, TOTP_PURPOSE, secret)
        row.totp_enabled_at = SYSTEM_CLOCK.now()
    return secret


async def sign_in_link(realm: RealmHandle, user: User) -> str:
    """A one-time sign-in link token for ``user``."""
    async with realm.sessions() as session, session.begin():
        return await create_sign_in_link(session, user)


@dataclass
class BrowserLogin:
    cookie: str
    session_id: str
    csrf: str


async def browser_session(
    realm: RealmHandle, user: User, *, mfa: bool = True, operator_key: str = TEST_SECRET_KEY
) -> BrowserLogin:
    """A signed-in browser session for ``user`` (put ``cookie`` in ``cockpit_session``)."""
    async with realm.sessions() as session, session.begin():
        cookie, row = await create_session(session, user, mfa=mfa)
    return BrowserLogin(cookie=cookie, session_id=row.id, csrf=crypto.sign(operator_key, "csrf", row.id))


async def independent_admin(
    realm: RealmHandle, email: str, display_name: str | None = None
) -> tuple[User, dict[str, str]]:
    """A realm administrator nobody in the realm made (the operator did, long ago as far as the
    realm's administrator is concerned), signed in with a second factor: an independent second
    person who may approve the administrator's revisions. Returns the user and the headers of
    their browser session for the JSON API (cookie and CSRF token)."""
    async with realm.sessions() as session, session.begin():
        system = Actor(type="system", id=None, realm_id=realm.id)
        user = await create_user(
            session, system, email=email, display_name=display_name or email.split("@")[0], authority=None
        )
        admin_role = await directory_realms.builtin_role(session, realm.id, "realm-admin")
        session.add(RoleAssignment(id=new_id("ras"), realm_id=realm.id, role_id=admin_role.id, user_id=user.id))
    login = await browser_session(realm, user)
    return user, {"Cookie": f"cockpit_session={login.cookie}", "X-CSRF-Token": login.csrf}


def form_value(html: str, name: str) -> str:
    """The value of the first ``<input name=…>`` of a page (hidden CSRF tokens, link tokens)."""
    for tag in re.findall(r"<input\b[^>]*>", html):
        if re.search(rf'\bname="{re.escape(name)}"', tag):
            found = re.search(r'\bvalue="([^"]*)"', tag)
            return found.group(1) if found else ""
    raise AssertionError(f"no input named {name!r} on the page")


async def grant_realm_admin_aged(realm: RealmHandle, user: User, *, by: str | None, age: timedelta) -> None:
    """``realm-admin`` for ``user``, granted by ``by`` (None: the operator) ``age`` ago: what review
    independence reads, made without the grant rules a hand-made grant would meet."""
    from engine.directory.realms import builtin_role

    async with realm.sessions() as session, session.begin():
        admin_role = await builtin_role(session, realm.id, "realm-admin")
        session.add(
            RoleAssignment(
                id=new_id("ras"),
                realm_id=realm.id,
                role_id=admin_role.id,
                user_id=user.id,
                granted_by=by,
                created_at=SYSTEM_CLOCK.now() - age,
            )
        )
