"""The users pages and the realm home, as a signed-in browser sees them."""

from __future__ import annotations

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.state import context_of
from engine.directory.models import User
from testing.factories import HTML, BrowserLogin, RealmHandle, browser_session

Client = AsyncTestClient[Litestar]


async def signed_in(client: Client, realm: RealmHandle, user: User | None = None, *, mfa: bool = True) -> BrowserLogin:
    login = await browser_session(realm, user or realm.admin, mfa=mfa)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    return login


def htmx(login: BrowserLogin, target: str) -> dict[str, str]:
    return HTML | {"HX-Request": "true", "HX-Target": target, "X-CSRF-Token": login.csrf}


async def test_the_list_filters_as_you_type_and_pages(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    await realm.user("grace@example.com", display_name="Grace Hopper")
    linus = await realm.user("linus@example.com", display_name="Linus Torvalds")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": linus.id})

    page = await client.get(f"/realms/{realm.slug}/users", headers=HTML)
    assert page.status_code == 200
    assert "<html" in page.text and 'id="users-table"' in page.text and "New user" in page.text
    assert "grace@example.com" in page.text and "linus@example.com" in page.text
    assert 'aria-current="page"' in page.text.split('href="/realms/' + realm.slug + '/users"', 1)[1][:30]

    fragment = await client.get(
        f"/realms/{realm.slug}/users",
        params={"q": "hopper"},
        headers=HTML | {"HX-Request": "true", "HX-Target": "users-table"},
    )
    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<div id="users-table">') and "<html" not in fragment.text
    assert "grace@example.com" in fragment.text and "linus@example.com" not in fragment.text

    # A boosted navigation (HX-Request without that target) gets the whole page.
    boosted = await client.get(
        f"/realms/{realm.slug}/users",
        params={"q": "hopper"},
        headers=HTML | {"HX-Request": "true", "HX-Boosted": "true"},
    )
    assert "<html" in boosted.text

    suspended = await client.get(f"/realms/{realm.slug}/users", params={"status": "suspended"}, headers=HTML)
    assert "linus@example.com" in suspended.text and "grace@example.com" not in suspended.text
    nobody = await client.get(f"/realms/{realm.slug}/users", params={"q": "nobody-at-all"}, headers=HTML)
    assert "No user matches these filters." in nobody.text
    bad = await client.get(f"/realms/{realm.slug}/users", params={"status": "zombie"}, headers=HTML)
    assert bad.status_code == 422 and "status is active or suspended" in bad.text

    for i in range(50):
        await realm.user(f"person{i:02d}@example.com")
    first = await client.get(f"/realms/{realm.slug}/users", headers=HTML)
    assert "Next page" in first.text
    next_href = first.text.split('<nav class="pager"', 1)[1].split('href="', 1)[1].split('"', 1)[0]
    second = await client.get(next_href.replace("&amp;", "&"), headers=HTML)
    assert second.status_code == 200
    assert "person49@example.com" in second.text and "person49@example.com" not in first.text


async def test_creating_a_user_shows_every_error_at_once_or_opens_the_new_user(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/users"
    bad = await client.post(
        url, data={"email": "nope", "display_name": " ", "password": "short", "_csrf": login.csrf}, headers=HTML
    )
    assert bad.status_code == 422
    for message in ("must be an email address", "must be at least 1 character", "at least 12 characters"):
        assert message in bad.text
    assert bad.text.count('class="field-error"') == 3
    assert 'value="nope"' in bad.text  # what was typed stays in the form

    created = await client.post(
        url,
        data={"email": "new@example.com", "display_name": "New Person", "guest": "on", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert created.status_code == 303
    location = created.headers["location"]
    assert location.startswith(f"/realms/{realm.slug}/users/usr_")
    detail = await client.get(location, headers=HTML)
    assert "User created." in detail.text and "New Person" in detail.text and "new@example.com" in detail.text
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text("SELECT type, actor_id FROM audit_events WHERE type = 'user.created' AND subject_id = :u"),
                {"u": location.rsplit("/", 1)[1].split("?")[0]},
            )
        ).all()
        guest = await session.scalar(text("SELECT guest FROM users WHERE email = 'new@example.com'"))
    assert rows == [("user.created", realm.admin.id)] and guest is True

    again = await client.post(
        url, data={"email": "new@example.com", "display_name": "Twin", "_csrf": login.csrf}, headers=HTML
    )
    assert again.status_code == 409 and "already exists" in again.text


async def test_a_user_page_shows_memberships_roles_and_mfa(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    user = await realm.user("grace@example.com", display_name="Grace Hopper")
    org = await realm.organization("Acme Engineering")
    await realm.member(org, user)
    role = await realm.role("engineering-member", ["realm.workflows.read"], boundary="organization")
    await realm.assign(user, role, organization_id=org.id)
    page = await client.get(f"/realms/{realm.slug}/users/{user.id}", headers=HTML)
    assert page.status_code == 200
    assert "Acme Engineering" in page.text and "engineering-member" in page.text
    assert "not enrolled" in page.text and "Suspend" in page.text and "hx-confirm" in page.text
    assert realm.admin.email in page.text  # granted by


async def test_suspend_and_reactivate_swap_the_status_box_and_show_errors(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    user = await realm.user("grace@example.com")
    base = f"/realms/{realm.slug}/users/{user.id}"
    done = await client.post(base + "/suspend", headers=htmx(login, "user-status"))
    assert done.status_code == 200
    assert done.text.lstrip().startswith('<section id="user-status"') and "<html" not in done.text
    assert "suspended" in done.text and "Reactivate" in done.text
    twice = await client.post(base + "/suspend", headers=htmx(login, "user-status"))
    assert twice.status_code == 409 and "already suspended" in twice.text and 'id="user-status"' in twice.text
    back = await client.post(
        base + "/reactivate", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )  # a plain form, without JavaScript
    assert back.status_code == 303 and back.headers["location"] == base
    myself = await client.post(
        f"/realms/{realm.slug}/users/{realm.admin.id}/suspend", headers=htmx(login, "user-status")
    )
    assert myself.status_code == 409 and "cannot suspend yourself" in myself.text
    async with realm.sessions() as session:
        types = (
            await session.execute(
                text("SELECT type FROM outbox_events WHERE subject_id = :u ORDER BY id"), {"u": user.id}
            )
        ).scalars()
        assert list(types) == ["user.created", "user.suspended", "user.reactivated"]


async def test_users_pages_follow_the_permissions_of_the_api(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    await signed_in(client, realm, auditor)
    assert (await client.get(f"/realms/{realm.slug}/users", headers=HTML)).status_code == 403

    reader_role = await realm.role("user-reader", ["realm.users.read"])
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, reader_role)
    login = await signed_in(client, realm, reader)
    listing = await client.get(f"/realms/{realm.slug}/users", headers=HTML)
    assert listing.status_code == 200 and "New user" not in listing.text
    detail = await client.get(f"/realms/{realm.slug}/users/{auditor.id}", headers=HTML)
    assert detail.status_code == 200 and "Suspend" not in detail.text
    refused = await client.post(
        f"/realms/{realm.slug}/users/{auditor.id}/suspend", data={"_csrf": login.csrf}, headers=HTML
    )
    assert refused.status_code == 403
    assert (await client.get(f"/realms/{realm.slug}/users/{other_realm.admin.id}", headers=HTML)).status_code == 404
    assert (await client.get(f"/realms/{realm.slug}/users/usr_nothing", headers=HTML)).status_code == 404
    assert (await client.get(f"/realms/{other_realm.slug}/users", headers=HTML)).status_code == 404

    await signed_in(client, realm, mfa=False)
    account = await client.get(f"/realms/{realm.slug}/users", headers=HTML, follow_redirects=False)
    assert account.status_code == 303 and account.headers["location"].startswith(f"/realms/{realm.slug}/mfa")
    client.cookies.clear()
    anonymous = await client.get(f"/realms/{realm.slug}/users", headers=HTML, follow_redirects=False)
    assert anonymous.headers["location"] == f"/realms/{realm.slug}/sign-in?next=/realms/{realm.slug}/users"


async def test_the_realm_home_shows_counts_activity_and_status(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    await realm.user("grace@example.com")
    await realm.organization("Acme")
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
    assert home.status_code == 200
    assert realm.slug in home.text and 'id="service-status"' in home.text
    users_tile = home.text.split('id="kpi-users"', 1)[1].split("</a>", 1)[0]
    orgs_tile = home.text.split('id="kpi-organizations"', 1)[1].split("</a>", 1)[0]
    assert (
        '<span class="kpi" data-testid="kpi-value">2</span>' in users_tile
        and '<span class="kpi" data-testid="kpi-value">1</span>' in orgs_tile
    )
    assert "user.created" in home.text and "Recent activity" in home.text

    # Counts of pages the caller may not open are not shown at all.
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    await signed_in(client, realm, auditor)
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
    assert 'id="kpi-users"' not in home.text and 'id="kpi-active-workflows"' in home.text
    assert "user.created" in home.text  # the auditor reads the audit log

    plain = await realm.user("plain@example.com")
    await signed_in(client, realm, plain)
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML)
    assert home.status_code == 200 and "needs the permission <code>realm.audit.read</code>" in home.text


async def test_the_realm_home_shows_the_workflow_strip(client: Client, realm: RealmHandle) -> None:
    from testing.runs import drain, make_runner, start
    from testing.workflows import publish

    subject = await realm.user("s@example.com")
    wid = await publish(
        realm, {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    )
    await start(realm, wid, subject.id)
    await signed_in(client, realm)

    def tile(text: str, name: str) -> str:
        return text.split(f'id="kpi-{name}"', 1)[1].split("</a>", 1)[0]

    home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
    assert '<span class="kpi" data-testid="kpi-value">1</span>' in tile(home, "active-workflows")
    assert '<span class="kpi" data-testid="kpi-value">1</span>' in tile(home, "runs-in-flight")
    assert "<time" in tile(home, "oldest-due")
    assert '<span class="kpi" data-testid="kpi-value">0</span>' in tile(home, "pending-approvals")  # counted
    await drain(make_runner(realm))
    home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
    assert '<span class="kpi" data-testid="kpi-value">0</span>' in tile(home, "runs-in-flight")
    assert '<span class="kpi" data-testid="kpi-value">0</span>' in tile(home, "failed")

    plain = await realm.user("plain@example.com")
    await signed_in(client, realm, plain)
    home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
    assert 'id="kpi-active-workflows"' not in home  # may not read workflows


async def test_the_user_forms_keep_the_password_give_a_link_add_to_an_organization_and_assign_a_role(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/users"
    created = await client.post(
        url,
        data={"email": "pw@example.com", "display_name": "Pat", "password": "a long password 1", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert created.status_code == 303 and created.headers["location"].endswith("?created=1")
    user_url = created.headers["location"].split("?", 1)[0]
    user_id = user_url.rsplit("/", 1)[1]

    async def one(sql: str) -> object:
        async with realm.sessions() as session:
            return await session.scalar(text(sql), {"u": user_id})

    assert await one("SELECT password_hash IS NOT NULL FROM users WHERE id = :u") is True

    link = await client.post(f"{user_url}/sign-in-link", data={"_csrf": login.csrf}, headers=HTML)
    assert link.status_code == 200 and link.headers["cache-control"] == "no-store"
    assert f"/realms/{realm.slug}/sign-in/link?token=sil." in link.text
    assert await one("SELECT count(*) FROM sign_in_links WHERE user_id = :u") == 1

    org = await realm.organization("Acme")
    no_org = await client.post(f"{user_url}/memberships", data={"_csrf": login.csrf}, headers=HTML)
    assert no_org.status_code == 400 and "Choose an organization." in no_org.text
    member = await client.post(
        f"{user_url}/memberships",
        data={"organization_id": org.id, "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert member.status_code == 303 and member.headers["location"] == f"{user_url}?done=member"
    assert await one("SELECT organization_id FROM memberships WHERE user_id = :u") == org.id

    role = await realm.role("reader", ["realm.users.read"])
    assigned = await client.post(
        f"{user_url}/role-assignments",
        data={"role_id": role.id, "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert assigned.status_code == 303 and assigned.headers["location"] == f"{user_url}?done=role"
    assert await one("SELECT role_id FROM role_assignments WHERE user_id = :u") == role.id


async def test_refused_user_forms_say_what_to_check_and_a_sign_in_link_is_whole_or_refused(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/users"
    bad = await client.post(url, data={"email": "nope", "display_name": "Kept Name", "_csrf": login.csrf}, headers=HTML)
    assert bad.status_code == 422
    assert '<div class="flash bad" role="alert">Check the fields marked below.</div>' in bad.text
    assert 'value="Kept Name"' in bad.text  # the name typed stays beside the refused email

    user = await realm.user("link@example.com")
    user_url = f"{url}/{user.id}"

    async def links() -> object:
        async with realm.sessions() as session:
            return await session.scalar(text("SELECT count(*) FROM sign_in_links WHERE user_id = :u"), {"u": user.id})

    made = await client.post(f"{user_url}/sign-in-link", data={"_csrf": login.csrf}, headers=HTML)
    assert made.status_code == 200
    shown = made.text.split('data-testid="sign-in-link"', 1)[1].split("</div>", 1)[0]
    base = context_of(client.app).settings.link_base_url
    assert f"<code>{base}/realms/{realm.slug}/sign-in/link?token=sil." in shown  # the whole address to send
    assert "(until <time" in shown  # when it stops working
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": user.id})
    refused = await client.post(f"{user_url}/sign-in-link", data={"_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 409 and "The user is suspended: a sign-in link would not work." in refused.text
    assert 'data-testid="sign-in-link"' not in refused.text and await links() == 1

    no_role = await client.post(
        f"{user_url}/role-assignments", data={"role_id": "rol_nothing", "_csrf": login.csrf}, headers=HTML
    )
    assert no_role.status_code == 404 and '<div class="flash bad" role="alert">No such role.</div>' in no_role.text
    async with realm.sessions() as session:
        assert (
            await session.scalar(text("SELECT count(*) FROM role_assignments WHERE user_id = :u"), {"u": user.id}) == 0
        )
