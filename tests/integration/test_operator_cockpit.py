"""The cockpit as an administrator lives in it: navigation and controls by permission, the run
timeline telling what happened, references that cannot vanish unnoticed, error answers a client
can act on, an offline API reference."""

from __future__ import annotations

import re

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import User
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.workflows.catalog import create_workflow
from engine.workflows.references import workflows_referencing
from testing.factories import HTML, RealmHandle, bearer
from testing.pages import signed_in, step_block
from testing.runs import drain_realm, run_state, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


def nav_links(page: str) -> list[str]:
    """The labels of the main navigation's links."""
    nav = page.split('<nav class="nav realm-nav" aria-label="Main">', 1)[1].split("</nav>", 1)[0]
    return re.findall(r">([^<]+)</a>", nav)


# --- Navigation and controls by permission ----------------------------------------------------------


async def test_the_navigation_shows_only_pages_the_caller_may_open(client: Client, realm: RealmHandle) -> None:
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    await signed_in(client, realm, auditor)
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
    assert home.status_code == 200
    links = nav_links(home.text)
    assert "Audit log" in links and "Home" in links
    assert "Users" not in links and "Roles" not in links
    # Every link it shows opens; the menu for narrow windows holds the same links.
    menu = home.text.split('<nav class="menu-links" aria-label="Menu">', 1)[1].split("</nav>", 1)[0]
    assert re.findall(r">([^<]+)</a>", menu) == links
    for href in re.findall(r'href="([^"]+)"', menu):
        assert (await client.get(href, headers=HTML)).status_code == 200, href
    refused = await client.get(f"/realms/{realm.slug}/users", headers=HTML)
    assert refused.status_code == 403
    # A refusal keeps the realm's navigation: the links the caller may follow, none of them current.
    assert '<nav class="nav realm-nav"' in refused.text, "the 403 page lost the realm's navigation"
    assert nav_links(refused.text) == links and 'aria-current="page"' not in refused.text
    # The wide bar keeps the daily pages in view and the rest under "More", by permission too.
    more = home.text.split('data-testid="nav-more"', 1)[1].split("</details>", 1)[0]
    assert "API tokens" in re.findall(r">([^<]+)</a>", more) and "Webhooks" not in more
    assert "Audit log" not in more and "Service principals" not in more

    await signed_in(client, realm)  # the administrator sees everything
    admin_home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
    admin_links = nav_links(admin_home)
    assert {"Users", "Roles", "Workflows", "Runs", "Audit log", "Service principals"} <= set(admin_links)
    more = re.findall(r">([^<]+)</a>", admin_home.split('data-testid="nav-more"', 1)[1].split("</details>", 1)[0])
    assert set(more) == {"Notices", "Service principals", "Webhooks", "Templates", "Policy", "API tokens"}
    assert set(admin_links) - set(more) >= {"Home", "Workflows", "Runs", "Users", "Organizations", "Roles", "Audit log"}


async def test_the_author_of_a_revision_sees_approve_and_reject_disabled_with_why(
    client: Client, realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session,
            realm.actor,
            name="Joiner",
            definition=manual({"id": "done", "type": "end"}),
            has_definition=True,
            requires_approval=True,
        )
    page = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/1", headers=HTML)
    assert page.status_code == 200
    approve = re.search(r"<button[^>]*>Approve</button>", page.text)
    reject = re.search(r"<button[^>]*>Reject</button>", page.text)
    assert approve and "disabled" in approve.group(0) and 'aria-describedby="author-reason"' in approve.group(0)
    assert reject and "disabled" in reject.group(0)
    assert "You wrote this revision" in page.text

    other = await realm.user("reviewer@example.com")
    await realm.assign(other, await realm.builtin_role("realm-admin"))
    await signed_in(client, realm, other)
    theirs = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/1", headers=HTML)
    approve = re.search(r"<button[^>]*>Approve</button>", theirs.text)
    assert approve and "disabled" not in approve.group(0)


async def test_the_start_form_is_disabled_on_a_workflow_that_is_not_active(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    workflow_id = await publish(realm, manual({"id": "done", "type": "end"}), "Leaver")
    url = f"/realms/{realm.slug}/workflows/{workflow_id}/runs/start"
    active = await client.get(url, headers=HTML)
    assert "start-disabled-reason" not in active.text and '<fieldset class="plain" >' in active.text
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, workflow_id, False)
    disabled = await client.get(url, headers=HTML)
    assert 'disabled aria-describedby="start-disabled-reason"' in disabled.text
    assert "This workflow is disabled: only an active workflow starts runs." in disabled.text
    assert "Enable it first." in disabled.text


