"""A home page for every role: the realm's home and its navigation show only links their viewer may
follow, each to a page that exists; the brand and ``/`` lead a signed-in person to their home."""

from __future__ import annotations

import html
import re

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.auth import Principal, may_request
from engine.directory.authz import PERMISSIONS, load_authority
from engine.directory.credentials import RealmRow
from engine.directory.models import Realm, User
from engine.seeding.demo_realm import DEMO_ROLES
from testing.diagnostics import compensation_failed_run
from testing.factories import HTML, RealmHandle, browser_session
from testing.pages import signed_in
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


def links(page: str) -> list[str]:
    """Every same-site link of a page (``<a href>``), in order."""
    found = [html.unescape(href) for href in re.findall(r'<a\b[^>]*\bhref="([^"]*)"', page)]
    return [href for href in found if href.startswith("/") and not href.startswith("//")]


async def viewers(realm: RealmHandle) -> dict[str, User]:
    """A user for each built-in and seeded role, and one with no role at all."""
    people: dict[str, User] = {"realm-admin": realm.admin}
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    people["realm-auditor"] = auditor
    org = await realm.organization("Engineering")
    for name, (permissions, boundary, requires_approval, _description) in DEMO_ROLES.items():
        role = await realm.role(name, permissions, boundary=boundary, requires_approval=requires_approval)
        user = await realm.user(f"{name}@example.com")
        if boundary == "organization":
            await realm.member(org, user)
        await realm.assign(user, role, organization_id=org.id if boundary == "organization" else None)
        people[name] = user
    people["no role"] = await realm.user("plain@example.com")
    return people


async def test_every_link_of_the_home_and_the_navigation_opens_for_every_role(
    client: Client, realm: RealmHandle
) -> None:
    people = await viewers(realm)
    assert {"realm-admin", "realm-auditor", "access-approver", "no role"} <= set(people)
    failures = []
    seen: dict[str, set[str]] = {}
    for role, user in people.items():
        await signed_in(client, realm, user)
        home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
        assert home.status_code == 200, role
        seen[role] = set(links(home.text))
        for href in sorted(seen[role]):
            answer = await client.get(href, headers=HTML, follow_redirects=True)
            if answer.status_code in (403, 404):
                failures.append(f"{role}: {href} -> {answer.status_code}")
    # A session without a second factor starts from its home (its approvals), not the realm's.
    plain = await browser_session(realm, people["no role"], mfa=False)
    client.cookies.clear()
    client.cookies.set("cockpit_session", plain.cookie, domain="testserver.local")
    start = await client.get("/", headers=HTML, follow_redirects=True)
    assert start.status_code == 200
    seen["no second factor"] = set(links(start.text))
    for href in sorted(seen["no second factor"]):
        answer = await client.get(href, headers=HTML, follow_redirects=True)
        if answer.status_code in (403, 404):
            failures.append(f"no second factor: {href} -> {answer.status_code}")
    assert not failures, "\n".join(failures)
    # Not by showing nothing: the administrator is offered every page of the realm, the others less.
    r = f"/realms/{realm.slug}"
    admin_pages = {r + p for p in ("/users", "/organizations", "/roles", "/webhooks", "/audit", "/workflows", "/runs")}
    assert admin_pages <= seen["realm-admin"]
    assert {r + "/", r + "/approvals", r + "/mfa"} <= seen["no role"]
    assert r + "/users" not in seen["no role"] and r + "/users" not in seen["realm-auditor"]
    assert r + "/audit" in seen["realm-auditor"] and r + "/runs" in seen["access-approver"]
    assert {r + "/approvals", r + "/tokens", r + "/mfa"} <= seen["no second factor"]
    assert r + "/" not in seen["no second factor"]  # the realm's home needs a second factor


async def test_the_reviews_waiting_figure_is_only_for_those_who_may_review(client: Client, realm: RealmHandle) -> None:
    people = await viewers(realm)
    for role, shown in (("realm-admin", True), ("realm-auditor", False), ("access-approver", False)):
        await signed_in(client, realm, people[role])
        home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
        assert ('data-testid="kpi-reviews-waiting"' in home) is shown, role
        assert ('data-testid="kpi-runs-in-flight"' in home) is True, role


