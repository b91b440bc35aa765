"""What the browser tests share: the live server, its database and CLI, a realm set up over its API,
signing its administrator in, and waiting for pages that do not poll."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import Page

from e2e.pages import sign_in_with_link
from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.directory.realms import realm_by_slug
from engine.directory.sign_in_links import create_sign_in_link
from engine.directory.tokens import mint_token
from engine.platform.config import PROJECT_ROOT
from engine.platform.db import make_engine, make_sessionmaker, transaction


@dataclass
class LiveServer:
    url: str
    database_url: str
    home: Path
    env: dict[str, str]
    log: Path


def cli(live: LiveServer, *args: str) -> str:
    """``cockpit <args>`` against the live server's database and settings; what it printed."""
    result = subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=live.env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=180,  # a busy machine starts a Python process slowly
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def create_realm(live: LiveServer, slug: str, admin_email: str, admin_name: str | None = None) -> None:
    cli(
        live,
        "admin",
        "create-realm",
        slug,
        "--admin-email",
        admin_email,
        *(["--admin-name", admin_name] if admin_name else []),
    )


def sign_in_url(live: LiveServer, slug: str, email: str) -> str:
    """The one-time link, pointed at the live server (the CLI prints the configured address)."""
    printed = cli(live, "admin", "sign-in-link", "--realm", slug, "--email", email)
    parts = urlsplit(printed)
    return f"{live.url}{parts.path}?{parts.query}"


FINISH_TIMEOUT = 60_000


T = TypeVar("T")


def in_database(live_server: LiveServer, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(session)`` in one transaction on the live server's database (its own loop and thread)."""

    async def main() -> T:
        engine = make_engine(live_server.database_url, pool_size=1)
        try:
            async with transaction(make_sessionmaker(engine)) as session:
                return await work(session)
        finally:
            await engine.dispose()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()


async def admin_of(session: Any, slug: str, email: str) -> Any:
    realm = await realm_by_slug(session, slug)
    assert realm is not None
    user = await user_by_email(session, realm.id, email)
    assert user is not None
    return user


def admin_token(live_server: LiveServer, slug: str, email: str) -> str:
    async def work(session: Any) -> str:
        user = await admin_of(session, slug, email)
        token, _ = await mint_token(
            session, Actor(type="system", id=None, realm_id=user.realm_id), audience="admin", user=user
        )
        return token

    return in_database(live_server, work)


def sign_in_path(live_server: LiveServer, slug: str, email: str) -> str:
    """Where the one-time sign-in link of ``email`` opens (``cockpit admin sign-in-link`` prints the same)."""

    async def work(session: Any) -> str:
        return await create_sign_in_link(session, await admin_of(session, slug, email))

    return f"/realms/{slug}/sign-in/link?token={in_database(live_server, work)}"


@dataclass
class Setup:
    realm: str
    admin_email: str
    subject_email: str
    role_id: str
    org_id: str
    group_id: str
    api: httpx.Client


def setup_realm(live_server: LiveServer, slug: str) -> Setup:
    """A realm, a subject who is a member of an organization with a group, and a role to grant."""
    admin_email = f"admin@{slug}.example"
    create_realm(live_server, slug, admin_email, "Ada Admin")
    token = admin_token(live_server, slug, admin_email)
    api = httpx.Client(
        base_url=f"{live_server.url}/api/v1/realms/{slug}", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = api.post(path, json=body)
        assert response.status_code in (200, 201), (path, response.status_code, response.text)
        result: dict[str, Any] = response.json()
        return result

    subject = post("/users", {"email": "grace@example.com", "display_name": "Grace Hopper"})
    role = post("/roles", {"name": "workflow-reader", "permissions": ["realm.workflows.read"], "boundary": "realm"})
    org = post("/organizations", {"name": "Acme"})
    post(f"/organizations/{org['id']}/members", {"user_id": subject["id"]})
    group = post(f"/organizations/{org['id']}/groups", {"name": "Engineering"})
    return Setup(
        realm=slug,
        admin_email=admin_email,
        subject_email=subject["email"],
        role_id=role["id"],
        org_id=org["id"],
        group_id=group["id"],
        api=api,
    )


def publish(setup: Setup, name: str, steps: list[dict[str, Any]]) -> str:
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps}
    created = setup.api.post("/workflows", json={"name": name, "definition": definition})
    assert created.status_code in (200, 201), created.text
    workflow_id: str = created.json()["id"]
    published = setup.api.post(f"/workflows/{workflow_id}/revisions/1/publish", json={})
    assert published.status_code == 200, published.text
    return workflow_id


def sign_in(live_server: LiveServer, page: Page, setup: Setup) -> None:
    sign_in_with_link(page, live_server.url + sign_in_path(live_server, setup.realm, setup.admin_email), setup.realm)


def subject_id(live_server: LiveServer, setup: Setup) -> str:
    async def work(session: Any) -> str:
        admin = await admin_of(session, setup.realm, setup.admin_email)
        user = await user_by_email(session, admin.realm_id, setup.subject_email)
        assert user is not None
        return str(user.id)

    return in_database(live_server, work)


PASSWORD = "a long enough password"


def reload_until(page: Page, check: Callable[[], bool], *, seconds: float = 60) -> None:
    """Server-rendered lists do not poll: reload until ``check`` holds (the worker is asynchronous)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the page never showed what was expected")
        page.wait_for_timeout(500)
        page.reload()
