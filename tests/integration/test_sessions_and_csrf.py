"""Session cookies, their rotation and expiry, CSRF on every unsafe form, secrets at rest."""

from __future__ import annotations

import asyncio
import hashlib
import re
from http.cookies import SimpleCookie

import pyotp
import pytest
from httpx import Response
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.app import create_app
from cockpit.pages.auth.sessions import PENDING_TTL
from engine.platform.config import Settings, load_settings
from testing.factories import HTML, RealmHandle, browser_session, enrol_totp, form_value, sign_in_link

PASSWORD = "correct horse battery staple"
Client = AsyncTestClient[Litestar]


def set_cookies(response_headers: list[str]) -> dict[str, dict[str, str | bool]]:
    """Each Set-Cookie header as name -> its attributes (lower-cased names)."""
    out: dict[str, dict[str, str | bool]] = {}
    for header in response_headers:
        jar: SimpleCookie = SimpleCookie()
        jar.load(header)
        for name, morsel in jar.items():
            attrs: dict[str, str | bool] = {"value": morsel.value}
            for key in ("path", "samesite", "max-age"):
                if morsel[key]:
                    attrs[key] = str(morsel[key]).lower()
            attrs["httponly"] = bool(morsel["httponly"])
            attrs["secure"] = bool(morsel["secure"])
            out[name] = attrs
    return out