async def test_the_groups_figure_opens_the_organizations_where_groups_live(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
    tile = re.search(r'<a class="card kpi-card" href="([^"]+)" id="kpi-groups"', home)
    assert tile is not None and tile.group(1) == f"/realms/{realm.slug}/organizations"


# --- The brand leads home ---------------------------------------------------------------------------


def brand(page: str) -> str:
    found = re.search(r'<a class="brand" href="([^"]*)"', page)
    assert found is not None
    return found.group(1)


async def test_the_brand_and_the_start_page_lead_a_signed_in_person_home(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    home = await client.get(f"/realms/{realm.slug}/users", headers=HTML)
    assert brand(home.text) == f"/realms/{realm.slug}/"
    start = await client.get("/", headers=HTML, follow_redirects=False)
    assert start.status_code == 303 and start.headers["location"] == f"/realms/{realm.slug}/"

    # A session without a second factor cannot open the realm's home: its home is its approvals.
    plain = await realm.user("plain@example.com")
    client.cookies.clear()
    account = await browser_session(realm, plain, mfa=False)
    client.cookies.set("cockpit_session", account.cookie, domain="testserver.local")
    start = await client.get("/", headers=HTML, follow_redirects=False)
    assert start.status_code == 303 and start.headers["location"] == f"/realms/{realm.slug}/approvals"
    approvals = await client.get(start.headers["location"], headers=HTML)
    assert approvals.status_code == 200 and brand(approvals.text) == f"/realms/{realm.slug}/approvals"

    # Someone not signed in, or whose session has ended, gets the start page as before.
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE sessions SET revoked_at = now() WHERE id = :s"), {"s": login.session_id})
    client.cookies.clear()
    client.cookies.set("cockpit_session", "no-such-session", domain="testserver.local")
    ended = await client.get("/", headers=HTML, follow_redirects=False)
    assert ended.status_code == 200 and "Service status" in ended.text
    client.cookies.clear()
    anonymous = await client.get("/", headers=HTML, follow_redirects=False)
    assert anonymous.status_code == 200 and brand(anonymous.text) == "/"


# --- Two links deep -----------------------------------------------------------------------------

SKIPPED_LINKS = ("/api/", "/static/", "/sign-out", "/docs")


async def viewer(realm: RealmHandle, user: User) -> Principal:
    """The principal a browser session with a second factor gives ``user``: what the guard asks."""
    async with realm.sessions() as session:
        row = await session.get(Realm, realm.id)
        assert row is not None
        authority = await load_authority(session, realm.id, "user", user.id)
    realm_row = RealmRow(id=row.id, slug=row.slug, name=row.name, created_at=row.created_at, authz_epoch=0)
    return Principal(realm_row, "user", user.id, user.display_name, user.email, "admin", "session", authority=authority)


def forms(page: str) -> list[str]:
    """Where each form or htmx control of a page sends an unsafe request."""
    posted = re.findall(r'<form\b[^>]*\bmethod="post"[^>]*\baction="([^"]*)"', page, flags=re.IGNORECASE)
    posted += re.findall(r'<form\b[^>]*\baction="([^"]*)"[^>]*\bmethod="post"', page, flags=re.IGNORECASE)
    posted += re.findall(r'\bhx-post="([^"]*)"', page)
    return [html.unescape(action) for action in posted if action.startswith("/")]


async def test_no_link_two_pages_deep_leads_a_role_to_a_refusal(
    client: Client, app: Litestar, realm: RealmHandle
) -> None:
    """From the home, every link of every page it links to opens for the role that was shown it,
    and every form those pages offer is one the role may send: a page never offers what its viewer
    may not open or do (a role's holders, a run's subject, a workflow's revisions, a revoke
    button…), for the administrator, the auditor, each seeded role and a plain user."""
    people = await viewers(realm)
    reader = await realm.user("reader@example.com")  # reads everything, changes nothing
    await realm.assign(reader, await realm.role("reads-all", [p for p in PERMISSIONS if p.endswith(".read")]))
    people["every read, no write"] = reader
    subject = await realm.user("subject@example.com")
    wid = await publish(
        realm,
        manual(
            {"id": "approve", "type": "approval", "approvers": [people["access-approver"].id], "expires_in": "2h"},
            {"id": "done", "type": "end"},
        ),
        name="Reviewed access",
    )
    # What links to people, roles and organizations: a run in an organization, a run whose undo
    # failed (Needs attention), schedules naming a role and an organization, a group with a role.
    org = await realm.organization("Linked org")
    await realm.member(org, subject)
    for body in ({"subject_id": subject.id}, {"subject_id": subject.id, "organization_id": org.id}):
        started = await client.post(f"{realm.api}/workflows/{wid}/runs", json=body, headers=realm.headers)
        assert started.status_code in (200, 201, 202), started.text
    await compensation_failed_run(realm)
    scheduled_role = await realm.role("scheduled-role", ["realm.workflows.read"])
    await publish(
        realm,
        {
            "schema_version": 1,
            "triggers": [
                {
                    "type": "schedule",
                    "every": "24h",
                    "select": {"type": "role_holders", "role_id": scheduled_role.id, "granted_before": "48h"},
                },
                {
                    "type": "schedule",
                    "every": "24h",
                    "select": {"type": "organization_members", "organization_id": org.id},
                },
            ],
            "steps": [{"id": "done", "type": "end"}],
        },
        name="Scheduled review",
    )
    failures: list[str] = []
    opened: dict[str, int] = {}
    offered: dict[str, int] = {}
    for role, user in people.items():
        await signed_in(client, realm, user)
        principal = await viewer(realm, user)
        frontier = [f"/realms/{realm.slug}/"]
        seen = set(frontier)
        shown_on = {frontier[0]: "the start"}
        for _depth in range(3):  # the home, the pages it links to, the pages those link to
            following: list[str] = []
            for href in frontier:
                answer = await client.get(href, headers=HTML, follow_redirects=True)
                if answer.status_code in (403, 404):
                    failures.append(f"{role}: {href} (shown on {shown_on[href]}) -> {answer.status_code}")
                    continue
                opened[role] = opened.get(role, 0) + 1
                for action in forms(answer.text):
                    offered[role] = offered.get(role, 0) + 1
                    if not may_request(app, principal, action, "POST"):
                        failures.append(f"{role}: a form to {action} on {href}, which the role may not send")
                for link in links(answer.text):
                    target = link.split("#")[0]
                    if target and not link.startswith(SKIPPED_LINKS) and not may_request(app, principal, target):
                        # the pages three links away are not opened, but their links are asked too
                        failures.append(f"{role}: a link to {target} on {href}, which the role may not open")
                    if link.split("#")[0] and link not in seen and not link.startswith(SKIPPED_LINKS):
                        seen.add(link)
                        shown_on[link.split("#")[0]] = href
                        following.append(link.split("#")[0])
            frontier = following
    assert not failures, "\n".join(failures)
    # Deep enough to mean something: the administrator opened many pages, every role some.
    assert opened["realm-admin"] >= 40, opened
    assert all(count >= 3 for count in opened.values()), opened
    assert offered["realm-admin"] >= 20, offered
