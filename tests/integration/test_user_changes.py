"""A user's record as the API answers and changes it, and service principals kept per realm."""

from __future__ import annotations

from datetime import datetime

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import principals as directory
from engine.directory.mfa import TOTP_PURPOSE, new_totp_secret
from engine.directory.models import User
from engine.platform import crypto
from engine.platform.ids import new_id
from testing.factories import HTML, TEST_SECRET_KEY, RealmHandle, form_value

Client = AsyncTestClient[Litestar]


async def rows(realm: RealmHandle, sql: str, **params: object) -> list[tuple[object, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def test_a_users_answer_says_when_the_user_last_changed(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("dana@example.com", display_name="Dana")
    url = f"{realm.api}/users/{user.id}"
    renamed = await client.patch(url, json={"display_name": "Dana Scully"}, headers=realm.headers)
    assert renamed.status_code == 200, renamed.text
    body = renamed.json()
    [(stored,)] = await rows(realm, "SELECT updated_at FROM users WHERE id = :u", u=user.id)
    assert isinstance(stored, datetime)
    assert datetime.fromisoformat(body["updated_at"]) == stored
    assert stored > datetime.fromisoformat(body["created_at"])
    shown = (await client.get(url, headers=realm.headers)).json()
    assert shown["updated_at"] == body["updated_at"]


async def test_the_list_finds_a_percent_sign_as_written_and_filters_by_each_status(
    client: Client, realm: RealmHandle
) -> None:
    half = await realm.user("half@example.com", display_name="Sale 50% off")
    await realm.user("five@example.com", display_name="Sale 500 off")
    away = await realm.user("away@example.com", display_name="Away")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": away.id})

    async def emails(**params: str) -> list[str]:
        answer = await client.get(realm.api + "/users", params=params, headers=realm.headers)
        assert answer.status_code == 200, answer.text
        return sorted(u["email"] for u in answer.json()["items"])

    assert await emails(q="50%") == [half.email]
    assert await emails(status="suspended") == [away.email]
    assert await emails(status="active") == sorted([realm.admin.email, half.email, "five@example.com"])
    refused = await client.get(realm.api + "/users", params={"status": "zombie"}, headers=realm.headers)
    assert refused.status_code == 422
    assert [(e["path"], e["code"], e["message"]) for e in refused.json()["errors"]] == [
        ("query:status", "invalid", "status is active or suspended")
    ]


async def signs_in(client: Client, realm: RealmHandle, email: str, password: str) -> int:
    client.cookies.clear()
    page = await client.get(f"/realms/{realm.slug}/sign-in", headers=HTML)
    csrf = form_value(page.text, "_csrf")
    answer = await client.post(
        f"/realms/{realm.slug}/sign-in",
        data={"email": email, "password": password, "_csrf": csrf, "next": ""},
        headers=HTML,
        follow_redirects=False,
    )
    client.cookies.clear()
    return answer.status_code


async def test_the_password_an_administrator_sets_is_the_one_that_signs_in(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("forgetful@example.com", password="the forgotten one 123")
    changed = await client.patch(
        f"{realm.api}/users/{user.id}", json={"password": "the one they were told"}, headers=realm.headers
    )
    assert changed.status_code == 200, changed.text
    assert await signs_in(client, realm, user.email, "the one they were told") == 303
    assert await signs_in(client, realm, user.email, "the forgotten one 123") == 401


async def test_making_a_user_a_guest_is_audited_once_and_setting_it_again_changes_nothing(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("visitor@example.com")
    url = f"{realm.api}/users/{user.id}"
    made = await client.patch(url, json={"guest": True}, headers=realm.headers)
    assert made.status_code == 200 and made.json()["guest"] is True, made.text
    again = await client.patch(url, json={"guest": True}, headers=realm.headers)
    assert again.status_code == 200 and again.json()["guest"] is True
    audited = await rows(
        realm, "SELECT details FROM audit_events WHERE type = 'user.updated' AND subject_id = :u", u=user.id
    )
    assert audited == [({"changed": ["guest"]},)]
    assert await rows(realm, "SELECT guest FROM users WHERE id = :u", u=user.id) == [(True,)]


async def test_a_second_factor_half_enrolled_is_reset_and_the_reset_is_an_authentication_event(
    client: Client, realm: RealmHandle
) -> None:
    """An authenticator whose enrolment was started (a secret kept) but never confirmed is reset too:
    otherwise the user could not start again with a new one."""
    user = await realm.user("halfway@example.com")
    async with realm.sessions() as session, session.begin():
        row = await session.get(User, user.id)
        assert row is not None
        row.totp_secret_enc = crypto.encrypt(TEST_SECRET_KEY, TOTP_PURPOSE, new_totp_secret())
    reset = await client.post(f"{realm.api}/users/{user.id}/reset-mfa", headers=realm.headers)
    assert reset.status_code == 200, reset.text
    assert await rows(realm, "SELECT totp_secret_enc, totp_enabled_at FROM users WHERE id = :u", u=user.id) == [
        (None, None)
    ]
    assert await rows(
        realm,
        "SELECT actor_id, category, subject_type FROM audit_events WHERE type = 'user.mfa_reset' AND subject_id = :u",
        u=user.id,
    ) == [(realm.admin.id, "authentication", "user")]
    nothing = await client.post(f"{realm.api}/users/{user.id}/reset-mfa", headers=realm.headers)
    assert nothing.status_code == 409 and nothing.json()["code"] == "mfa_not_enrolled"


async def test_a_suspended_user_gets_no_sign_in_link(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("resting@example.com")
    assert (await client.post(f"{realm.api}/users/{user.id}/suspend", headers=realm.headers)).status_code == 200
    refused = await client.post(realm.api + "/sign-in-links", json={"user_id": user.id}, headers=realm.headers)
    assert refused.status_code == 409
    assert refused.json()["code"] == "user_suspended"
    assert refused.json()["detail"] == "The user is suspended: a sign-in link would not work."
    assert await rows(realm, "SELECT count(*) FROM sign_in_links WHERE user_id = :u", u=user.id) == [(0,)]


async def test_service_principal_names_are_unique_in_a_realm_and_each_realm_sees_only_its_own(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    ours = await client.post(realm.api + "/service-principals", json={"name": "robot"}, headers=realm.headers)
    assert ours.status_code == 201, ours.text
    theirs = await client.post(
        other_realm.api + "/service-principals", json={"name": "robot"}, headers=other_realm.headers
    )
    assert theirs.status_code == 201, theirs.text  # the same name in another realm is another principal
    twice = await client.post(realm.api + "/service-principals", json={"name": "robot"}, headers=realm.headers)
    assert twice.status_code == 409
    assert twice.json()["detail"] == "A service principal with this name already exists."

    listed = (await client.get(realm.api + "/service-principals", headers=realm.headers)).json()["items"]
    assert [sp["id"] for sp in listed] == [ours.json()["id"]]
    mine = await client.get(f"{realm.api}/service-principals/{ours.json()['id']}", headers=realm.headers)
    assert mine.status_code == 200 and mine.json()["name"] == "robot"
    foreign = await client.get(f"{realm.api}/service-principals/{theirs.json()['id']}", headers=realm.headers)
    assert foreign.status_code == 404
    assert await rows(
        realm,
        "SELECT type, actor_id, subject_type FROM audit_events WHERE realm_id = :r AND subject_id = :s",
        r=realm.id,
        s=ours.json()["id"],
    ) == [("service_principal.created", realm.admin.id, "service_principal")]


async def test_users_by_id_finds_the_realms_users_among_any_ids(realm: RealmHandle, other_realm: RealmHandle) -> None:
    """Pages pass whatever ids a record holds (a run's starter is none when a trigger started it)."""
    mine = await realm.user("mine@example.com")
    foreign = await other_realm.user("foreign@example.com")
    async with realm.sessions() as session:
        found = await directory.users_by_id(
            session, realm.id, [None, "", new_id("spn"), mine.id, foreign.id, mine.id, realm.admin.id]
        )
        assert {k: v.email for k, v in found.items()} == {mine.id: mine.email, realm.admin.id: realm.admin.email}
        assert await directory.users_by_id(session, realm.id, [None, ""]) == {}