# --- The timeline ----------------------------------------------------------------------------------


async def test_the_failing_step_is_marked_failed_with_its_error(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    subject = await realm.user("ada@example.com")
    role = await realm.role("Payroll viewer", ["realm.users.read"])
    workflow_id = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "done", "type": "end"},
        ),
        "Payroll access",
    )
    run_id = await start(realm, workflow_id, subject.id)
    # The role goes (forced: a published workflow names it), and the run then fails at the grant.
    response = await client.delete(f"{realm.api}/roles/{role.id}", params={"force": "true"}, headers=realm.headers)
    assert response.status_code == 204, response.text
    await drain_realm(realm)
    assert await run_state(realm, run_id) in {"compensated", "failed"}
    page = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    grant = step_block(page.text, "grant")
    assert 'data-status="failed"' in page.text.split('id="step-grant"', 1)[1][:120]
    assert 'data-testid="step-error"' in grant and "not_found" in grant
    assert 'data-status="not reached"' in page.text.split('id="step-done"', 1)[1][:120]
    # The workflow's page says why its runs fail.
    detail = await client.get(f"/realms/{realm.slug}/workflows/{workflow_id}", headers=HTML)
    assert 'data-testid="workflow-health"' in detail.text and "/steps/0/role_id" in detail.text


async def test_a_cancellation_is_shown_as_such_with_actor_and_reason(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    subject = await realm.user("lin@example.com")
    workflow_id = await publish(realm, manual({"id": "done", "type": "end"}), "Contractor onboarding")
    run_id = await start(realm, workflow_id, subject.id)
    async with realm.sessions() as session, session.begin():
        await runs.cancel_run(session, realm.actor, run_id, reason="Hired by mistake")
    await drain_realm(realm)
    assert await run_state(realm, run_id) == "cancelled"
    page = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    cancellation = page.text.split('data-testid="cancellation"', 1)[1].split("</dd>", 1)[0]
    assert cancellation.lstrip(">").lstrip().startswith("cancelled") and "Hired by mistake" in cancellation
    assert f'href="/realms/{realm.slug}/users/{realm.admin.id}"' in cancellation
    assert "Last error" not in page.text
    done = page.text.split('id="step-done"', 1)[1][:120]
    assert 'data-status="cancelled"' in done


async def test_a_run_paused_by_its_disabled_workflow_says_why_and_how_to_resume(
    client: Client, realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    subject = await realm.user("max@example.com")
    workflow_id = await publish(realm, manual({"id": "done", "type": "end"}), "Mover")
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, workflow_id, False)
    run_id = await start_paused(realm, workflow_id, subject)
    await drain_realm(realm)
    assert await run_state(realm, run_id) == "pending"
    page = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    paused = page.text.split('data-testid="paused"', 1)[1].split("</div>", 1)[0]
    assert "Paused: the workflow Mover is disabled." in paused
    assert f'href="/realms/{realm.slug}/workflows/{workflow_id}"' in paused and "enable it" in paused
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, workflow_id, True)
    await drain_realm(realm)
    assert await run_state(realm, run_id) == "succeeded"
    after = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    assert 'data-testid="paused"' not in after.text


async def start_paused(realm: RealmHandle, workflow_id: str, subject: User) -> str:
    """A run started while its workflow was active, then paused by disabling it."""
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, workflow_id, True)
    run_id = await start(realm, workflow_id, subject.id)
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, workflow_id, False)
    return run_id


# --- Names on the realm's home ---------------------------------------------------------------------


