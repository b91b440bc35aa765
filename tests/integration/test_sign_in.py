"""Browser sign-in: passwords, the TOTP step, enrolment, one-time links, throttling."""

from __future__ import annotations

import asyncio
import json
import re
from argparse import Namespace

import httpx
import pyotp
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.admin_cli import cmd_create_realm, cmd_sign_in_link
from cockpit.pages.auth.mfa import seal_enrolment
from cockpit.pages.auth.sessions import safe_next
from cockpit.state import context_of
from engine.directory.mfa import (
    SIGN_IN_AGAIN,
    check_user_totp,
    enable_totp,
    new_totp_secret,
    totp_uri,
    verify_second_factor,
)
from engine.directory.models import User
from engine.directory.passwords import sign_in_with_password
from engine.directory.realms import realm_by_slug
from engine.directory.sign_in_links import sign_in_link_usable
from engine.directory.throttle import THROTTLE_PER_ACCOUNT, THROTTLE_PER_ADDRESS, UnknownRealmFailures
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import Settings
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.errors import Conflict, Forbidden, TooManyRequests, Unauthorized, ValidationFailed
from testing.factories import HTML, TEST_SECRET_KEY, RealmHandle, browser_session, enrol_totp, form_value, sign_in_link

PASSWORD = "correct horse battery staple"
WRONG = "The email or password is not right."

Client = AsyncTestClient[Litestar]


async def sign_in_form(client: Client, slug: str, query: str = "") -> str:
    page = await client.get(f"/realms/{slug}/sign-in{query}", headers=HTML)
    assert page.status_code == 200, page.text
    return form_value(page.text, "_csrf")


async def post_password(client: Client, slug: str, email: str, password: str, next_path: str = "") -> httpx.Response:
    csrf = await sign_in_form(client, slug)
    return await client.post(
        f"/realms/{slug}/sign-in",
        data={"email": email, "password": password, "_csrf": csrf, "next": next_path},
        headers=HTML,
        follow_redirects=False,
    )


