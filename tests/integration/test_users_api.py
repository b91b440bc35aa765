from __future__ import annotations

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import RealmHandle


async def test_create_user_writes_outbox_and_audit_in_the_same_transaction(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    response = await client.post(
        realm.api + "/users", json={"email": "new@example.com", "display_name": "New Person"}, headers=realm.headers
    )
    assert response.status_code == 201, response.text
    user = response.json()
    assert user["id"].startswith("usr_") and user["status"] == "active" and user["email"] == "new@example.com"
    async with realm.sessions() as session:
        row = (
            await session.execute(text("SELECT guest, created_by FROM users WHERE id = :u"), {"u": user["id"]})
        ).one()
        outbox = (
            await session.execute(
                text("SELECT type, subject_id, payload FROM outbox_events WHERE subject_id = :u"), {"u": user["id"]}
            )
        ).all()
        audit = (
            await session.execute(
                text("SELECT type, actor_id, subject_type, details FROM audit_events WHERE subject_id = :u"),
                {"u": user["id"]},
            )
        ).all()
    assert tuple(row) == (False, realm.admin.id)
    assert [tuple(r)[:2] for r in outbox] == [("user.created", user["id"])]
    assert outbox[0].payload["user_id"] == user["id"]
    assert [tuple(row) for row in audit] == [("user.created", realm.admin.id, "user", {"email": "new@example.com"})]
    again = await client.post(
        realm.api + "/users", json={"email": "NEW@example.com", "display_name": "Again"}, headers=realm.headers
    )
    assert again.status_code == 409
    assert again.json()["detail"] == "A user with this email already exists in the realm."
    guest = await client.post(
        realm.api + "/users",
        json={"email": "guest@example.com", "display_name": "Guest", "guest": True},
        headers=realm.headers,
    )
    assert guest.status_code == 201, guest.text
    async with realm.sessions() as session:
        stored = await session.scalar(text("SELECT guest FROM users WHERE id = :u"), {"u": guest.json()["id"]})
    assert stored is True


async def test_bad_input_lists_every_error_with_its_path_and_changes_nothing(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    response = await client.post(
        realm.api + "/users", json={"email": "nope", "display_name": " ", "password": "short"}, headers=realm.headers
    )
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "validation_failed"
    assert {e["path"] for e in body["errors"]} == {"/email", "/display_name", "/password"}
    unknown = await client.post(
        realm.api + "/users", json={"email": "a@example.com", "display_name": "A", "script": "x"}, headers=realm.headers
    )
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["path"] == "/script"
    missing = await client.post(realm.api + "/users", json={"display_name": "A"}, headers=realm.headers)
    assert missing.status_code == 422 and missing.json()["errors"][0]["path"] == "/email"
    async with realm.sessions() as session:
        count = await session.scalar(text("SELECT count(*) FROM users WHERE realm_id = :r"), {"r": realm.id})
    assert count == 1  # only the administrator


async def test_list_is_keyset_paginated_and_filtered(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    for i in range(5):
        await realm.user(f"person{i}@example.com", display_name=f"Person {i}")
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = (await client.get(realm.api + "/users", params=params, headers=realm.headers)).json()
        seen += [u["email"] for u in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == 6 and len(set(seen)) == 6
    found = (await client.get(realm.api + "/users", params={"q": "person3"}, headers=realm.headers)).json()
    assert [u["email"] for u in found["items"]] == ["person3@example.com"]
    bad = await client.get(realm.api + "/users", params={"limit": "0"}, headers=realm.headers)
    assert bad.status_code == 422


async def test_suspend_and_reactivate_emit_events(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    user = await realm.user("s@example.com")
    suspended = await client.post(f"{realm.api}/users/{user.id}/suspend", headers=realm.headers)
    assert suspended.status_code == 200 and suspended.json()["status"] == "suspended"
    again = await client.post(f"{realm.api}/users/{user.id}/suspend", headers=realm.headers)
    assert again.status_code == 409 and again.json()["code"] == "conflict"
    back = await client.post(f"{realm.api}/users/{user.id}/reactivate", headers=realm.headers)
    assert back.json()["status"] == "active"
    async with realm.sessions() as session:
        types = (
            (
                await session.execute(
                    text("SELECT type FROM outbox_events WHERE subject_id = :u ORDER BY id"), {"u": user.id}
                )
            )
            .scalars()
            .all()
        )
    assert types == ["user.created", "user.suspended", "user.reactivated"]


async def test_another_realms_token_gets_404_and_no_token_401(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle
) -> None:
    assert (await client.get(realm.api + "/users", headers=other_realm.headers)).status_code == 404
    assert (await client.get("/api/v1/realms/no-such-realm/users", headers=other_realm.headers)).status_code == 404
    assert (await client.get(realm.api + "/users")).status_code == 401


async def test_nobody_takes_over_or_locks_out_someone_more_powerful(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    helpdesk_role = await realm.role("helpdesk", ["realm.users.read", "realm.users.write", "realm.users.suspend"])
    helpdesk = await realm.user("helpdesk@example.com")
    await realm.assign(helpdesk, helpdesk_role)
    token = {"Authorization": f"Bearer {await realm.token(helpdesk)}"}
    takeover = await client.patch(
        f"{realm.api}/users/{realm.admin.id}", json={"password": "a-new-password-123"}, headers=token
    )
    assert takeover.status_code == 403 and takeover.json()["code"] == "target_outranks_actor"
    lockout = await client.post(f"{realm.api}/users/{realm.admin.id}/suspend", headers=token)
    assert lockout.status_code == 403
    peer = await realm.user("peer@example.com")
    assert (await client.post(f"{realm.api}/users/{peer.id}/suspend", headers=token)).status_code == 200
    assert (
        await client.patch(f"{realm.api}/users/{peer.id}", json={"password": "another-password-1"}, headers=token)
    ).status_code == 200


async def test_a_service_principals_description_is_kept_up_to_500_characters_and_501_refused(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    url = realm.api + "/service-principals"
    kept = await client.post(url, json={"name": "long-bot", "description": "d" * 500}, headers=realm.headers)
    assert kept.status_code == 201, kept.text
    assert kept.json()["description"] == "d" * 500
    shown = (await client.get(f"{url}/{kept.json()['id']}", headers=realm.headers)).json()
    assert shown["description"] == "d" * 500
    refused = await client.post(url, json={"name": "longer-bot", "description": "d" * 501}, headers=realm.headers)
    assert refused.status_code == 422
    assert [(e["path"], e["code"]) for e in refused.json()["errors"]] == [("/description", "too_long")]
    listed = (await client.get(url, headers=realm.headers)).json()["items"]
    assert [sp["name"] for sp in listed] == ["long-bot"]


async def test_a_bad_update_lists_every_error_and_changes_nothing(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    user = await realm.user("patched@example.com")
    url = f"{realm.api}/users/{user.id}"
    refused = await client.patch(url, json={"display_name": " ", "password": "x" * 11}, headers=realm.headers)
    assert refused.status_code == 422
    assert [(e["path"], e["code"]) for e in refused.json()["errors"]] == [
        ("/display_name", "too_short"),
        ("/password", "too_short"),
    ]
    shown = (await client.get(url, headers=realm.headers)).json()
    assert shown["display_name"] == user.display_name
    async with realm.sessions() as session:
        stored = await session.scalar(text("SELECT password_hash FROM users WHERE id = :u"), {"u": user.id})
    assert stored == user.password_hash
    accepted = await client.patch(url, json={"password": "x" * 12}, headers=realm.headers)
    assert accepted.status_code == 200, accepted.text


async def test_an_update_makes_a_user_a_guest_and_back_and_audits_it(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    user = await realm.user("visitor@example.com")
    url = f"{realm.api}/users/{user.id}"
    made = await client.patch(url, json={"guest": True}, headers=realm.headers)
    assert made.status_code == 200, made.text
    assert made.json()["guest"] is True
    assert (await client.get(url, headers=realm.headers)).json()["guest"] is True
    back = await client.patch(url, json={"guest": False}, headers=realm.headers)
    assert back.status_code == 200 and back.json()["guest"] is False
    async with realm.sessions() as session:
        changes = (
            await session.scalars(
                text(
                    "SELECT details->'changed' FROM audit_events WHERE subject_id = :u AND type = 'user.updated' ORDER BY id"
                ),
                {"u": user.id},
            )
        ).all()
    assert changes == [["guest"], ["guest"]]