async def test_the_home_activity_names_groups_and_people(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    org = await realm.organization("Engineering")
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _roles = await create_group(session, realm.actor, authority, org.id, name="On-call")
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
    activity = home.text.split('class="activity"', 1)[1].split("</table>", 1)[0]
    assert (
        f'href="/realms/{realm.slug}/organizations/{org.id}/groups/{group.id}" title="{group.id}">On-call</a>'
        in activity
    )
    assert f"<code>{group.id}</code>" not in activity
    assert re.search(r'<time class="nowrap" datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">', activity)


# --- References that cannot vanish unnoticed -------------------------------------------------------


async def test_deleting_a_role_or_subscription_a_published_workflow_names_answers_409(
    client: Client, realm: RealmHandle
) -> None:
    role = await realm.role("Badge printer", ["realm.users.read"])
    unused = await realm.role("Unused", ["realm.users.read"])
    await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}, {"id": "done", "type": "end"}
        ),
        "Front desk onboarding",
    )
    refused = await client.delete(f"{realm.api}/roles/{role.id}", headers=realm.headers)
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "referenced_by_workflows"
    assert body["detail"].startswith(
        "The role is used by the published revision of 1 workflow(s): Front desk onboarding."
    )
    assert [e["code"] for e in body["errors"]] == ["referenced_by"]
    [workflow] = body["referenced_by"]
    assert workflow["name"] == "Front desk onboarding" and workflow["workflow_id"].startswith("wfl_")
    assert (await client.get(f"{realm.api}/roles/{role.id}", headers=realm.headers)).status_code == 200
    assert (await client.delete(f"{realm.api}/roles/{unused.id}", headers=realm.headers)).status_code == 204

    # The page refuses the same way and offers to delete anyway.
    login = await signed_in(client, realm)
    page = await client.post(f"/realms/{realm.slug}/roles/{role.id}/delete", data={"_csrf": login.csrf}, headers=HTML)
    assert page.status_code == 409 and "Front desk onboarding" in page.text and 'name="force"' in page.text
    forced = await client.post(
        f"/realms/{realm.slug}/roles/{role.id}/delete",
        data={"_csrf": login.csrf, "force": "true"},
        headers=HTML,
        follow_redirects=False,
    )
    assert forced.status_code == 303
    assert (await client.get(f"{realm.api}/roles/{role.id}", headers=realm.headers)).status_code == 404


async def test_the_refusal_names_every_published_workflow_that_uses_the_role_and_only_those(
    client: Client, realm: RealmHandle
) -> None:
    """Two workflows name the role: both are named, by name. A deleted one that named it does not
    count, and an id that differs from the role's is no reference, even where a LIKE pattern's
    ``_`` or ``%`` in it would match the role's id."""
    role = await realm.role("Badge printer", ["realm.users.read"])
    grant = manual(
        {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}, {"id": "done", "type": "end"}
    )
    second = await publish(realm, grant, "Visitor badges")
    first = await publish(realm, grant, "Front desk onboarding")
    retired = await publish(realm, grant, "Retired badges")
    removed = await client.delete(f"{realm.api}/workflows/{retired}", headers=realm.headers)
    assert removed.status_code == 204, removed.text

    refused = await client.delete(f"{realm.api}/roles/{role.id}", headers=realm.headers)
    assert refused.status_code == 409
    body = refused.json()
    assert body["detail"] == (
        "The role is used by the published revision of 2 workflow(s): Front desk onboarding, Visitor badges. "
        "Their runs would fail at that step. Change those workflows first, or delete anyway with force=true."
    )
    assert body["referenced_by"] == [
        {"workflow_id": first, "name": "Front desk onboarding"},
        {"workflow_id": second, "name": "Visitor badges"},
    ]
    assert [(e["path"], e["code"], e["message"]) for e in body["errors"]] == [
        ("", "referenced_by", f"workflow Front desk onboarding ({first})"),
        ("", "referenced_by", f"workflow Visitor badges ({second})"),
    ]

    # The role's id with one character made "_", or its end made "%", and a text whose JSON escape
    # (gran\t) reads as a step's id in a LIKE pattern: no such role, and no reference.
    lookalikes = [role.id[:5] + "_" + role.id[6:], role.id[:-3] + "%", "gran\t"]
    async with realm.sessions() as session:
        for lookalike in lookalikes:
            assert await workflows_referencing(session, realm.id, lookalike) == [], lookalike
        assert [w.id for w in await workflows_referencing(session, realm.id, role.id)] == [first, second]
    unknown = await client.delete(f"{realm.api}/roles/{lookalikes[0]}", headers=realm.headers)
    assert unknown.status_code == 404, unknown.text


# --- Error answers ---------------------------------------------------------------------------------


async def test_a_422_carries_no_issue_about_the_realm_path(client: Client, realm: RealmHandle) -> None:
    response = await client.post(
        realm.api + "/users", json={"email": 5, "display_name": "X", "bogus": 1}, headers=realm.headers
    )
    assert response.status_code == 422
    paths = [e["path"] for e in response.json()["errors"]]
    assert paths and not any(p.startswith("path:") for p in paths), paths


