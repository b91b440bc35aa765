"""First start: what `cockpit up` prepares before it runs web and worker.

On a database without any realm it seeds the demo realm and prints a one-time sign-in link for
its administrator (15 minutes, counts as MFA). On every later start it prints where the realm is
and how to get a new link.
"""

from __future__ import annotations

import asyncio
import os

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from cockpit.admin_cli import AdminError, public_base_url, sign_in_link_url
from engine.directory.models import Realm
from engine.directory.realms import first_start_done, realm_by_slug
from engine.directory.sign_in_links import create_sign_in_link
from engine.platform.config import Settings
from engine.platform.db import make_engine, make_sessionmaker, transaction
from engine.platform.errors import EngineError
from engine.seeding.demo_realm import DEMO_ADMIN_EMAIL, DEMO_SLUG, DemoRealm, seed_demo
from engine.seeding.demo_workflow import approve_demo_request, seed_demo_workflow


def first_start(settings: Settings, database_url: str) -> list[str]:
    """Prepare a fresh installation; return lines to show the operator."""
    settings.secret_key  # noqa: B018  (generated into the home folder on first start)
    try:
        return asyncio.run(_first_start(settings, database_url))
    except EngineError as exc:
        raise AdminError(f"first start failed: {exc.detail}") from exc


def new_link_hint(slug: str, email: str) -> str:
    return f"For a new one-time sign-in link: uv run cockpit admin sign-in-link --realm {slug} --email {email}"


async def _first_start(settings: Settings, database_url: str) -> list[str]:
    base = public_base_url(settings)
    engine = make_engine(database_url, pool_size=1)
    try:
        sessions = make_sessionmaker(engine)
        demo: DemoRealm | None = None
        token = ""
        run_ids: list[str] = []
        async with transaction(sessions) as session:
            if not await first_start_done(session):
                demo = await seed_demo(session)
                if demo.created:
                    _workflow_id, run_ids = await seed_demo_workflow(session, demo)
                    token = await create_sign_in_link(session, demo.admin)
        if demo is not None and demo.created:
            if run_ids:
                # The demo workflow's first runs go to their end through the engine itself, so the
                # first page a newcomer opens shows finished runs (a worker would do the same soon after).
                await finish_runs(sessions)  # to the approval each run asks for
                async with transaction(sessions) as session:
                    await approve_demo_request(session, run_ids[0])
                await finish_runs(sessions)  # the approved one to its end
            return [
                f"Demo realm: {base}/realms/{demo.realm.slug}/",
                f"Sign in as {demo.admin.email} with this one-time link (valid 15 minutes):",
                f"  {sign_in_link_url(settings, demo.realm.slug, token)}",
            ]
        async with transaction(sessions) as session:
            demo_realm = await realm_by_slug(session, DEMO_SLUG)
            if demo_realm is not None:
                return [f"Demo realm: {base}/realms/{DEMO_SLUG}/", new_link_hint(DEMO_SLUG, DEMO_ADMIN_EMAIL)]
            slugs = (await session.execute(select(col(Realm.slug)).order_by(col(Realm.slug)).limit(5))).scalars().all()
            lines = [f"Realm: {base}/realms/{slug}/" for slug in slugs]
            return [*lines, new_link_hint(slugs[0] if slugs else "<realm>", "<email>")]
    finally:
        await engine.dispose()


async def finish_runs(sessions: async_sessionmaker[AsyncSession], passes: int = 20) -> None:
    """Advance due runs with the engine's own runner until none is left (at most ``passes`` passes)."""
    from engine.runs.runner import Runner

    runner = Runner(sessions, f"first-start-{os.getpid()}")
    try:
        for _ in range(passes):
            if not await runner.run_pass():
                return
    finally:
        await runner.release_all()