async def session_rows(realm: RealmHandle, user_id: str) -> list[tuple[str, bool, object]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT id, mfa, revoked_at FROM sessions WHERE user_id = :u ORDER BY created_at, id"), {"u": user_id}
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


async def test_password_sign_in_opens_an_account_session_that_admin_pages_send_to_mfa(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    response = await post_password(client, realm.slug, "PAT@example.com", PASSWORD)
    assert response.status_code == 303
    assert response.headers["location"] == f"/realms/{realm.slug}/"
    assert client.cookies.get("cockpit_session")
    [(_session_id, mfa, revoked)] = await session_rows(realm, user.id)
    assert mfa is False and revoked is None
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML, follow_redirects=False)
    assert home.status_code == 303
    assert home.headers["location"].startswith(f"/realms/{realm.slug}/mfa?next=/realms/{realm.slug}")
    # A password alone never sets up the second factor: the page asks for a sign-in link.
    mfa_page = await client.get(home.headers["location"], headers=HTML)
    assert mfa_page.status_code == 200
    assert 'data-testid="enrolment-needs-link"' in mfa_page.text
    assert "<svg" not in mfa_page.text and 'name="enrolment"' not in mfa_page.text
    async with realm.sessions() as session:
        audit = (
            await session.execute(
                text(
                    "SELECT type, details->>'method' FROM audit_events "
                    "WHERE subject_id = :u AND category = 'authentication'"
                ),
                {"u": user.id},
            )
        ).all()
    assert ("user.signed_in", "password") in audit


async def test_wrong_password_unknown_user_and_unknown_realm_answer_the_same(
    client: Client, realm: RealmHandle
) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    answers = [
        await post_password(client, realm.slug, "pat@example.com", "not the password"),
        await post_password(client, realm.slug, "nobody@example.com", PASSWORD),
        await post_password(client, "no-such-realm", "pat@example.com", PASSWORD),
    ]
    for answer in answers:
        assert answer.status_code == 401
        assert WRONG in answer.text
    assert not client.cookies.get("cockpit_session")
    # The page of a realm that does not exist looks like any other sign-in page.
    unknown = await client.get("/realms/no-such-realm/sign-in", headers=HTML)
    known = await client.get(f"/realms/{realm.slug}/sign-in", headers=HTML)
    assert unknown.status_code == known.status_code == 200
    assert unknown.text.replace("no-such-realm", "X").count("<input") == known.text.replace(realm.slug, "X").count(
        "<input"
    )
    async with realm.sessions() as session:
        failures = await session.scalar(text("SELECT count(*) FROM sign_in_failures"))
    assert failures == 2  # committed although the sign-ins failed (the unknown realm has no row)


async def test_next_is_only_followed_inside_the_realm(client: Client, realm: RealmHandle) -> None:
    slug = realm.slug
    assert safe_next(slug, f"/realms/{slug}/users?q=a") == f"/realms/{slug}/users?q=a"
    for bad in (
        "https://evil.example/",
        "//evil.example/",
        f"/realms/{slug}//evil.example",
        f"/realms/{slug}/../other/",
        "/realms/other/",
        f"/realms/{slug}\\evil",
        None,
    ):
        assert safe_next(slug, bad) == f"/realms/{slug}/", bad
    # Up to 2,000 characters are followed; one more is not.
    longest = f"/realms/{slug}/users?q=" + "a" * (2000 - len(f"/realms/{slug}/users?q="))
    assert len(longest) == 2000 and safe_next(slug, longest) == longest
    assert safe_next(slug, longest + "a") == f"/realms/{slug}/"
    await realm.user("pat@example.com", password=PASSWORD)
    response = await post_password(client, slug, "pat@example.com", PASSWORD, next_path="https://evil.example/")
    assert response.headers["location"] == f"/realms/{slug}/"
    client.cookies.clear()
    response = await post_password(client, slug, "pat@example.com", PASSWORD, next_path=f"/realms/{slug}/users")
    assert response.headers["location"] == f"/realms/{slug}/users"


async def open_link(client: Client, slug: str, token: str) -> httpx.Response:
    page = await client.get(f"/realms/{slug}/sign-in/link?token={token}", headers=HTML)
    return await client.post(
        f"/realms/{slug}/sign-in/link",
        data={"token": token, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )


async def test_totp_enrolment_from_a_sign_in_link_session_makes_a_new_session(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    assert (await open_link(client, realm.slug, await sign_in_link(realm, user))).status_code == 303
    account_cookie = client.cookies.get("cockpit_session")
    page = await client.get(f"/realms/{realm.slug}/mfa?next=/realms/{realm.slug}/users", headers=HTML)
    secret = page.text.split('data-secret="', 1)[1].split('"', 1)[0]
    sealed = form_value(page.text, "enrolment")
    csrf = form_value(page.text, "_csrf")
    assert secret not in sealed  # the secret travels sealed, not as it is

    wrong = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": "000000", "enrolment": sealed, "_csrf": csrf, "next": f"/realms/{realm.slug}/users"},
        headers=HTML,
    )
    assert wrong.status_code == 422 and "The code does not match" in wrong.text
    assert form_value(wrong.text, "enrolment") == sealed  # the same secret stays on the page
    # A secret typed into the form is not accepted: only the sealed one counts.
    forged = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": pyotp.TOTP(secret).now(), "enrolment": secret, "_csrf": csrf},
        headers=HTML,
    )
    assert forged.status_code == 422
    expired = "This enrolment has expired. Add the new code below to your app and try again."
    assert f'role="alert">{expired}</div>' in forged.text

    done = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={
            "code": pyotp.TOTP(secret).now(),
            "enrolment": sealed,
            "_csrf": csrf,
            "next": f"/realms/{realm.slug}/users",
        },
        headers=HTML,
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == f"/realms/{realm.slug}/users"
    mfa_cookie = client.cookies.get("cockpit_session")
    assert mfa_cookie and mfa_cookie != account_cookie
    [(old_id, old_mfa, old_revoked), (new_id, new_mfa, new_revoked)] = await session_rows(realm, user.id)
    assert old_id != new_id and old_mfa is True and old_revoked is not None
    assert new_mfa is True and new_revoked is None
    enrolled = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    assert "enrolled" in enrolled.text and "<svg" not in enrolled.text
    async with realm.sessions() as session:
        stored = (
            await session.execute(
                text("SELECT totp_secret_enc, totp_enabled_at FROM users WHERE id = :u"), {"u": user.id}
            )
        ).one()
    assert stored[1] is not None and secret not in stored[0]


async def test_enrolled_users_sign_in_in_two_steps_and_a_pending_sign_in_is_no_session(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    first = await post_password(client, realm.slug, "pat@example.com", PASSWORD, f"/realms/{realm.slug}/users")
    assert first.status_code == 303
    assert first.headers["location"] == f"/realms/{realm.slug}/sign-in/totp"
    pending = client.cookies.get("cockpit_pending")
    assert pending and not client.cookies.get("cockpit_session")
    assert await session_rows(realm, user.id) == []

    # The pending state cannot stand in for a session.
    async with AsyncTestClient(app=client.app) as other:
        other.cookies.set("cockpit_session", pending, domain="testserver.local")
        refused = await other.get(f"/realms/{realm.slug}/mfa", headers=HTML, follow_redirects=False)
        assert refused.status_code == 303 and "/sign-in" in refused.headers["location"]

    step = await client.get(f"/realms/{realm.slug}/sign-in/totp", headers=HTML)
    assert step.status_code == 200
    csrf = form_value(step.text, "_csrf")
    wrong = await client.post(
        f"/realms/{realm.slug}/sign-in/totp", data={"code": "123456", "_csrf": csrf}, headers=HTML
    )
    assert wrong.status_code == 401 and "The code is not right" in wrong.text
    code = pyotp.TOTP(secret).now()
    ok = await client.post(
        f"/realms/{realm.slug}/sign-in/totp", data={"code": code, "_csrf": csrf}, headers=HTML, follow_redirects=False
    )
    assert ok.status_code == 303 and ok.headers["location"] == f"/realms/{realm.slug}/users"
    assert not client.cookies.get("cockpit_pending")
    [(_id, mfa, _revoked)] = await session_rows(realm, user.id)
    assert mfa is True
    assert (await client.get(f"/realms/{realm.slug}/", headers=HTML, follow_redirects=False)).status_code == 200

    # The same code again is a replay, whoever presents it.
    async with AsyncTestClient(app=client.app) as again:
        await post_password(again, realm.slug, "pat@example.com", PASSWORD)
        csrf = form_value((await again.get(f"/realms/{realm.slug}/sign-in/totp", headers=HTML)).text, "_csrf")
        replay = await again.post(
            f"/realms/{realm.slug}/sign-in/totp",
            data={"code": code, "_csrf": csrf},
            headers=HTML,
            follow_redirects=False,
        )
        assert replay.status_code == 401
        assert not again.cookies.get("cockpit_session")


async def test_six_attempts_on_one_account_are_throttled_even_with_the_right_password(
    client: Client, realm: RealmHandle
) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    for _ in range(THROTTLE_PER_ACCOUNT):
        assert (await post_password(client, realm.slug, "pat@example.com", "wrong")).status_code == 401
    sixth = await post_password(client, realm.slug, "pat@example.com", PASSWORD)
    assert sixth.status_code == 429
    assert "Too many" in sixth.text and "Wait a few minutes" in sixth.text
    assert int(sixth.headers["retry-after"]) > 0
    assert "<form" in sixth.text  # a page, not a bare error
    assert not client.cookies.get("cockpit_session")


async def test_the_right_password_forgives_the_wrong_passwords_before_it(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    for _ in range(THROTTLE_PER_ACCOUNT - 1):
        assert (await post_password(client, realm.slug, "pat@example.com", "wrong")).status_code == 401
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 303
    client.cookies.clear()
    for _ in range(THROTTLE_PER_ACCOUNT):
        assert (await post_password(client, realm.slug, "pat@example.com", "wrong")).status_code == 401
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 429


async def test_one_address_is_throttled_across_accounts(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    for i in range(THROTTLE_PER_ADDRESS):
        response = await post_password(client, realm.slug, f"guess{i}@example.com", "wrong")
        assert response.status_code == 401
    blocked = await post_password(client, realm.slug, "pat@example.com", PASSWORD)
    assert blocked.status_code == 429


async def test_unknown_realms_are_throttled_like_known_ones(client: Client, realm: RealmHandle) -> None:
    for _ in range(THROTTLE_PER_ACCOUNT):
        assert (await post_password(client, "no-such-realm", "pat@example.com", "x")).status_code == 401
    assert (await post_password(client, "no-such-realm", "pat@example.com", "x")).status_code == 429


async def test_a_sign_in_link_works_once_and_counts_as_mfa(client: Client, realm: RealmHandle) -> None:
    token = await sign_in_link(realm, realm.admin)
    url = f"/realms/{realm.slug}/sign-in/link?token={token}"
    page = await client.get(url, headers=HTML)
    assert page.status_code == 200 and "Continue" in page.text
    assert form_value(page.text, "token") == token
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT used_at FROM sign_in_links")) is None  # opening it spends nothing
    go = await client.post(
        f"/realms/{realm.slug}/sign-in/link",
        data={"token": token, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    assert go.status_code == 303 and go.headers["location"] == f"/realms/{realm.slug}/"
    home = await client.get(f"/realms/{realm.slug}/", headers=HTML, follow_redirects=False)
    assert home.status_code == 200  # an MFA session: admin pages open
    [(_id, mfa, _revoked)] = await session_rows(realm, realm.admin.id)
    assert mfa is True
    async with realm.sessions() as session:
        how = await session.scalar(
            text("SELECT details->>'method' FROM audit_events WHERE type = 'user.signed_in' AND subject_id = :u"),
            {"u": realm.admin.id},
        )
    assert how == "sign_in_link"  # the audit trail says how the person came in

    again = await client.post(
        f"/realms/{realm.slug}/sign-in/link",
        data={"token": token, "_csrf": form_value(page.text, "_csrf")},
        headers=HTML,
        follow_redirects=False,
    )
    assert again.status_code == 400 and "cannot be used" in again.text
    assert (await client.get(url, headers=HTML)).status_code == 400


async def test_a_sign_in_link_replaces_the_browsers_session_and_a_refused_one_leads_back_to_sign_in(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    old = await browser_session(realm, user, mfa=False)
    client.cookies.set("cockpit_session", old.cookie, domain="testserver.local")
    token = await sign_in_link(realm, user)
    page = await client.get(f"/realms/{realm.slug}/sign-in/link?token={token}", headers=HTML)
    csrf = form_value(page.text, "_csrf")
    go = await client.post(
        f"/realms/{realm.slug}/sign-in/link", data={"token": token, "_csrf": csrf}, headers=HTML, follow_redirects=False
    )
    assert go.status_code == 303 and client.cookies.get("cockpit_session") not in (None, old.cookie)
    # The browser's earlier session ends: one open session, the new MFA one.
    assert [(mfa, revoked is not None) for _id, mfa, revoked in await session_rows(realm, user.id)] == [
        (False, True),
        (True, False),
    ]

    # A spent link: the page says so and leads back to this realm's password sign-in.
    again = await client.post(
        f"/realms/{realm.slug}/sign-in/link", data={"token": token, "_csrf": csrf}, headers=HTML, follow_redirects=False
    )
    assert again.status_code == 400
    assert f'<a href="/realms/{realm.slug}/sign-in">Sign in with a password</a>' in again.text
    # A good link sent to a realm that does not exist: the same refusal, and the link stays unspent.
    fresh = await sign_in_link(realm, user)
    nowhere = await client.post(
        "/realms/no-such-realm/sign-in/link", data={"token": fresh, "_csrf": csrf}, headers=HTML, follow_redirects=False
    )
    assert nowhere.status_code == 400 and "This sign-in link cannot be used" in nowhere.text
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM sign_in_links WHERE used_at IS NULL")) == 1


async def test_expired_unknown_and_foreign_links_are_refused(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    expired = await sign_in_link(realm, realm.admin)
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE sign_in_links SET expires_at = now() - interval '1 second'"))
    foreign = await sign_in_link(other_realm, other_realm.admin)
    for token in (expired, foreign, "sil.nonsense", ""):
        page = await client.get(f"/realms/{realm.slug}/sign-in/link?token={token}", headers=HTML)
        assert page.status_code == 400, token
        csrf = await sign_in_form(client, realm.slug)
        post = await client.post(
            f"/realms/{realm.slug}/sign-in/link",
            data={"token": token, "_csrf": csrf},
            headers=HTML,
            follow_redirects=False,
        )
        assert post.status_code == 400, token
    assert not client.cookies.get("cockpit_session")
    # The foreign link still works where it belongs.
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM sign_in_links WHERE used_at IS NOT NULL")) == 0


async def test_suspended_users_cannot_sign_in(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": user.id})
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 401
    token = await sign_in_link(realm, user)
    assert (await client.get(f"/realms/{realm.slug}/sign-in/link?token={token}", headers=HTML)).status_code == 400
    # Continuing with the link anyway: refused like a wrong link, and no session.
    go = await client.post(
        f"/realms/{realm.slug}/sign-in/link",
        data={"token": token, "_csrf": await sign_in_form(client, realm.slug)},
        headers=HTML,
        follow_redirects=False,
    )
    assert go.status_code == 400 and "cannot be used" in go.text
    assert not client.cookies.get("cockpit_session")


def test_the_cli_prints_a_link_to_the_continue_page(
    settings: Settings, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cmd_create_realm(settings, Namespace(slug="acme", admin_email="root@acme.example", admin_name=None))
    capsys.readouterr()
    cmd_sign_in_link(settings, Namespace(realm="acme", email="root@acme.example"))
    printed = capsys.readouterr().out.strip()
    found = re.fullmatch(rf"http://localhost:{settings.port}/realms/acme/sign-in/link\?token=(sil\.[\w-]+)", printed)
    assert found, printed

    async def usable() -> bool:
        engine = make_engine(database_url, pool_size=1)
        try:
            async with make_sessionmaker(engine)() as session:
                realm = await realm_by_slug(session, "acme")
                assert realm is not None
                return await sign_in_link_usable(session, realm, found.group(1))
        finally:
            await engine.dispose()

    assert asyncio.run(usable()) is True


async def test_a_pending_sign_in_naming_another_realms_user_signs_nobody_in(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """The second step signs in only a user of the realm it is taken in: a pending state that pairs
    this realm with another realm's enrolled user (signed with the right key, as a leaked key
    could make) leads back to the sign-in form, and no session is started for anyone."""
    from cockpit.pages.auth.sessions import PENDING_COOKIE, _b64
    from engine.platform import crypto

    foreigner = await other_realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(other_realm, foreigner)
    payload = _b64(
        json.dumps(
            {"u": foreigner.id, "r": realm.id, "e": int(SYSTEM_CLOCK.now().timestamp()) + 300, "n": "/"}
        ).encode()
    )
    client.cookies.set(
        PENDING_COOKIE,
        f"{payload}.{crypto.sign(TEST_SECRET_KEY, 'sign-in-pending', payload)}",
        domain="testserver.local",
    )
    step = await client.get(f"/realms/{realm.slug}/sign-in/totp", headers=HTML)
    assert step.status_code == 200  # the form is shown; the check is on what it signs in
    csrf = form_value(step.text, "_csrf")
    taken = await client.post(
        f"/realms/{realm.slug}/sign-in/totp",
        data={"code": pyotp.TOTP(secret).now(), "_csrf": csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert taken.status_code == 303 and taken.headers["location"] == f"/realms/{realm.slug}/sign-in"
    assert not client.cookies.get("cockpit_session")
    assert await session_rows(other_realm, foreigner.id) == []


# --- Throttling the second factor -----------------------------------------------------------------


def a_wrong_code(secret: str) -> str:
    """Six digits that are none of the codes a check would accept now."""
    totp = pyotp.TOTP(secret)
    step = int(SYSTEM_CLOCK.now().timestamp()) // totp.interval
    accepted = {totp.at((step + d) * totp.interval) for d in (-2, -1, 0, 1, 2)}
    return next(c for c in (f"{n:06d}" for n in range(1_000_000)) if c not in accepted)


async def test_a_right_password_never_forgives_wrong_codes(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    wrong = a_wrong_code(secret)
    answers: list[int] = []
    for _round in range(3):  # the right password, then wrong codes: again and again
        first = await post_password(client, realm.slug, "pat@example.com", PASSWORD)
        answers.append(first.status_code)
        if first.status_code != 303:
            continue
        for _ in range(THROTTLE_PER_ACCOUNT - 1):
            step = await client.get(f"/realms/{realm.slug}/sign-in/totp", headers=HTML)
            csrf = form_value(step.text, "_csrf")
            code = await client.post(
                f"/realms/{realm.slug}/sign-in/totp", data={"code": wrong, "_csrf": csrf}, headers=HTML
            )
            answers.append(code.status_code)
    # Four wrong codes, the right password, one more wrong code (the fifth): then nothing passes,
    # neither a code nor the right password.
    assert answers == [303, 401, 401, 401, 401, 303, 401, 429, 429, 429, 429], answers
    async with realm.sessions() as session:
        kinds = (await session.execute(text("SELECT kind, count(*) FROM sign_in_failures GROUP BY kind"))).all()
    assert dict(kinds) == {"second_factor": THROTTLE_PER_ACCOUNT}  # type: ignore[arg-type]
    # A right code (after the window) forgives them all.
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE sign_in_failures SET occurred_at = occurred_at - interval '16 minutes'"))
        await session.execute(
            text(
                "INSERT INTO sign_in_failures (realm_id, email, client_address, kind) VALUES (:r, :e, 'x', 'password')"
            ),
            {"r": realm.id, "e": "pat@example.com"},
        )
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 303
    csrf = form_value((await client.get(f"/realms/{realm.slug}/sign-in/totp", headers=HTML)).text, "_csrf")
    ok = await client.post(
        f"/realms/{realm.slug}/sign-in/totp",
        data={"code": pyotp.TOTP(secret).now(), "_csrf": csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert ok.status_code == 303
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM sign_in_failures")) == 0


async def race_wrong_codes(database_url: str, attempts: list[tuple[User, str]], secret_of: dict[str, str]) -> list[str]:
    """Every attempt at once, each in its own transaction on its own connection."""
    engine = make_engine(database_url, pool_size=len(attempts))
    sessions = make_sessionmaker(engine)
    start = asyncio.Event()

    async def attempt(user: User, address: str) -> str:
        async with sessions() as session, session.begin():
            row = await session.get(User, user.id)
            assert row is not None
            await start.wait()
            try:
                await verify_second_factor(
                    session, TEST_SECRET_KEY, row, a_wrong_code(secret_of[user.id]), address, realm_id=row.realm_id
                )
            except Unauthorized:
                return "wrong"
            except TooManyRequests:
                return "throttled"
            return "passed"

    try:
        tasks = [asyncio.create_task(attempt(user, address)) for user, address in attempts]
        await asyncio.sleep(0.5)  # every transaction open and waiting
        start.set()
        return await asyncio.gather(*tasks)
    finally:
        await engine.dispose()


async def test_concurrent_wrong_codes_of_one_account_let_exactly_the_allowed_number_through(
    realm: RealmHandle, database_url: str
) -> None:
    user = await realm.user("racer@example.com", password=PASSWORD)
    secrets = {user.id: await enrol_totp(realm, user)}
    attempts = [(user, f"10.0.0.{i}") for i in range(15)]  # different addresses: only the account limits
    outcomes = await race_wrong_codes(database_url, attempts, secrets)
    assert outcomes.count("wrong") == THROTTLE_PER_ACCOUNT, outcomes
    assert outcomes.count("throttled") == 15 - THROTTLE_PER_ACCOUNT


async def test_concurrent_wrong_codes_from_one_address_let_exactly_the_allowed_number_through(
    realm: RealmHandle, database_url: str
) -> None:
    users = [await realm.user(f"racer{i}@example.com", password=PASSWORD) for i in range(6)]
    secrets = {user.id: await enrol_totp(realm, user) for user in users}
    attempts = [(user, "10.9.9.9") for user in users for _ in range(4)]  # 24 tries, 4 per account
    outcomes = await race_wrong_codes(database_url, attempts, secrets)
    assert outcomes.count("wrong") == THROTTLE_PER_ADDRESS, outcomes
    assert outcomes.count("throttled") == len(attempts) - THROTTLE_PER_ADDRESS


async def test_a_password_alone_never_enrols_a_second_factor_nor_reaches_admin_pages(
    client: Client, realm: RealmHandle
) -> None:
    """Whoever learns a password of a user without a second factor must not choose that factor."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    await realm.assign(user, await realm.builtin_role("realm-admin"))
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 303
    page = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
    csrf = form_value(page.text, "_csrf")
    # Even a well-formed enrolment (sealed by the server for this user) is refused.
    secret = new_totp_secret()
    sealed = seal_enrolment(context_of(client.app).settings, user.id, secret)
    refused = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": pyotp.TOTP(secret).now(), "enrolment": sealed, "_csrf": csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert refused.status_code == 403 and "needs a sign-in link" in refused.text
    async with realm.sessions() as session:
        enrolled = await session.scalar(text("SELECT totp_enabled_at FROM users WHERE id = :u"), {"u": user.id})
    assert enrolled is None
    assert [mfa for _id, mfa, _revoked in await session_rows(realm, user.id)] == [False]
    for path in ("/", "/users", "/workflows", "/roles", "/audit"):
        answer = await client.get(f"/realms/{realm.slug}{path}", headers=HTML, follow_redirects=False)
        assert answer.status_code == 303 and "/mfa?next=" in answer.headers["location"], path

    # The engine refuses it whoever calls: the page is not the only check.
    async with realm.sessions() as session:
        row = await session.get(User, user.id)
        assert row is not None
        with pytest.raises(Forbidden) as no_link:
            await enable_totp(session, TEST_SECRET_KEY, row, secret, pyotp.TOTP(secret).now(), mfa_session=False)
        assert no_link.value.code == "enrolment_needs_link"
        assert no_link.value.detail == (
            "Setting up two-step verification needs a sign-in link: ask an administrator of the realm for one."
        )
    # Nor does a second enrolment replace a factor already set up, even from a link session.
    await enrol_totp(realm, user)
    async with realm.sessions() as session:
        row = await session.get(User, user.id)
        assert row is not None
        with pytest.raises(Conflict) as twice:
            await enable_totp(session, TEST_SECRET_KEY, row, secret, pyotp.TOTP(secret).now(), mfa_session=True)
        assert twice.value.code == "mfa_enrolled"
        assert twice.value.detail == "Two-step verification is set up already."


async def test_enrolment_answers_with_its_codes_and_its_own_code_is_never_good_again(realm: RealmHandle) -> None:
    """A wrong code at enrolment is the ``/code`` issue, with its message; the code that completed
    the enrolment is spent (the sign-in's second step refuses it, with its message); the
    enrolment is audited; the app's link names the user and the realm."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = new_totp_secret()
    parsed = pyotp.parse_uri(totp_uri(secret, "pat@example.com", realm.slug))
    assert (parsed.secret, parsed.name, parsed.issuer) == (
        secret,
        "pat@example.com",
        f"Lifecycle Cockpit ({realm.slug})",
    )
    code = pyotp.TOTP(secret).now()
    async with realm.sessions() as session, session.begin():
        row = await session.get(User, user.id)
        assert row is not None
        with pytest.raises(ValidationFailed) as wrong:
            await enable_totp(session, TEST_SECRET_KEY, row, secret, a_wrong_code(secret), mfa_session=True)
        assert [(i.path, i.code, i.message) for i in wrong.value.issues] == [
            ("/code", "invalid_code", "The code does not match. Check the time on your phone and try again.")
        ]
        await enable_totp(session, TEST_SECRET_KEY, row, secret, code, mfa_session=True)
    async with realm.sessions() as session:
        row = await session.get(User, user.id)
        assert row is not None
        with pytest.raises(Unauthorized) as replay:
            await verify_second_factor(session, TEST_SECRET_KEY, row, code, "10.0.0.1", realm_id=realm.id)
        assert replay.value.detail == (
            "The code is not right, or it was used already. Wait for the next code and try again."
        )
        audit = (
            await session.execute(
                text(
                    "SELECT actor_type, actor_id, category, subject_type, subject_id FROM audit_events"
                    " WHERE type = 'user.mfa_enrolled'"
                )
            )
        ).all()
    assert [tuple(a) for a in audit] == [("user", user.id, "authentication", "user", user.id)]


async def test_an_addresses_failures_count_alike_at_known_and_unknown_realms_up_to_the_last_allowed(
    realm: RealmHandle,
) -> None:
    """Per client address, failures at realms that exist (rows) and at slugs that do not (memory)
    add up: the 20th failure is still answered as a wrong password, the 21st attempt is refused,
    wherever it goes; every answer says the same as at a known realm."""
    unknown = UnknownRealmFailures()

    async def attempt(slug: str, email: str, address: str) -> str:
        async with realm.sessions() as session:
            try:
                await sign_in_with_password(session, slug, email, "wrong", address, unknown)
            except Unauthorized as refused:
                await session.commit()  # as the sign-in page does: the failure stays recorded
                return refused.detail
            except TooManyRequests as throttled:
                assert throttled.retry_after_s == 15 * 60
                return throttled.detail
        raise AssertionError("a wrong password signed in")

    too_many = "Too many failed sign-ins. Wait a few minutes and try again."
    allowed = THROTTLE_PER_ADDRESS - 1
    # Unknown realms only: the address's 20th failure is the last allowed.
    answers = [await attempt("no-such-realm", f"guess{i}@example.com", "10.4.4.4") for i in range(THROTTLE_PER_ADDRESS)]
    assert answers == [WRONG] * THROTTLE_PER_ADDRESS
    assert await attempt("no-such-realm", "pat@example.com", "10.4.4.4") == too_many
    # 19 at unknown realms, the 20th at the known realm: both count, at either.
    for i in range(allowed):
        assert await attempt("no-such-realm", f"guess{i}@example.com", "10.1.1.1") == WRONG
    assert await attempt(realm.slug, "pat@example.com", "10.1.1.1") == WRONG
    assert await attempt("no-such-realm", "sam@example.com", "10.1.1.1") == too_many
    assert await attempt(realm.slug, "sam@example.com", "10.1.1.1") == too_many
    # 19 at the known realm, the 20th at an unknown one.
    for i in range(allowed):
        assert await attempt(realm.slug, f"guess{i}@example.com", "10.2.2.2") == WRONG
    assert await attempt("no-such-realm", "pat@example.com", "10.2.2.2") == WRONG
    assert await attempt("no-such-realm", "sam@example.com", "10.2.2.2") == too_many
    assert await attempt(realm.slug, "sam@example.com", "10.2.2.2") == too_many
    assert await attempt(realm.slug, "sam@example.com", "10.3.3.3") == WRONG  # another address


async def test_a_user_without_a_second_factor_has_no_code_that_is_right(realm: RealmHandle) -> None:
    """No seed, no right code: the second step refuses every code of a user who never enrolled,
    and counts it as a failed sign-in."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    code = pyotp.TOTP(new_totp_secret()).now()
    async with realm.sessions() as session:
        row = await session.get(User, user.id)
        assert row is not None and row.totp_secret_enc is None
        assert await check_user_totp(session, TEST_SECRET_KEY, row, code) is False
        with pytest.raises(Unauthorized) as refused:
            await verify_second_factor(session, TEST_SECRET_KEY, row, code, "10.0.0.9", realm_id=realm.id)
        assert refused.value.detail.startswith("The code is not right")
        failures = await session.scalar(
            text("SELECT count(*) FROM sign_in_failures WHERE realm_id = :r"), {"r": realm.id}
        )
    assert failures == 1


async def test_the_upgrade_page_throttles_wrong_codes_and_says_when_to_try_again(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    account = await browser_session(realm, user, mfa=False)
    client.cookies.set("cockpit_session", account.cookie, domain="testserver.local")
    wrong = a_wrong_code(secret)
    answers = []
    for _ in range(THROTTLE_PER_ACCOUNT + 1):
        page = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML)
        answers.append(
            await client.post(
                f"/realms/{realm.slug}/mfa",
                data={"code": wrong, "_csrf": form_value(page.text, "_csrf")},
                headers=HTML,
                follow_redirects=False,
            )
        )
    assert [a.status_code for a in answers] == [401] * THROTTLE_PER_ACCOUNT + [429]
    assert all("retry-after" not in a.headers for a in answers[:-1])
    throttled = answers[-1]
    assert 0 < int(throttled.headers["retry-after"]) <= 15 * 60
    assert "Too many" in throttled.text and 'name="code"' in throttled.text  # the page, with its form
    assert client.cookies.get("cockpit_session") == account.cookie
    assert await session_rows(realm, user.id) == [(account.session_id, False, None)]


async def test_the_second_step_refuses_a_right_code_for_another_realm_or_a_suspended_user(realm: RealmHandle) -> None:
    """The engine checks who may finish a sign-in, not only the page: a right code of a user of
    another realm, or of a suspended user, is refused with ``sign_in_again`` and counts nothing;
    the same code then passes for the active user at their own realm."""
    user = await realm.user("pat@example.com", password=PASSWORD)
    secret = await enrol_totp(realm, user)
    async with realm.sessions() as session, session.begin():
        row = await session.get(User, user.id)
        assert row is not None
        code = pyotp.TOTP(secret).now()
        with pytest.raises(Unauthorized) as other_realm:
            await verify_second_factor(session, TEST_SECRET_KEY, row, code, "10.0.0.2", realm_id="rlm_" + "0" * 26)
        assert other_realm.value.code == SIGN_IN_AGAIN
        row.status = "suspended"
        with pytest.raises(Unauthorized) as suspended:
            await verify_second_factor(session, TEST_SECRET_KEY, row, code, "10.0.0.2", realm_id=realm.id)
        assert suspended.value.code == SIGN_IN_AGAIN
        failures = text("SELECT count(*) FROM sign_in_failures WHERE realm_id = :r")
        assert await session.scalar(failures, {"r": realm.id}) == 0
        assert row.totp_last_step is None  # the code was not spent
        row.status = "active"
        await verify_second_factor(session, TEST_SECRET_KEY, row, code, "10.0.0.2", realm_id=realm.id)
        assert row.totp_last_step is not None
