"""What ends a user's sessions and tokens: a new password, a second-factor reset, a suspension —
and reactivation brings none of them back."""

from __future__ import annotations

import asyncio

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import principals as directory
from engine.directory.models import User
from engine.directory.sessions import create_session
from engine.directory.tokens import mint_token
from engine.platform.errors import Conflict, Unauthorized
from testing.factories import HTML, BrowserLogin, RealmHandle, bearer, browser_session, enrol_totp, sign_in_link

Client = AsyncTestClient[Litestar]


async def page_status(client: Client, realm: RealmHandle, login: BrowserLogin) -> int:
    """What a browser holding this session gets on the account's own page (any session opens it)."""
    client.cookies.clear()
    client.cookies.set("cockpit_session", login.cookie)
    answer = await client.get(f"/realms/{realm.slug}/mfa", headers=HTML, follow_redirects=False)
    client.cookies.clear()
    return answer.status_code


async def token_status(client: Client, realm: RealmHandle, token: str) -> int:
    return (await client.get(f"{realm.api}/tokens", headers=bearer(token))).status_code


async def test_a_new_password_ends_the_users_other_sessions(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("pat@example.com", password="the old password 123")
    mfa = await browser_session(realm, user, mfa=True)
    account = await browser_session(realm, user, mfa=False)
    token = await realm.token(user, audience="account")
    assert await page_status(client, realm, mfa) == 200 and await page_status(client, realm, account) == 200

    # An administrator sets a new password: every session of the user ends.
    changed = await client.patch(
        f"{realm.api}/users/{user.id}", json={"password": "a brand new password"}, headers=realm.headers
    )
    assert changed.status_code == 200, changed.text
    assert await page_status(client, realm, mfa) == 303 and await page_status(client, realm, account) == 303
    assert await token_status(client, realm, token) == 200  # tokens are credentials of their own

    # Someone changing their own password from a session keeps that one; their others end.
    here = await browser_session(realm, realm.admin)
    elsewhere = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", here.cookie)
    own = await client.patch(
        f"{realm.api}/users/{realm.admin.id}",
        json={"password": "the administrator's new one"},
        headers={"X-CSRF-Token": here.csrf},
    )
    assert own.status_code == 200, own.text
    assert await page_status(client, realm, here) == 200
    assert await page_status(client, realm, elsewhere) == 303
    async with realm.sessions() as session:
        details = await session.scalar(
            text("SELECT details FROM audit_events WHERE type = 'user.updated' AND subject_id = :u"), {"u": user.id}
        )
    assert details == {"changed": ["password"], "sessions_ended": 2}

    # A display name alone ends nothing.
    again = await browser_session(realm, user)
    renamed = await client.patch(f"{realm.api}/users/{user.id}", json={"display_name": "Pat"}, headers=realm.headers)
    assert renamed.status_code == 200 and await page_status(client, realm, again) == 200


async def test_a_second_factor_reset_ends_the_users_sessions(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("pat@example.com")
    await enrol_totp(realm, user)
    mfa = await browser_session(realm, user, mfa=True)
    account = await browser_session(realm, user, mfa=False)
    reset = await client.post(f"{realm.api}/users/{user.id}/reset-mfa", headers=realm.headers)
    assert reset.status_code == 200, reset.text
    assert await page_status(client, realm, mfa) == 303 and await page_status(client, realm, account) == 303


async def test_suspension_ends_sessions_tokens_and_links_and_reactivation_revives_none(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("pat@example.com")
    mfa = await browser_session(realm, user, mfa=True)
    account = await browser_session(realm, user, mfa=False)
    admin_token = await realm.token(user, audience="admin")
    account_token = await realm.token(user, audience="account")
    link = await sign_in_link(realm, user)
    other = await browser_session(realm, await realm.user("bystander@example.com"))

    suspended = await client.post(f"{realm.api}/users/{user.id}/suspend", headers=realm.headers)
    assert suspended.status_code == 200, suspended.text
    for login in (mfa, account):
        assert await page_status(client, realm, login) == 303
    for token in (admin_token, account_token):
        assert await token_status(client, realm, token) == 401

    reactivated = await client.post(f"{realm.api}/users/{user.id}/reactivate", headers=realm.headers)
    assert reactivated.status_code == 200, reactivated.text
    for login in (mfa, account):
        assert await page_status(client, realm, login) == 303, "a session from before the suspension works again"
    for token in (admin_token, account_token):
        assert await token_status(client, realm, token) == 401, "a token from before the suspension works again"
    opened = await client.get(f"/realms/{realm.slug}/sign-in/link?token={link}", headers=HTML)
    assert opened.status_code == 400  # a sign-in link made before the suspension is spent
    assert await page_status(client, realm, other) == 200  # nobody else's sessions end

    async with realm.sessions() as session:
        revoked = await session.execute(
            text(
                "SELECT (SELECT count(*) FROM sessions WHERE user_id = :u AND revoked_at IS NOT NULL),"
                " (SELECT count(*) FROM api_tokens WHERE user_id = :u AND revoked_at IS NOT NULL),"
                " (SELECT details FROM audit_events WHERE type = 'user.suspended' AND subject_id = :u)"
            ),
            {"u": user.id},
        )
    assert tuple(revoked.one()) == (2, 2, {"ended": {"sessions": 2, "tokens": 2, "sign_in_links": 1}})
    # After reactivation the user starts again: new sessions and tokens work.
    fresh = await browser_session(realm, user)
    assert await page_status(client, realm, fresh) == 200
    assert await token_status(client, realm, await realm.token(user, audience="account")) == 200


async def test_no_credential_is_made_for_a_suspended_user(realm: RealmHandle) -> None:
    user = await realm.user("pat@example.com")
    async with realm.sessions() as session, session.begin():
        await directory.set_user_status(session, realm.actor, user.id, "suspended", authority=None)
    async with realm.sessions() as session:
        row = await session.get(User, user.id)
        assert row is not None
        with pytest.raises(Unauthorized) as no_session:
            await create_session(session, row, mfa=True)
        assert no_session.value.detail == "This account is suspended."
        with pytest.raises(Conflict) as refused:
            await mint_token(session, realm.actor, audience="account", user=row)
        assert refused.value.code == "user_suspended"


async def test_a_session_opened_while_a_suspension_commits_does_not_outlive_it(realm: RealmHandle) -> None:
    """The suspension holds the user's row; a sign-in at that moment waits for it, then is refused."""
    user = await realm.user("pat@example.com")
    async with realm.sessions() as suspending:
        await suspending.begin()
        await directory.set_user_status(suspending, realm.actor, user.id, "suspended", authority=None)

        async def sign_in() -> str:
            async with realm.sessions() as session, session.begin():
                row = await session.get(User, user.id)
                assert row is not None
                cookie, _ = await create_session(session, row, mfa=True)
                return cookie

        attempt = asyncio.create_task(sign_in())
        await asyncio.sleep(0.5)
        assert not attempt.done()  # waiting for the suspension
        await suspending.commit()
    with pytest.raises(Unauthorized):
        await attempt
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM sessions WHERE user_id = :u"), {"u": user.id}) == 0


async def test_two_sign_ins_of_one_user_at_once_do_not_wait_for_each_other(realm: RealmHandle) -> None:
    """The user's row is only share-locked by a sign-in: a second one while the first's transaction
    is open goes through at once (only a suspension waits for them)."""
    user = await realm.user("pat@example.com")
    async with realm.sessions() as first:
        await first.begin()
        row = await first.get(User, user.id)
        assert row is not None
        await create_session(first, row, mfa=False)

        async def second() -> str:
            async with realm.sessions() as session, session.begin():
                other = await session.get(User, user.id)
                assert other is not None
                cookie, _ = await create_session(session, other, mfa=False)
                return cookie

        assert await asyncio.wait_for(second(), timeout=5)
        await first.commit()
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM sessions WHERE user_id = :u"), {"u": user.id}) == 2