async def test_malformed_json_answers_a_documented_code(client: Client, realm: RealmHandle) -> None:
    for raw in (b'{"email": ', b'{"email": "a@b.example",}', b"not json"):
        response = await client.post(
            realm.api + "/users", content=raw, headers=realm.headers | {"content-type": "application/json"}
        )
        assert response.status_code == 400, raw
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        assert body["code"] == "malformed_json" and body["errors"][0]["code"] == "malformed_json"
    assert (await client.get(realm.api + "/users", headers=realm.headers)).json()["items"]  # nothing changed


# --- Small things ----------------------------------------------------------------------------------


async def test_the_api_reference_works_offline(client: Client) -> None:
    page = await client.get("/schema")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert not re.search(r'(src|href)="(https?:)?//', page.text), "nothing is loaded from another host"
    assert "<script" not in page.text
    assert 'id="createUser"' in page.text and "application/problem+json" in page.text
    assert (await client.get("/schema/openapi.json")).json()["openapi"].startswith("3.")


async def test_a_favicon_is_served(client: Client) -> None:
    icon = await client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg")


async def test_pages_after_the_first_offer_previous_as_well_as_next(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    for n in range(55):
        await realm.user(f"person{n:02d}@example.com")
    first = await client.get(f"/realms/{realm.slug}/users", headers=HTML)
    pager = first.text.split('class="pager"', 1)[1].split("</nav>", 1)[0]
    assert "Next page" in pager and "Previous page" not in pager
    second_href = re.search(r'href="([^"]+)" rel="next"', pager).group(1).replace("&amp;", "&")
    second = await client.get(second_href, headers=HTML)
    pager2 = second.text.split('class="pager"', 1)[1].split("</nav>", 1)[0]
    back_href = re.search(r'href="([^"]+)" rel="prev"', pager2).group(1).replace("&amp;", "&")
    back = await client.get(back_href, headers=HTML)
    assert back.text.count('data-testid="user-row"') == first.text.count('data-testid="user-row"')
    assert re.findall(r'data-testid="user-row"[^>]*', back.text) == re.findall(
        r'data-testid="user-row"[^>]*', first.text
    )


async def test_a_bearer_of_another_realm_cannot_see_names(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    role = await other_realm.role("Theirs", ["realm.users.read"])
    refused = await client.delete(f"{realm.api}/roles/{role.id}", headers=bearer(realm.admin_token))
    assert refused.status_code == 404


# --- Onboarding from the cockpit -------------------------------------------------------------------


async def test_a_sign_in_link_is_made_on_the_users_page_and_shown_once(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    newcomer = await realm.user("newcomer@example.com")
    url = f"/realms/{realm.slug}/users/{newcomer.id}"
    before = await client.get(url, headers=HTML)
    assert "Make a sign-in link" in before.text and 'data-testid="sign-in-link"' not in before.text
    made = await client.post(url + "/sign-in-link", data={"_csrf": login.csrf}, headers=HTML)
    assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
    link = re.search(r"(/realms/[^/]+/sign-in/link\?token=[^<\s]+)</code>", made.text).group(1)
    assert (await client.get(url, headers=HTML)).text.count(link.split("=", 1)[1]) == 0  # shown once
    client.cookies.clear()
    opened = await client.get(link, headers=HTML)
    assert opened.status_code == 200 and "Continue" in opened.text

    # The one rule: a helpdesk user cannot make a link for an administrator.
    helper = await realm.user("helper@example.com")
    desk = await realm.role("Desk", ["realm.users.read", "realm.users.write"])
    await realm.assign(helper, desk)
    helper_login = await signed_in(client, realm, helper)
    refused = await client.post(
        f"/realms/{realm.slug}/users/{realm.admin.id}/sign-in-link", data={"_csrf": helper_login.csrf}, headers=HTML
    )
    assert refused.status_code == 403 and "sign-in/link?token=" not in refused.text


async def test_add_to_organization_and_assign_role_from_the_users_page(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    person = await realm.user("joiner@example.com")
    org = await realm.organization("Finance")
    role = await realm.role("Ledger reader", ["realm.users.read"])
    url = f"/realms/{realm.slug}/users/{person.id}"
    page = await client.get(url, headers=HTML)
    assert f'<option value="{org.id}">Finance</option>' in page.text
    assert f'<option value="{role.id}">Ledger reader</option>' in page.text

    added = await client.post(
        url + "/memberships",
        data={"_csrf": login.csrf, "organization_id": org.id},
        headers=HTML,
        follow_redirects=False,
    )
    assert added.status_code == 303
    again = await client.post(url + "/memberships", data={"_csrf": login.csrf, "organization_id": org.id}, headers=HTML)
    assert again.status_code == 409 and "already a member" in again.text
    assigned = await client.post(
        url + "/role-assignments",
        data={"_csrf": login.csrf, "role_id": role.id, "organization_id": ""},
        headers=HTML,
        follow_redirects=False,
    )
    assert assigned.status_code == 303
    after = await client.get(url, headers=HTML)
    assert "Ledger reader" in after.text.split('id="assignments-title"', 1)[1]
    memberships = after.text.split('id="memberships-title"', 1)[1].split("</table>", 1)[0]
    assert "Finance" in memberships
    api = await client.get(f"{realm.api}/role-assignments", params={"user_id": person.id}, headers=realm.headers)
    assert [a["role_id"] for a in api.json()["items"]] == [role.id]

    # The grant ceiling: a role with a permission the caller lacks is refused, nothing assigned.
    helper = await realm.user("helper2@example.com")
    desk = await realm.role("Desk 2", ["realm.users.read", "realm.roles.write"])
    await realm.assign(helper, desk)
    big = await realm.role("Publisher", ["realm.workflows.publish"])
    helper_login = await signed_in(client, realm, helper)
    refused = await client.post(
        url + "/role-assignments", data={"_csrf": helper_login.csrf, "role_id": big.id}, headers=HTML
    )
    assert refused.status_code == 403
    api = await client.get(f"{realm.api}/role-assignments", params={"user_id": person.id}, headers=realm.headers)
    assert [a["role_id"] for a in api.json()["items"]] == [role.id]


async def test_service_principals_and_their_tokens_from_the_cockpit(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    base = f"/realms/{realm.slug}/service-principals"
    empty = await client.get(base, headers=HTML)
    assert empty.status_code == 200 and "No service principals yet." in empty.text
    created = await client.post(
        base,
        data={"_csrf": login.csrf, "name": "HR sync", "description": "Nightly"},
        headers=HTML,
        follow_redirects=False,
    )
    assert created.status_code == 303
    sp_url = created.headers["location"].split("?", 1)[0]
    assert "HR sync" in (await client.get(base, headers=HTML)).text

    minted = await client.post(
        sp_url + "/tokens", data={"_csrf": login.csrf, "name": "nightly", "expires_in_days": "30"}, headers=HTML
    )
    assert minted.status_code == 200 and minted.headers["cache-control"] == "no-store"
    token = re.search(r'class="secret" id="minted-token">([^<]+)<', minted.text).group(1)
    used = await client.get(f"{realm.api}/users", headers=bearer(token))
    assert used.status_code in (200, 403), (
        token,
        used.text,
    )  # a real token: it authenticates (what it may do is its roles')
    listed = await client.get(sp_url, headers=HTML)
    assert token not in listed.text and listed.text.count('data-testid="sp-token-row"') == 1
    token_id = re.search(r'action="[^"]+/tokens/(tok_[^/]+)/revoke"', listed.text).group(1)
    revoked = await client.post(
        f"{sp_url}/tokens/{token_id}/revoke", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )
    assert revoked.status_code == 303
    assert (await client.get(f"{realm.api}/users", headers=bearer(token))).status_code == 401


async def test_every_issue_of_a_body_at_once_an_unknown_member_and_a_bad_email(
    client: Client, realm: RealmHandle
) -> None:
    response = await client.post(
        realm.api + "/users",
        json={"email": "not-an-email", "display_name": "Ada", "script": "rm -rf /"},
        headers=realm.headers,
    )
    assert response.status_code == 422
    issues = {(e["path"], e["code"]) for e in response.json()["errors"]}
    assert issues == {("/script", "unknown_member"), ("/email", "invalid_email")}, response.json()
    wrong = await client.post(
        realm.api + "/users", json={"email": 5, "guest": "yes", "extra": 1}, headers=realm.headers
    )
    issues = {(e["path"], e["code"]) for e in wrong.json()["errors"]}
    assert issues == {
        ("/email", "wrong_type"),
        ("/guest", "wrong_type"),
        ("/extra", "unknown_member"),
        ("/display_name", "required"),
    }, wrong.json()
    users = (await client.get(realm.api + "/users", headers=realm.headers)).json()["items"]
    assert all(u["email"] != "not-an-email" for u in users)  # nothing changed
