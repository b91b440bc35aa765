"""Runs in a real browser: an administrator starts a run from the cockpit and watches it finish.

The live server runs ``cockpit serve`` and ``cockpit worker`` on a fresh database; the timeline
follows the run by polling itself and stops once the run has finished.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from playwright.sync_api import Page, Request, expect

from e2e.conftest import LiveServer
from engine import identity, runs, workflows
from engine.audit import Actor
from engine.config import PROJECT_ROOT
from engine.db import make_engine, make_sessionmaker, transaction

FINISH_TIMEOUT = 30_000
T = TypeVar("T")


def admin_cli(live_server: LiveServer, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cockpit.cli", "admin", *args],
        env=live_server.env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


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


async def _admin_of(session: Any, slug: str, email: str) -> Any:
    realm = await identity.realm_by_slug(session, slug)
    assert realm is not None
    user = await identity.user_by_email(session, realm.id, email)
    assert user is not None
    return user


def admin_token(live_server: LiveServer, slug: str, email: str) -> str:
    async def work(session: Any) -> str:
        user = await _admin_of(session, slug, email)
        token, _ = await identity.mint_token(
            session, Actor(type="system", id=None, realm_id=user.realm_id), audience="admin", user=user
        )
        return token

    return in_database(live_server, work)


def sign_in_path(live_server: LiveServer, slug: str, email: str) -> str:
    """Where the one-time sign-in link of ``email`` opens (``cockpit admin sign-in-link`` prints the same)."""

    async def work(session: Any) -> str:
        return await identity.create_sign_in_link(session, await _admin_of(session, slug, email))

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
    admin_cli(live_server, "create-realm", slug, "--admin-email", admin_email, "--admin-name", "Ada Admin")
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
    page.goto(live_server.url + sign_in_path(live_server, setup.realm, setup.admin_email))
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(re.compile(rf"/realms/{setup.realm}/?$"))


def test_a_run_started_from_the_cockpit_is_followed_until_it_succeeds(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "runs-ok")
    workflow_id = publish(
        setup,
        "Joiner",
        [
            {"id": "grant", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "done", "type": "end"},
        ],
    )
    sign_in(live_server, page, setup)
    page.goto(f"{live_server.url}/realms/{setup.realm}/workflows/{workflow_id}")

    # The start form loads into the workflow's page.
    form = page.locator("#run-start form")
    expect(form).to_be_visible()
    form.get_by_label("Subject").fill(setup.subject_email)
    form.get_by_label("Organization").select_option(label="Acme")
    form.get_by_role("button", name="Start run").click()

    page.wait_for_url(re.compile(rf"/realms/{setup.realm}/runs/wrn_[^/?]+"))
    run_url = page.url.split("?", 1)[0]
    expect(page.get_by_role("status")).to_contain_text("Run started")
    page.evaluate("() => { window.sameDocument = true }")
    polls: list[str] = []

    def note(request: Request) -> None:
        if request.url.split("?", 1)[0] == run_url and request.headers.get("hx-target") == "run-timeline":
            polls.append(request.url)

    page.on("request", note)

    expect(page.locator("#run-state")).to_have_text("succeeded", timeout=FINISH_TIMEOUT)
    assert page.evaluate("() => window.sameDocument === true")  # the fragment refreshed itself, no reload
    for step in ("grant", "team", "done"):
        expect(page.locator(f"#step-{step} .step-head .badge")).to_have_text("succeeded")
        expect(page.locator(f"#step-{step} table.attempts tbody tr")).to_have_count(1)
    expect(page.locator("#step-grant")).to_contain_text(f"{run_url.rsplit('/', 1)[1]}.grant")
    expect(page.locator("#run-timeline")).not_to_have_attribute("hx-trigger", re.compile("every"))
    expect(page.get_by_text("Cancel run")).to_have_count(0)
    expect(page.locator("table.compensations")).to_have_count(0)  # nothing was undone

    # Finished: the timeline has stopped asking for itself.
    settled = len(polls)
    time.sleep(5)
    assert len(polls) == settled

    # Links in the timeline open their pages.
    page.locator("#run-timeline").get_by_role("link", name="revision 1").click()
    page.wait_for_url(f"**/workflows/{workflow_id}/revisions/1")
    expect(page.locator("#run-timeline")).to_have_count(0)
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    page.go_back()
    expect(page.locator("#run-state")).to_have_text("succeeded")

    # The run is in the realm's list, with its workflow, subject and state.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
    row = page.locator("#runs-table tbody tr").first
    expect(row).to_contain_text("Joiner")
    expect(row).to_contain_text(setup.subject_email)
    expect(row.locator(".badge")).to_have_text("succeeded")


def test_a_run_whose_last_step_fails_undoes_its_steps_and_ends_compensated(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "runs-undo")
    elsewhere = setup.api.post("/organizations", json={"name": "Elsewhere"}).json()
    workflow_id = publish(
        setup,
        "Mover",
        [
            {"id": "grant", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere["id"]},
        ],
    )
    sign_in(live_server, page, setup)
    page.goto(f"{live_server.url}/realms/{setup.realm}/workflows/{workflow_id}")
    form = page.locator("#run-start form")
    form.get_by_label("Subject").fill(setup.subject_email)
    form.get_by_role("button", name="Start run").click()
    page.wait_for_url(re.compile(rf"/realms/{setup.realm}/runs/wrn_[^/?]+"))

    expect(page.locator("#run-state")).to_have_text("compensated", timeout=FINISH_TIMEOUT)
    expect(page.locator("#step-leave .step-head .badge")).to_have_text("failed")
    expect(page.locator("#step-leave")).to_contain_text("not_a_member")
    undo = page.locator("table.compensations tbody tr")
    expect(undo).to_have_count(2)
    # Newest first: the group membership is undone before the role.
    expect(undo.nth(0)).to_contain_text("team")
    expect(undo.nth(1)).to_contain_text("grant")
    for i in range(2):
        expect(undo.nth(i)).to_contain_text("undo")
        expect(undo.nth(i).locator(".badge")).to_have_text("done")
    expect(page.locator("#run-timeline")).to_contain_text("The subject is not a member of the organization.")

    # What was undone is gone from the directory.
    subject = setup.api.get("/users", params={"q": setup.subject_email}).json()["items"][0]
    assignments = setup.api.get("/role-assignments", params={"user_id": subject["id"]}).json()["items"]
    assert [a for a in assignments if a["role_id"] == setup.role_id] == []


def test_cancelling_asks_for_a_reason_and_the_timeline_follows_the_run_to_cancelled(
    live_server: LiveServer, page: Page
) -> None:
    setup = setup_realm(live_server, "runs-cancel")
    workflow_id = publish(setup, "Paused", [{"id": "done", "type": "end"}])

    async def start_paused(session: Any) -> str:
        # Started and disabled in one transaction: the worker never sees it runnable, so it waits.
        admin = await _admin_of(session, setup.realm, setup.admin_email)
        actor = Actor(type="user", id=admin.id, realm_id=admin.realm_id)
        subject = await identity.user_by_email(session, admin.realm_id, setup.subject_email)
        assert subject is not None
        run = await runs.start_manual_run(session, actor, workflow_id, subject_id=subject.id, organization_id=None)
        await workflows.set_enabled(session, actor, workflow_id, False)
        return run.id

    run_id = in_database(live_server, start_paused)
    sign_in(live_server, page, setup)
    run_url = f"{live_server.url}/realms/{setup.realm}/runs/{run_id}"
    polls: list[str] = []
    page.on(
        "request",
        lambda request: polls.append(request.url) if request.headers.get("hx-target") == "run-timeline" else None,
    )
    page.goto(run_url)
    expect(page.locator("#run-state")).to_have_text("pending")
    page.wait_for_timeout(4500)
    assert len(polls) >= 1  # it refreshes itself while the run has not finished

    # The confirmation holds the polling, so the reason being typed is not replaced.
    page.get_by_text("Cancel run").click()
    reason = page.get_by_label("Reason")
    reason.fill("Hired by mistake")
    held = len(polls)
    page.wait_for_timeout(4500)
    assert len(polls) == held
    expect(reason).to_have_value("Hired by mistake")

    page.get_by_role("button", name="Confirm: cancel this run").click()
    expect(page.get_by_role("status")).to_contain_text("Cancellation requested")
    expect(page.locator("dd.cancellation")).to_contain_text("Hired by mistake")
    expect(page.locator("dd.cancellation")).to_contain_text("Ada Admin")
    expect(page.get_by_text("Cancel run")).to_have_count(0)
    expect(page.locator("#run-state")).to_have_text("cancelled", timeout=FINISH_TIMEOUT)
    assert page.url == run_url  # followed in place
    expect(page.locator("#run-timeline")).to_contain_text("cancelled")
