"""POST /sign-in-links: administrators make one-time sign-in links, so automation signs a browser
in without a person. The ceiling of changing a user applies, in every scope."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.admin_cli import public_base_url, sign_in_link_url
from cockpit.app import create_app
from engine.platform.config import Settings
from testing.factories import HTML, RealmHandle, bearer, browser_session, form_value

Client = AsyncTestClient[Litestar]


async def counts(realm: RealmHandle) -> tuple[int, int]:
    async with realm.sessions() as session:
        links = await session.scalar(text("SELECT count(*) FROM sign_in_links WHERE realm_id = :r"), {"r": realm.id})
        audited = await session.scalar(
            text("SELECT count(*) FROM audit_events WHERE realm_id = :r AND type = 'user.sign_in_link_created'"),
            {"r": realm.id},
        )
    return int(links or 0), int(audited or 0)


async def test_an_admin_gets_a_link_once_that_signs_the_user_in_and_is_audited(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("qa-flow@example.com")
    response = await client.post(realm.api + "/sign-in-links", json={"user_id": user.id}, headers=realm.headers)
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["user_id"] == user.id and body["id"].startswith("sil_")
    token = body["path"].split("token=", 1)[1]
    assert token.startswith("sil.")
    assert body["path"] == f"/realms/{realm.slug}/sign-in/link?token={token}"
    assert body["url"].endswith(body["path"]) and body["url"].startswith("http")
    expires = datetime.fromisoformat(body["expires_at"])
    assert timedelta(minutes=14) < expires - datetime.now(UTC) <= timedelta(minutes=15)

    # Only the hash is kept, and the audit names the administrator, never the token.
    async with realm.sessions() as session:
        stored = (await session.execute(text("SELECT token_hash, user_id FROM sign_in_links"))).all()
        audit = (
            await session.execute(
                text(
                    "SELECT actor_type, actor_id, subject_type, subject_id, category, details, details::text AS text"
                    " FROM audit_events"
                    " WHERE type = 'user.sign_in_link_created'"
                )
            )
        ).all()
    assert [row.user_id for row in stored] == [user.id] and token not in stored[0].token_hash
    assert [(a.actor_type, a.actor_id, a.subject_type, a.subject_id, a.category) for a in audit] == [
        ("user", realm.admin.id, "user", user.id, "authentication")
    ]
    assert token not in audit[0].text
    assert sorted(audit[0].details) == ["expires_at", "link_id"] and audit[0].details["link_id"] == body["id"]
    assert datetime.fromisoformat(audit[0].details["expires_at"]) == expires

    # The link signs the user in (a second factor, so admin pages would open for an admin).
    page = await client.get(body["path"], headers=HTML)
    assert page.status_code == 200 and form_value(page.text, "token") == token
    go = await client.post(
        f"/realms/{realm.slug}/sign-in/link",
        data={"token": token, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    assert go.status_code == 303 and client.cookies.get("cockpit_session")
    # ...once.
    assert (await client.get(body["path"], headers=HTML)).status_code == 400


async def test_a_target_stronger_than_the_actor_is_refused_and_nothing_is_made(
    client: Client, realm: RealmHandle
) -> None:
    helpdesk_role = await realm.role("helpdesk", ["realm.users.read", "realm.users.write"])
    helpdesk = await realm.user("helpdesk@example.com")
    await realm.assign(helpdesk, helpdesk_role)
    headers = bearer(await realm.token(helpdesk))

    # Stronger realm-wide: the realm administrator.
    refused = await client.post(realm.api + "/sign-in-links", json={"user_id": realm.admin.id}, headers=headers)
    assert refused.status_code == 403, refused.text
    problem = refused.json()
    # The refusal names what the administrator holds that the caller lacks (never the caller's own).
    assert problem["code"] == "target_outranks_actor" and "realm.roles.write" in problem["detail"]
    assert "realm.users.write" not in problem["detail"].split("(")[1].split(")")[0].split(", ")
    assert refused.headers["content-type"].startswith("application/problem+json")

    # Stronger only inside one organization: still refused.
    org = await realm.organization("Branch")
    org_role = await realm.role("branch-admin", ["org.members.write"], boundary="organization")
    branch_admin = await realm.user("branch@example.com")
    await realm.assign(branch_admin, org_role, organization_id=org.id)
    refused = await client.post(realm.api + "/sign-in-links", json={"user_id": branch_admin.id}, headers=headers)
    assert refused.status_code == 403 and refused.json()["code"] == "target_outranks_actor"
    assert f"org.members.write in {org.id}" in refused.json()["detail"]
    assert await counts(realm) == (0, 0)

    # A user who holds nothing the helpdesk lacks: allowed.
    plain = await realm.user("plain@example.com")
    allowed = await client.post(realm.api + "/sign-in-links", json={"user_id": plain.id}, headers=headers)
    assert allowed.status_code == 201, allowed.text
    assert await counts(realm) == (1, 1)


async def test_the_same_ceiling_now_guards_a_password_change_in_every_scope(client: Client, realm: RealmHandle) -> None:
    helpdesk_role = await realm.role("helpdesk", ["realm.users.read", "realm.users.write"])
    helpdesk = await realm.user("helpdesk@example.com")
    await realm.assign(helpdesk, helpdesk_role)
    org = await realm.organization("Branch")
    org_role = await realm.role("branch-admin", ["org.members.write"], boundary="organization")
    branch_admin = await realm.user("branch@example.com")
    await realm.assign(branch_admin, org_role, organization_id=org.id)
    takeover = await client.patch(
        f"{realm.api}/users/{branch_admin.id}",
        json={"password": "a-new-password-123"},
        headers=bearer(await realm.token(helpdesk)),
    )
    assert takeover.status_code == 403 and takeover.json()["code"] == "target_outranks_actor"


async def test_bad_requests_change_nothing(client: Client, realm: RealmHandle, other_realm: RealmHandle) -> None:
    url = realm.api + "/sign-in-links"
    missing = await client.post(url, json={}, headers=realm.headers)
    assert missing.status_code == 422 and missing.json()["code"]
    extra = await client.post(url, json={"user_id": realm.admin.id, "token": "mine"}, headers=realm.headers)
    assert extra.status_code == 422 and extra.json()["code"]
    unknown = await client.post(url, json={"user_id": "usr_nobody"}, headers=realm.headers)
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    # Another realm's user does not exist here.
    foreign = await client.post(url, json={"user_id": other_realm.admin.id}, headers=realm.headers)
    assert foreign.status_code == 404
    # Another realm's administrator cannot reach this realm.
    assert (await client.post(url, json={"user_id": realm.admin.id}, headers=other_realm.headers)).status_code == 404
    assert (await client.post(url, json={"user_id": realm.admin.id})).status_code == 401
    # An account-audience token is not an administrator's credential.
    account = bearer(await realm.token(realm.admin, audience="account"))
    assert (await client.post(url, json={"user_id": realm.admin.id}, headers=account)).status_code == 403

    suspended = await realm.user("gone@example.com")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": suspended.id})
    refused = await client.post(url, json={"user_id": suspended.id}, headers=realm.headers)
    assert refused.status_code == 409 and refused.json()["code"] == "user_suspended"
    assert await counts(realm) == (0, 0) and await counts(other_realm) == (0, 0)


async def test_the_route_is_in_the_openapi_schema(client: Client) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    operation = schema["paths"]["/api/v1/realms/{realm}/sign-in-links"]["post"]
    assert operation["operationId"] == "createSignInLink"
    assert "201" in operation["responses"]


async def test_links_point_at_the_public_url_never_at_the_requests_host_header(
    settings: Settings, database_url: str, realm: RealmHandle
) -> None:
    """A forged ``Host`` must not turn an administrator's link into one that leaks the token."""
    user = await realm.user("host-probe@example.com")
    login = await browser_session(realm, realm.admin)
    forged = {"Host": "evil.example", "X-Forwarded-Host": "evil.example"}
    for public_url, base in ((None, f"http://localhost:{settings.port}"), ("https://cockpit.example.com", None)):
        app = create_app(dataclasses.replace(settings, public_url=public_url), database_url=database_url)
        base = base or str(public_url)
        async with AsyncTestClient(app=app) as client:
            api = await client.post(
                realm.api + "/sign-in-links", json={"user_id": user.id}, headers={**realm.headers, **forged}
            )
            assert api.status_code == 201, api.text
            assert api.json()["url"] == base + api.json()["path"]
            client.cookies.set("cockpit_session", login.cookie)
            page = await client.post(
                f"/realms/{realm.slug}/users/{user.id}/sign-in-link",
                data={"_csrf": login.csrf},
                headers={**HTML, **forged},
            )
            assert page.status_code == 200, page.text
            assert f"{base}/realms/{realm.slug}/sign-in/link?token=sil." in page.text
            assert "evil.example" not in page.text


def test_the_cli_links_use_the_public_url_when_it_is_set(settings: Settings) -> None:
    assert public_base_url(settings) == f"http://localhost:{settings.port}"
    public = dataclasses.replace(settings, public_url="https://cockpit.example.com")
    assert (
        sign_in_link_url(public, "acme", "sil.x") == "https://cockpit.example.com/realms/acme/sign-in/link?token=sil.x"
    )