async def password_sign_in(client: Client, slug: str, email: str) -> list[str]:
    page = await client.get(f"/realms/{slug}/sign-in", headers=HTML)
    response = await client.post(
        f"/realms/{slug}/sign-in",
        data={"email": email, "password": PASSWORD, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    return page.headers.get_list("set-cookie") + response.headers.get_list("set-cookie")


async def totp_step(client: Client, slug: str, secret: str) -> Response:
    """The second step of a two-step sign-in, with the current code of ``secret``."""
    step = await client.get(f"/realms/{slug}/sign-in/totp", headers=HTML)
    return await client.post(
        f"/realms/{slug}/sign-in/totp",
        data={"code": pyotp.TOTP(secret).now(), "_csrf": form_value(step.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )


async def test_cookies_are_httponly_samesite_lax_and_path_root(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    cookies = set_cookies(await password_sign_in(client, realm.slug, "pat@example.com"))
    for name in ("cockpit_pre", "cockpit_session"):
        assert cookies[name]["httponly"] is True, name
        assert cookies[name]["samesite"] == "lax", name
        assert cookies[name]["path"] == "/", name
        assert cookies[name]["secure"] is False, name  # plain HTTP in tests


async def test_cookies_are_secure_behind_tls(
    realm: RealmHandle, database_url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COCKPIT_SECURE_COOKIES", "true")
    app = create_app(load_settings(), database_url=database_url)
    await realm.user("pat@example.com", password=PASSWORD)
    async with AsyncTestClient(app=app, base_url="https://testserver.local") as client:
        cookies = set_cookies(await password_sign_in(client, realm.slug, "pat@example.com"))
    assert cookies["cockpit_session"]["secure"] is True and cookies["cockpit_pre"]["secure"] is True


async def test_anonymous_forms_refuse_a_missing_or_foreign_csrf_token(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    page = await client.get(f"/realms/{realm.slug}/sign-in", headers=HTML)
    token = form_value(page.text, "_csrf")
    url = f"/realms/{realm.slug}/sign-in"
    form = {"email": "pat@example.com", "password": PASSWORD}
    assert (await client.post(url, data=form, headers=HTML)).status_code == 403
    assert (await client.post(url, data=form | {"_csrf": "0" * 64}, headers=HTML)).status_code == 403
    # A token minted for another browser's pre-session does not fit this one.
    async with AsyncTestClient(app=client.app) as other:
        other_token = form_value((await other.get(url, headers=HTML)).text, "_csrf")
    assert other_token != token
    assert (await client.post(url, data=form | {"_csrf": other_token}, headers=HTML)).status_code == 403
    # Without the pre-session cookie the right token is refused too.
    async with AsyncTestClient(app=client.app) as cookieless:
        refused = await cookieless.post(url, data=form | {"_csrf": token}, headers=HTML)
        assert refused.status_code == 403 and "did not come from this site" in refused.text
    link = await sign_in_link(realm, realm.admin)
    refused = await client.post(f"/realms/{realm.slug}/sign-in/link", data={"token": link}, headers=HTML)
    assert refused.status_code == 403
    assert not client.cookies.get("cockpit_session")
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM sessions")) == 0
        assert await session.scalar(text("SELECT count(*) FROM sign_in_links WHERE used_at IS NULL")) == 1


async def test_sign_out_needs_the_csrf_token_then_revokes_the_session(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    await password_sign_in(client, realm.slug, "pat@example.com")
    cookie = client.cookies.get("cockpit_session")
    mfa_page = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    assert mfa_page.status_code == 200
    csrf = form_value(mfa_page.text, "_csrf")

    refused = await client.post(f"/realms/{realm.slug}/sign-out", headers=HTML, follow_redirects=False)
    assert refused.status_code == 403
    wrong = await client.post(f"/realms/{realm.slug}/sign-out", data={"_csrf": "x" * 64}, headers=HTML)
    assert wrong.status_code == 403
    assert (await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)).status_code == 200  # still signed in

    out = await client.post(
        f"/realms/{realm.slug}/sign-out", data={"_csrf": csrf}, headers=HTML, follow_redirects=False
    )
    assert out.status_code == 303 and out.headers["location"] == f"/realms/{realm.slug}/sign-in?signed_out=1"
    cleared = set_cookies(out.headers.get_list("set-cookie"))["cockpit_session"]
    assert cleared["value"] == "" and cleared["max-age"] == "0"
    assert cleared["httponly"] is True and cleared["path"] == "/" and cleared["samesite"] == "lax"
    async with realm.sessions() as session:
        revoked = await session.scalar(text("SELECT revoked_at FROM sessions"))
        assert revoked is not None
        types = (
            await session.execute(text("SELECT type FROM audit_events WHERE category = 'authentication'"))
        ).scalars()
        assert "user.signed_out" in list(types)
    # The old cookie no longer works, even presented again.
    async with AsyncTestClient(app=client.app) as replay:
        replay.cookies.set("cockpit_session", cookie or "", domain="testserver.local")
        again = await replay.get(f"/realms/{realm.slug}/mfa", headers=HTML, follow_redirects=False)
        assert again.status_code == 303 and "/sign-in" in again.headers["location"]


async def test_signing_in_again_rotates_the_session(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    await password_sign_in(client, realm.slug, "pat@example.com")
    first = client.cookies.get("cockpit_session")
    await password_sign_in(client, realm.slug, "pat@example.com")
    second = client.cookies.get("cockpit_session")
    assert first and second and first != second
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text("SELECT token_hash, revoked_at IS NOT NULL FROM sessions WHERE user_id = :u ORDER BY id"),
                {"u": user.id},
            )
        ).all()
    assert rows == [
        (hashlib.sha256(first.encode()).hexdigest(), True),
        (hashlib.sha256(second.encode()).hexdigest(), False),
    ]
    async with AsyncTestClient(app=client.app) as old:
        old.cookies.set("cockpit_session", first, domain="testserver.local")
        assert (await old.get(f"/realms/{realm.slug}/mfa", headers=HTML, follow_redirects=False)).status_code == 303


async def test_the_mfa_upgrade_rotates_the_session_and_the_old_cookie_stops_working(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    account = await browser_session(realm, user, mfa=False)  # opened before the app was enrolled
    client.cookies.set("cockpit_session", account.cookie, domain="testserver.local")
    page = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    assert "Verify this session" in page.text
    done = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": pyotp.TOTP(secret).now(), "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    assert done.status_code == 303
    upgraded = client.cookies.get("cockpit_session")
    assert upgraded and upgraded != account.cookie
    async with realm.sessions() as session:
        rows = dict(
            (
                await session.execute(
                    text("SELECT id, mfa AND revoked_at IS NULL FROM sessions WHERE user_id = :u"), {"u": user.id}
                )
            ).all()
        )
    assert rows[account.session_id] is False and sum(rows.values()) == 1 and len(rows) == 2
    assert (await client.get(f"/realms/{realm.slug}/", headers=HTML, follow_redirects=False)).status_code == 200
    # A code sent again from the verified session goes on to where it was going, with no new session.
    verified = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    again = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": "000000", "_csrf": form_value(verified.text, "_csrf"), "next": f"/realms/{realm.slug}/users"},
        headers=HTML,
        follow_redirects=False,
    )
    assert again.status_code == 303 and again.headers["location"] == f"/realms/{realm.slug}/users"
    assert client.cookies.get("cockpit_session") == upgraded
    async with AsyncTestClient(app=client.app) as old:
        old.cookies.set("cockpit_session", account.cookie, domain="testserver.local")
        assert (await old.get(f"/realms/{realm.slug}/", headers=HTML, follow_redirects=False)).status_code == 303


@pytest.mark.parametrize(
    "aging",
    [
        "UPDATE sessions SET last_seen_at = now() - interval '2 hours 1 minute'",  # idle
        "UPDATE sessions SET expires_at = now() - interval '1 second'",  # absolute
    ],
)
async def test_idle_and_absolute_expiry_end_the_session(client: Client, realm: RealmHandle, aging: str) -> None:
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    assert (await client.get(f"/realms/{realm.slug}/users", headers=HTML, follow_redirects=False)).status_code == 200
    async with realm.sessions() as session, session.begin():
        await session.execute(text(aging))
    ended = await client.get(f"/realms/{realm.slug}/users", headers=HTML, follow_redirects=False)
    assert ended.status_code == 303
    assert ended.headers["location"] == f"/realms/{realm.slug}/sign-in?next=/realms/{realm.slug}/users"


async def test_cookies_and_link_tokens_are_never_stored_in_clear(client: Client, realm: RealmHandle) -> None:
    token = await sign_in_link(realm, realm.admin)
    page = await client.get(f"/realms/{realm.slug}/sign-in/link?token={token}", headers=HTML)
    await client.post(
        f"/realms/{realm.slug}/sign-in/link",
        data={"token": token, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    cookie = client.cookies.get("cockpit_session")
    assert cookie and re.fullmatch(r"ses\.[A-Za-z0-9_-]{43}", cookie), cookie  # 32 random bytes
    async with realm.sessions() as session:
        sessions = [dict(r._mapping) for r in await session.execute(text("SELECT * FROM sessions"))]
        links = [dict(r._mapping) for r in await session.execute(text("SELECT * FROM sign_in_links"))]
    assert len(sessions) == 1 and len(links) == 1
    for row, secret in ((sessions[0], cookie), (links[0], token)):
        assert all(secret not in str(value) for value in row.values()), row
        assert row["token_hash"] == hashlib.sha256(secret.encode()).hexdigest()


async def test_cockpit_forms_refuse_requests_without_the_session_csrf_token(client: Client, realm: RealmHandle) -> None:
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    form = {"email": "new@example.com", "display_name": "New Person"}
    url = f"/realms/{realm.slug}/users"
    assert (await client.post(url, data=form, headers=HTML)).status_code == 403
    assert (await client.post(url, data=form | {"_csrf": "0" * 64}, headers=HTML)).status_code == 403
    created = await client.post(url, data=form | {"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert created.status_code == 303
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM users WHERE email = 'new@example.com'")) == 1


AGE_SESSIONS = "UPDATE sessions SET last_seen_at = now() - interval '10 minutes'"


async def test_signing_out_after_a_pause_ends_the_session(client: Client, realm: RealmHandle) -> None:
    """The guard marks a session seen again after a minute, in the request's transaction; signing
    out updates the same row, so it must do so in that same transaction (never a second one that
    would wait for the first)."""
    await realm.user("pat@example.com", password=PASSWORD)
    await password_sign_in(client, realm.slug, "pat@example.com")
    csrf = form_value((await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)).text, "_csrf")
    async with realm.sessions() as session, session.begin():
        await session.execute(text(AGE_SESSIONS))
    out = await asyncio.wait_for(
        client.post(f"/realms/{realm.slug}/sign-out", data={"_csrf": csrf}, headers=HTML, follow_redirects=False),
        timeout=120,  # a deadline for a request that would otherwise wait forever, not a timing
    )
    assert out.status_code == 303
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT revoked_at IS NOT NULL FROM sessions")) is True


async def test_verifying_the_second_factor_after_a_pause_upgrades_the_session(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    account = await browser_session(realm, user, mfa=False)
    client.cookies.set("cockpit_session", account.cookie, domain="testserver.local")
    page = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    async with realm.sessions() as session, session.begin():
        await session.execute(text(AGE_SESSIONS))  # the code took a while to type
    done = await asyncio.wait_for(
        client.post(
            f"/realms/{realm.slug}/mfa",
            data={"code": pyotp.TOTP(secret).now(), "_csrf": form_value(page.text, "_csrf")},
            headers=HTML,
            follow_redirects=False,
        ),
        timeout=120,
    )
    assert done.status_code == 303
    async with realm.sessions() as session:
        live = await session.scalar(
            text("SELECT count(*) FROM sessions WHERE user_id = :u AND mfa AND revoked_at IS NULL"), {"u": user.id}
        )
    assert live == 1


async def test_sign_in_upgrade_and_sign_out_are_audited_with_their_sessions(client: Client, realm: RealmHandle) -> None:
    """Each step is an ``authentication`` event of the user, by the user, with the request's id: the
    sign-in names its method and session, the upgrade the session it replaced, the sign-out the
    session it ended. The session keeps the client's address and (at most 300 characters of) its
    user agent."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    agent = "Browser/1.0 " + "x" * 400
    page = await client.get(f"/realms/{realm.slug}/sign-in", headers=HTML)
    signed_in = await client.post(
        f"/realms/{realm.slug}/sign-in",
        data={"email": "pat@example.com", "password": PASSWORD, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML | {"user-agent": agent},
        follow_redirects=False,
    )
    assert signed_in.status_code == 303, signed_in.text
    secret = await enrol_totp(realm, user)
    mfa_page = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    upgraded = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": pyotp.TOTP(secret).now(), "_csrf": form_value(mfa_page.text, "_csrf")},
        headers=HTML | {"user-agent": agent},
        follow_redirects=False,
    )
    assert upgraded.status_code == 303, upgraded.text
    home = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    out = await client.post(
        f"/realms/{realm.slug}/sign-out",
        data={"_csrf": form_value(home.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    assert out.status_code == 303
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT id, mfa, client_address, user_agent, revoked_at IS NOT NULL AS revoked FROM sessions"
                    " WHERE user_id = :u ORDER BY created_at, id"
                ),
                {"u": user.id},
            )
        ).all()
        events = (
            await session.execute(
                text(
                    "SELECT type, actor_type, actor_id, subject_type, subject_id, request_id, details"
                    " FROM audit_events WHERE category = 'authentication' AND actor_id = :u ORDER BY occurred_at, id"
                ),
                {"u": user.id},
            )
        ).all()
    first, second = rows
    assert [(r.mfa, r.revoked) for r in rows] == [(False, True), (True, True)]
    assert {(r.client_address, r.user_agent) for r in rows} == {("testclient", agent[:300])}
    assert [tuple(e)[:6] for e in events] == [
        (kind, "user", user.id, "user", user.id, response.headers["x-request-id"])
        for kind, response in (("user.signed_in", signed_in), ("user.mfa_verified", upgraded), ("user.signed_out", out))
    ]
    assert [e.details for e in events] == [
        {"method": "password", "mfa": False, "session_id": first.id, "replaced_session_id": None},
        {"method": "mfa_upgrade", "mfa": True, "session_id": second.id, "replaced_session_id": first.id},
        {"session_id": second.id},
    ]


async def test_the_two_step_sign_in_replaces_the_browsers_session_and_is_audited_as_totp(
    client: Client, realm: RealmHandle
) -> None:
    """Signing in with a password and a code from a browser that holds a session ends that session
    and starts an MFA one, audited as a ``totp`` sign-in naming the session it replaced."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    old = await browser_session(realm, user, mfa=False)
    client.cookies.set("cockpit_session", old.cookie, domain="testserver.local")
    await password_sign_in(client, realm.slug, "pat@example.com")
    done = await totp_step(client, realm.slug, secret)
    assert done.status_code == 303 and done.headers["location"] == f"/realms/{realm.slug}/"
    new_cookie = client.cookies.get("cockpit_session")
    assert new_cookie and new_cookie != old.cookie
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT id, mfa, revoked_at IS NOT NULL AS revoked FROM sessions"
                    " WHERE user_id = :u ORDER BY created_at, id"
                ),
                {"u": user.id},
            )
        ).all()
        events = (
            await session.execute(
                text(
                    "SELECT type, request_id, details FROM audit_events"
                    " WHERE category = 'authentication' AND actor_id = :u ORDER BY occurred_at, id"
                ),
                {"u": user.id},
            )
        ).all()
    assert [(r.id == old.session_id, r.mfa, r.revoked) for r in rows] == [(True, False, True), (False, True, False)]
    assert [tuple(e) for e in events] == [
        (
            "user.signed_in",
            done.headers["x-request-id"],
            {"method": "totp", "mfa": True, "session_id": rows[1].id, "replaced_session_id": old.session_id},
        )
    ]
    async with AsyncTestClient(app=client.app) as stale:
        stale.cookies.set("cockpit_session", old.cookie, domain="testserver.local")
        assert (await stale.get(f"/realms/{realm.slug}/mfa", headers=HTML, follow_redirects=False)).status_code == 303


async def test_the_half_signed_in_cookie_lasts_five_minutes_and_the_session_cookie_the_browser_session(
    client: Client, realm: RealmHandle
) -> None:
    """After the password of a user with a second factor, the pending cookie is set for
    ``PENDING_TTL`` (300 s) and no longer; the session cookie has no Max-Age (it ends with the
    browser, or with the session's own expiry on the server)."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    pending = set_cookies(await password_sign_in(client, realm.slug, "pat@example.com"))["cockpit_pending"]
    assert pending["max-age"] == str(int(PENDING_TTL.total_seconds())) == "300"
    assert pending["httponly"] is True and pending["path"] == "/"
    done = await totp_step(client, realm.slug, secret)
    assert done.status_code == 303, done.text
    cookies = set_cookies(done.headers.get_list("set-cookie"))
    assert cookies["cockpit_session"]["value"] and "max-age" not in cookies["cockpit_session"]
    assert cookies["cockpit_pending"]["value"] == "" and cookies["cockpit_pending"]["max-age"] == "0"
    assert cookies["cockpit_pending"]["httponly"] is True


@pytest.mark.parametrize(("length", "kept"), [(19, False), (20, True), (100, True), (101, False)])
async def test_a_pre_session_value_is_kept_from_20_to_100_characters(
    client: Client, realm: RealmHandle, length: int, kept: bool
) -> None:
    """The pre-session cookie a browser brings is used when it is 20 to 100 characters long; one
    shorter or longer is replaced by a new one (and a form's token is made for the new one)."""
    brought = "p" * length
    client.cookies.set("cockpit_pre", brought, domain="testserver.local")
    page = await client.get(f"/realms/{realm.slug}/sign-in", headers=HTML)
    assert page.status_code == 200
    set_now = set_cookies(page.headers.get_list("set-cookie")).get("cockpit_pre")
    if kept:
        assert set_now is None
    else:
        assert set_now is not None and set_now["value"] != brought and 20 <= len(str(set_now["value"])) <= 100
