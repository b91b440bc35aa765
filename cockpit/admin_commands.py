"""What the ``cockpit admin …`` commands do, against the database (their parser is
``cockpit/admin_cli.py``, which imports this module only when one of them runs)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from cockpit.admin_cli import AdminError, sign_in_link_url
from engine.directory import admins
from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.directory.models import Realm, ServicePrincipal, User
from engine.directory.realms import create_realm, realm_by_slug
from engine.directory.sign_in_links import create_sign_in_link
from engine.directory.tokens import mint_token
from engine.platform.config import Settings
from engine.platform.database import resolve_database_url
from engine.platform.db import make_engine, make_sessionmaker, transaction
from engine.platform.errors import EngineError

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


def create_realm_command(settings: Settings, args: argparse.Namespace) -> int:
    async def work(session: AsyncSession) -> tuple[Realm, User]:
        return await create_realm(session, args.slug, admin_email=args.admin_email, admin_display_name=args.admin_name)

    realm, admin = asyncio.run(_with_db(settings, work))
    print(f"realm {realm.slug} ({realm.id}) created; administrator {admin.email} ({admin.id}) holds realm-admin")
    return 0


def sign_in_link_command(settings: Settings, args: argparse.Namespace) -> int:
    async def work(session: AsyncSession) -> str:
        realm = await _realm(session, args.realm)
        user = await user_by_email(session, realm.id, args.email)
        if user is None:
            raise AdminError(f"no user {args.email!r} in realm {args.realm!r}")
        token = await create_sign_in_link(session, user)
        return sign_in_link_url(settings, realm.slug, token)

    print(asyncio.run(_with_db(settings, work)))
    return 0


def token_command(settings: Settings, args: argparse.Namespace) -> int:
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


def grant_realm_admin_command(settings: Settings, args: argparse.Namespace) -> int:
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
