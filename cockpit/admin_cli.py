"""``cockpit admin …``: non-interactive operator commands for automation and tests.

``token`` and ``sign-in-link`` print only what was asked for on stdout, so scripts can capture it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import admins
from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.directory.models import Realm, ServicePrincipal, User
from engine.directory.realms import create_realm, realm_by_slug
from engine.directory.sign_in_links import create_sign_in_link
from engine.directory.tokens import TOKEN_DEFAULT_DAYS, TOKEN_MAX_DAYS, mint_token
from engine.platform.config import Settings
from engine.platform.database import resolve_database_url
from engine.platform.db import make_engine, make_sessionmaker, transaction
from engine.platform.errors import EngineError


class AdminError(Exception):
    pass


WEB_ADDRESS_FILE = "web-address"


def shown_url(host: str, port: int) -> str:
    """The address people open: ``localhost`` for a wildcard or loopback listener."""
    shown = "localhost" if host in {"127.0.0.1", "0.0.0.0", "::"} else host  # noqa: S104
    return f"http://{shown}:{port}"


def record_web_address(settings: Settings, host: str, port: int) -> None:
    """Remember where the web server of this home listens, for the links other commands print."""
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        (settings.home / WEB_ADDRESS_FILE).write_text(shown_url(host, port) + "\n")
    except OSError:
        pass  # a read-only home only costs the remembered address


def public_base_url(settings: Settings) -> str:
    """Where links point: ``COCKPIT_PUBLIC_URL`` when set; else ``COCKPIT_HOST``/``COCKPIT_PORT`` when
    given, else where this home's server last listened."""
    if settings.public_url:
        return settings.public_url
    if "COCKPIT_PORT" not in os.environ and "COCKPIT_HOST" not in os.environ:
        try:
            recorded = (settings.home / WEB_ADDRESS_FILE).read_text().strip()
        except OSError:
            recorded = ""
        if recorded.startswith("http://"):
            return recorded
    return shown_url(settings.host, settings.port)


def sign_in_link_url(settings: Settings, realm_slug: str, token: str) -> str:
    """Where a one-time sign-in link opens: a page with a Continue button that spends it."""
    return f"{public_base_url(settings)}/realms/{realm_slug}/sign-in/link?token={token}"


T = TypeVar("T")


