"""Names and emails people can tell apart: NFKC for uniqueness, no invisible or bidi characters."""

from __future__ import annotations

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import RealmHandle

Client = AsyncTestClient[Litestar]


async def count(realm: RealmHandle, sql: str) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text(sql), {"r": realm.id}) or 0)


async def test_a_role_that_only_looks_like_realm_admin_is_refused(client: Client, realm: RealmHandle) -> None:
    before = await count(realm, "SELECT count(*) FROM roles WHERE realm_id = :r")
    body = {"permissions": ["realm.users.read"], "boundary": "realm"}
    for name, code in [
        ("realm-\u200badmin", "invisible_character"),  # zero-width space
        ("realm-admin\u202e", "invisible_character"),  # right-to-left override
        ("\u2066realm-admin\u2069", "invisible_character"),  # isolate
        ("realm-\u0430dmin", "mixed_script"),  # Cyrillic а
    ]:
        refused = await client.post(realm.api + "/roles", json={"name": name} | body, headers=realm.headers)
        assert refused.status_code == 422, (name, refused.text)
        assert refused.json()["errors"][0]["path"] == "/name" and refused.json()["errors"][0]["code"] == code
    for name in ("ｒｅａｌｍ－ａｄｍｉｎ", "Realm-Admin"):  # fullwidth, other case: the same name
        taken = await client.post(realm.api + "/roles", json={"name": name} | body, headers=realm.headers)
        assert taken.status_code == 409, (name, taken.text)
    assert await count(realm, "SELECT count(*) FROM roles WHERE realm_id = :r") == before


async def test_lookalike_emails_are_the_same_user_or_refused(client: Client, realm: RealmHandle) -> None:
    made = await client.post(
        realm.api + "/users", json={"email": "bob@example.com", "display_name": "Bob"}, headers=realm.headers
    )
    assert made.status_code == 201
    fullwidth = await client.post(
        realm.api + "/users", json={"email": "ｂob@example.com", "display_name": "Bob"}, headers=realm.headers
    )
    assert fullwidth.status_code == 409
    cyrillic = await client.post(
        realm.api + "/users", json={"email": "b\u043eb@example.com", "display_name": "Bob"}, headers=realm.headers
    )
    assert cyrillic.status_code == 422
    assert cyrillic.json()["errors"][0] == {
        "path": "/email",
        "code": "mixed_script",
        "message": cyrillic.json()["errors"][0]["message"],
    }
    hidden = await client.post(
        realm.api + "/users", json={"email": "bob\u200b@example.com", "display_name": "Bob"}, headers=realm.headers
    )
    assert hidden.status_code == 422 and hidden.json()["errors"][0]["path"] == "/email"
    assert await count(realm, "SELECT count(*) FROM users WHERE realm_id = :r AND email ILIKE '%b%b@example.com'") == 1
    # A script of its own is fine, and stored in NFKC.
    other = await client.post(
        realm.api + "/users", json={"email": "иван@example.com", "display_name": "Ｉｖａｎ"}, headers=realm.headers
    )
    assert other.status_code == 201 and other.json()["display_name"] == "Ivan"


@pytest.mark.parametrize(
    ("path", "body", "pointer"),
    [
        ("/organizations", {"name": "Acme\u200d"}, "/name"),
        ("/service-principals", {"name": "deploy\u202ebot"}, "/name"),
        ("/workflows", {"name": "Onboard\u2067ing"}, "/name"),
    ],
)
async def test_names_refuse_invisible_and_bidi_characters(
    client: Client, realm: RealmHandle, path: str, body: dict[str, str], pointer: str
) -> None:
    refused = await client.post(realm.api + path, json=body, headers=realm.headers)
    assert refused.status_code == 422, refused.text
    [issue] = refused.json()["errors"]
    assert issue["path"] == pointer and issue["code"] == "invisible_character"


async def test_a_users_display_name_with_a_bidi_character_is_refused_at_its_path(
    client: Client, realm: RealmHandle
) -> None:
    refused = await client.post(
        realm.api + "/users", json={"email": "eve@example.com", "display_name": "Eve\u202e"}, headers=realm.headers
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == "The request is not valid."
    [issue] = refused.json()["errors"]
    assert issue["path"] == "/display_name" and issue["code"] == "invisible_character"
    assert await count(realm, "SELECT count(*) FROM users WHERE realm_id = :r AND email = 'eve@example.com'") == 0