async def _with_db(settings: Settings, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    url = resolve_database_url(settings)
    from engine.platform.migrate import upgrade

    upgrade(url)
    engine = make_engine(url, pool_size=2)
    try:
        async with transaction(make_sessionmaker(engine)) as session:
            return await work(session)
    except EngineError as exc:
        raise AdminError(exc.detail) from exc
    finally:
        await engine.dispose()


async def _realm(session: AsyncSession, slug: str) -> Realm:
    realm = await realm_by_slug(session, slug)
    if realm is None:
        raise AdminError(f"no realm {slug!r}")
    return realm


def cmd_create_realm(settings: Settings, args: argparse.Namespace) -> int:
    async def work(session: AsyncSession) -> tuple[Realm, User]:
        return await create_realm(session, args.slug, admin_email=args.admin_email, admin_display_name=args.admin_name)

    realm, admin = asyncio.run(_with_db(settings, work))
    print(f"realm {realm.slug} ({realm.id}) created; administrator {admin.email} ({admin.id}) holds realm-admin")
    return 0


def cmd_sign_in_link(settings: Settings, args: argparse.Namespace) -> int:
    async def work(session: AsyncSession) -> str:
        realm = await _realm(session, args.realm)
        user = await user_by_email(session, realm.id, args.email)
        if user is None:
            raise AdminError(f"no user {args.email!r} in realm {args.realm!r}")
        token = await create_sign_in_link(session, user)
        return sign_in_link_url(settings, realm.slug, token)

    print(asyncio.run(_with_db(settings, work)))
    return 0


def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    if not 1 <= args.days <= TOKEN_MAX_DAYS:
        raise AdminError(f"--days must be between 1 and {TOKEN_MAX_DAYS}, got {args.days}")
    expires = timedelta(days=args.days)

    async def work(session: AsyncSession) -> str:
        realm = await _realm(session, args.realm)
        actor = Actor(type="system", id=None, realm_id=realm.id)
        if args.email:
            user = await user_by_email(session, realm.id, args.email)
            if user is None:
                raise AdminError(f"no user {args.email!r} in realm {args.realm!r}")
            token, _ = await mint_token(
                session, actor, audience=args.audience, user=user, name=args.name, expires_in=expires
            )
        else:
            sp = (
                await session.execute(
                    select(ServicePrincipal).where(
                        col(ServicePrincipal.realm_id) == realm.id,
                        (col(ServicePrincipal.id) == args.service_principal)
                        | (col(ServicePrincipal.name) == args.service_principal),
                    )
                )
            ).scalar_one_or_none()
            if sp is None:
                raise AdminError(f"no service principal {args.service_principal!r} in realm {args.realm!r}")
            token, _ = await mint_token(
                session, actor, audience=args.audience, service_principal=sp, name=args.name, expires_in=expires
            )
        return token

    print(asyncio.run(_with_db(settings, work)))
    return 0


def cmd_grant_realm_admin(settings: Settings, args: argparse.Namespace) -> int:
    """Recover a realm nobody can administer: give realm-admin to one of its active users."""

    async def work(session: AsyncSession) -> str:
        realm = await _realm(session, args.realm)
        user = await user_by_email(session, realm.id, args.email)
        if user is None:
            raise AdminError(f"no user {args.email!r} in realm {args.realm!r}")
        assignment = await admins.grant_realm_admin(session, realm, user, via="cockpit admin grant-realm-admin")
        return f"{user.email} ({user.id}) now holds realm-admin in realm {realm.slug} (assignment {assignment.id})"

    print(asyncio.run(_with_db(settings, work)))
    return 0


def add_admin_commands(sub: Any) -> None:
    admin = sub.add_parser("admin", help="operator commands: realms, sign-in links, API tokens")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")

    create = admin_sub.add_parser("create-realm", help="create a realm with its built-in roles and a first admin")
    create.add_argument("slug", help="the realm's slug, used in paths (e.g. acme)")
    create.add_argument("--admin-email", required=True, help="email of the first administrator")
    create.add_argument("--admin-name", default=None, help="display name of the first administrator")
    create.set_defaults(func=cmd_create_realm)

    link = admin_sub.add_parser("sign-in-link", help="print a one-time sign-in link (15 minutes, counts as MFA)")
    link.add_argument("--realm", required=True)
    link.add_argument("--email", required=True)
    link.set_defaults(func=cmd_sign_in_link)

    grant = admin_sub.add_parser(
        "grant-realm-admin",
        help="give realm-admin to an active user of the realm (recovers a realm without an administrator; audited)",
    )
    grant.add_argument("--realm", required=True)
    grant.add_argument("--email", required=True)
    grant.set_defaults(func=cmd_grant_realm_admin)

    token = admin_sub.add_parser("token", help="print a new API bearer token (only the token, on stdout)")
    token.add_argument("--realm", required=True)
    who = token.add_mutually_exclusive_group(required=True)
    who.add_argument("--email", help="the user the token acts as")
    who.add_argument("--service-principal", help="the service principal (id or name) the token acts as")
    token.add_argument("--audience", choices=["admin", "account"], required=True)
    token.add_argument("--name", default="cli", help="a label for the token")
    token.add_argument(
        "--days",
        type=int,
        default=TOKEN_DEFAULT_DAYS,
        help=f"expire after this many days, 1 to {TOKEN_MAX_DAYS} (default {TOKEN_DEFAULT_DAYS})",
    )
    token.set_defaults(func=cmd_token)
