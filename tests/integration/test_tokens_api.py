from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import tokens
from engine.directory.audit import Actor
from engine.platform import crypto
from engine.platform.errors import Forbidden, NotFound
from testing.factories import RealmHandle, bearer, browser_session


async def _session_headers(
    client: AsyncTestClient[Litestar], realm: RealmHandle, user: object, *, mfa: bool
) -> dict[str, str]:
    login = await browser_session(realm, user, mfa=mfa)  # type: ignore[arg-type]
    client.cookies.set("cockpit_session", login.cookie)
    return {"X-CSRF-Token": login.csrf}


async def test_an_mfa_session_mints_an_admin_token_stored_hashed(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    headers = await _session_headers(client, realm, realm.admin, mfa=True)
    response = await client.post(
        realm.api + "/tokens", json={"name": "CI deploys", "audience": "admin", "expires_in_days": 30}, headers=headers
    )
    assert response.status_code == 201, response.text
    minted = response.json()
    token = minted["token"]
    assert token.startswith("pat_") and minted["audience"] == "admin" and minted["name"] == "CI deploys"
    assert set(minted) == {"id", "name", "audience", "created_at", "expires_at", "token"}
    client.cookies.clear()

    async with realm.sessions() as session:
        row = (
            (await session.execute(text("SELECT * FROM api_tokens WHERE id = :i"), {"i": minted["id"]}))
            .mappings()
            .one()
        )
        audit = (
            await session.execute(
                text(
                    "SELECT type, actor_id, details::text FROM audit_events"
                    " WHERE type = 'token.created' AND details->>'token_id' = :i"
                ),
                {"i": minted["id"]},
            )
        ).all()
    assert all(value != token for value in row.values())
    assert row["token_hash"] == crypto.token_hash(token)
    assert row["user_id"] == realm.admin.id and row["audience"] == "admin"
    assert [(t, a) for t, a, _ in audit] == [("token.created", realm.admin.id)] and token not in audit[0][2]

    # The token works, shows up in the list without its secret, and records its use.
    listed = await client.get(realm.api + "/tokens", headers=bearer(token))
    assert listed.status_code == 200
    [item] = [t for t in listed.json()["items"] if t["id"] == minted["id"]]
    assert "token" not in item and "token_hash" not in item and token not in listed.text
    assert item["revoked"] is False and item["expires_at"] is not None
    async with realm.sessions() as session:
        used = await session.scalar(text("SELECT last_used_at FROM api_tokens WHERE id = :i"), {"i": minted["id"]})
    assert used is not None
    users = await client.get(realm.api + "/users", headers=bearer(token))
    assert users.status_code == 200


async def test_last_used_at_starts_empty_and_is_set_on_use(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    headers = await _session_headers(client, realm, realm.admin, mfa=True)
    minted = (
        await client.post(realm.api + "/tokens", json={"name": "n", "audience": "account"}, headers=headers)
    ).json()
    [before] = [t for t in (await client.get(realm.api + "/tokens")).json()["items"] if t["id"] == minted["id"]]
    assert before["last_used_at"] is None
    client.cookies.clear()
    await client.get(realm.api + "/tokens", headers=bearer(minted["token"]))
    client.cookies.set("cockpit_session", (await browser_session(realm, realm.admin)).cookie)
    [after] = [t for t in (await client.get(realm.api + "/tokens")).json()["items"] if t["id"] == minted["id"]]
    assert after["last_used_at"] is not None


async def test_admin_tokens_need_an_mfa_session_and_tokens_cannot_mint(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    member = await realm.user("member@example.com")
    headers = await _session_headers(client, realm, member, mfa=False)
    admin = await client.post(realm.api + "/tokens", json={"name": "x", "audience": "admin"}, headers=headers)
    assert admin.status_code == 403 and admin.json()["code"] == "mfa_required"
    account = await client.post(realm.api + "/tokens", json={"name": "x", "audience": "account"}, headers=headers)
    assert account.status_code == 201 and account.json()["audience"] == "account"
    client.cookies.clear()

    for credential in (account.json()["token"], realm.admin_token):
        refused = await client.post(
            realm.api + "/tokens", json={"name": "y", "audience": "account"}, headers=bearer(credential)
        )
        assert refused.status_code == 403, credential
    async with realm.sessions() as session:
        count = await session.scalar(text("SELECT count(*) FROM api_tokens WHERE user_id = :u"), {"u": member.id})
    assert count == 1


async def test_bad_input_lists_every_error(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    headers = await _session_headers(client, realm, realm.admin, mfa=True)
    response = await client.post(
        realm.api + "/tokens", json={"name": " ", "audience": "root", "expires_in_days": 366}, headers=headers
    )
    assert response.status_code == 422
    assert {e["path"] for e in response.json()["errors"]} == {"/name", "/audience", "/expires_in_days"}
    no_csrf = await client.post(realm.api + "/tokens", json={"name": "n", "audience": "account"})
    assert no_csrf.status_code == 403 and no_csrf.json()["code"] == "csrf_failed"


async def test_revoked_and_expired_tokens_are_refused(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    member = await realm.user("member@example.com")
    headers = await _session_headers(client, realm, member, mfa=False)
    minted = (
        await client.post(realm.api + "/tokens", json={"name": "n", "audience": "account"}, headers=headers)
    ).json()
    assert (await client.delete(f"{realm.api}/tokens/{minted['id']}", headers=headers)).status_code == 204
    [item] = (await client.get(realm.api + "/tokens")).json()["items"]
    assert item["revoked"] is True
    client.cookies.clear()
    revoked = await client.get(realm.api + "/tokens", headers=bearer(minted["token"]))
    assert revoked.status_code == 401 and revoked.json()["code"] == "unauthorized"

    expiring = await realm.token(member, "account", expires_in=timedelta(days=1))
    assert (await client.get(realm.api + "/tokens", headers=bearer(expiring))).status_code == 200
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE token_hash = :h"),
            {"h": crypto.token_hash(expiring)},
        )
    assert (await client.get(realm.api + "/tokens", headers=bearer(expiring))).status_code == 401


async def test_people_revoke_only_their_own_tokens_and_admins_any(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    alice = await realm.user("alice@example.com")
    bob = await realm.user("bob@example.com")
    alice_token = await realm.token(alice, "account")
    bob_token = await realm.token(bob, "account")
    async with realm.sessions() as session:
        bob_token_id = await session.scalar(
            text("SELECT id FROM api_tokens WHERE token_hash = :h"), {"h": crypto.token_hash(bob_token)}
        )
    # Alice cannot see or revoke Bob's token (404, not 403: ids do not leak).
    assert all(
        t["id"] != bob_token_id
        for t in (await client.get(realm.api + "/tokens", headers=bearer(alice_token))).json()["items"]
    )
    assert (await client.delete(f"{realm.api}/tokens/{bob_token_id}", headers=bearer(alice_token))).status_code == 404
    # The administrator's account-audience token is not enough to revoke others' tokens.
    admin_account = await realm.token(realm.admin, "account")
    assert (await client.delete(f"{realm.api}/tokens/{bob_token_id}", headers=bearer(admin_account))).status_code == 404
    assert (await client.get(realm.api + "/tokens", headers=bearer(bob_token))).status_code == 200
    # A realm administrator (realm.tokens.write, admin audience) may.
    assert (await client.delete(f"{realm.api}/tokens/{bob_token_id}", headers=realm.headers)).status_code == 204
    assert (await client.get(realm.api + "/tokens", headers=bearer(bob_token))).status_code == 401
    async with realm.sessions() as session:
        audit = (
            await session.execute(
                text(
                    "SELECT actor_id, subject_id FROM audit_events"
                    " WHERE type = 'token.revoked' AND details->>'token_id' = :i"
                ),
                {"i": bob_token_id},
            )
        ).all()
    assert audit == [(realm.admin.id, bob.id)]


async def test_service_principal_tokens(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle
) -> None:
    sp = (await client.post(realm.api + "/service-principals", json={"name": "sync-bot"}, headers=realm.headers)).json()
    minted = await client.post(
        f"{realm.api}/service-principals/{sp['id']}/tokens", json={"name": "nightly sync"}, headers=realm.headers
    )
    assert minted.status_code == 201, minted.text
    token = minted.json()["token"]
    assert token.startswith("pat_") and minted.json()["audience"] == "admin"
    listed = (await client.get(f"{realm.api}/service-principals/{sp['id']}/tokens", headers=realm.headers)).json()
    assert [t["id"] for t in listed["items"]] == [minted.json()["id"]] and token not in str(listed)
    assert listed["items"][0]["owner"] == {"type": "service_principal", "id": sp["id"]}
    # The service principal holds no role yet: its token authenticates, then lacks permissions.
    assert (await client.get(realm.api + "/users", headers=bearer(token))).status_code == 403
    # A token (even an administrator's) cannot reach the self-service token routes as a service principal.
    assert (await client.get(realm.api + "/tokens", headers=bearer(token))).status_code == 403
    missing = await client.post(
        f"{other_realm.api}/service-principals/{sp['id']}/tokens", json={"name": "x"}, headers=other_realm.headers
    )
    assert missing.status_code == 404


async def test_each_limit_of_a_token_request_is_pinned_on_both_sides(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    headers = await _session_headers(client, realm, realm.admin, mfa=True)

    def lifetime(minted: dict[str, str]) -> timedelta:
        return datetime.fromisoformat(minted["expires_at"]) - datetime.fromisoformat(minted["created_at"])

    async def mint(**body: object) -> Any:
        return await client.post(realm.api + "/tokens", json={"audience": "account", **body}, headers=headers)

    for name, days in (("n" * 200, 1), ("n", 365)):
        accepted = await mint(name=name, expires_in_days=days)
        assert accepted.status_code == 201, accepted.text
        assert abs(lifetime(accepted.json()) - timedelta(days=days)) < timedelta(minutes=1)
    assert abs(lifetime((await mint(name="n")).json()) - timedelta(days=90)) < timedelta(minutes=1)

    refusals = {
        "n" * 201: ("too_long", "must be at most 200 characters"),
        " ": ("too_short", "must be at least 1 character(s)"),
        "one\ntwo": ("invalid", "must not contain line breaks"),
        "one\rtwo": ("invalid", "must not contain line breaks"),
    }
    for name, (code, message) in refusals.items():
        refused = await mint(name=name)
        assert refused.status_code == 422, name
        assert [(e["path"], e["code"], e["message"]) for e in refused.json()["errors"]] == [("/name", code, message)]
    for days in (0, 366):
        refused = await mint(name="n", expires_in_days=days)
        assert [(e["path"], e["code"], e["message"]) for e in refused.json()["errors"]] == [
            ("/expires_in_days", "out_of_range", "must be between 1 and 365")
        ]
    refused = await mint(name="n", audience="root")
    assert [(e["path"], e["code"], e["message"]) for e in refused.json()["errors"]] == [
        ("/audience", "invalid", "audience is admin or account")
    ]


async def test_only_a_user_mints_a_token_for_itself(realm: RealmHandle) -> None:
    for actor in (Actor("service_principal", realm.admin.id, realm.id), Actor("user", None, realm.id)):
        async with realm.sessions() as session, session.begin():
            with pytest.raises(Forbidden, match="Only users mint tokens for themselves"):
                await tokens.mint_own_token(
                    session, actor, name="n", audience="account", expires_in_days=None, credential="session", mfa=True
                )
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM api_tokens WHERE name = 'n'")) == 0


async def test_a_user_of_another_realm_mints_no_token_here(realm: RealmHandle, other_realm: RealmHandle) -> None:
    stranger = Actor("user", other_realm.admin.id, realm.id)
    async with realm.sessions() as session, session.begin():
        with pytest.raises(NotFound, match="No such user"):
            await tokens.mint_own_token(
                session, stranger, name="n", audience="account", expires_in_days=None, credential="session", mfa=True
            )


async def test_a_bad_service_principal_token_request_is_refused_whole(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    sp = (await client.post(realm.api + "/service-principals", json={"name": "sync-bot"}, headers=realm.headers)).json()
    refused = await client.post(
        f"{realm.api}/service-principals/{sp['id']}/tokens",
        json={"name": " ", "expires_in_days": 0},
        headers=realm.headers,
    )
    assert refused.status_code == 422
    assert refused.json()["detail"] == "The request is not valid."
    assert {e["path"] for e in refused.json()["errors"]} == {"/name", "/expires_in_days"}


async def test_tokens_are_listed_page_by_page_and_an_unknown_one_is_404(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    member = await realm.user("member@example.com")
    first, second = await realm.token(member, "account"), await realm.token(member, "account")
    page = (await client.get(realm.api + "/tokens", params={"limit": "1"}, headers=bearer(first))).json()
    rest = (
        await client.get(
            realm.api + "/tokens", params={"limit": "1", "cursor": page["next_cursor"]}, headers=bearer(second)
        )
    ).json()
    assert len(page["items"]) == len(rest["items"]) == 1
    assert page["items"][0]["id"] < rest["items"][0]["id"]
    unknown = await client.delete(f"{realm.api}/tokens/tok_unknown", headers=bearer(first))
    assert unknown.status_code == 404 and unknown.json()["detail"] == "No such token."


async def test_minting_a_service_principals_token_needs_every_permission_it_holds(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    sp = (await client.post(realm.api + "/service-principals", json={"name": "sync-bot"}, headers=realm.headers)).json()
    strong = await realm.role("sp-roles", ["realm.roles.write"])
    granted = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": strong.id, "service_principal_id": sp["id"]},
        headers=realm.headers,
    )
    assert granted.status_code == 201, granted.text
    weak = await realm.user()
    await realm.assign(weak, await realm.role("only-tokens", ["realm.tokens.write"]))
    url = f"{realm.api}/service-principals/{sp['id']}/tokens"
    refused = await client.post(url, json={"name": "nightly"}, headers=bearer(await realm.token(weak)))
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "target_outranks_actor"
    assert (await client.get(url, headers=realm.headers)).json()["items"] == []


async def test_revoking_a_service_principals_token_is_audited_and_needs_its_permissions(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    sp = (await client.post(realm.api + "/service-principals", json={"name": "sync-bot"}, headers=realm.headers)).json()
    strong = await realm.role("sp-roles", ["realm.roles.write"])
    granted = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": strong.id, "service_principal_id": sp["id"]},
        headers=realm.headers,
    )
    assert granted.status_code == 201, granted.text
    minted = (
        await client.post(
            f"{realm.api}/service-principals/{sp['id']}/tokens", json={"name": "nightly"}, headers=realm.headers
        )
    ).json()
    weak = await realm.user()
    await realm.assign(weak, await realm.role("only-tokens", ["realm.tokens.write"]))
    refused = await client.delete(f"{realm.api}/tokens/{minted['id']}", headers=bearer(await realm.token(weak)))
    assert refused.status_code == 403, refused.text
    assert refused.json()["detail"].startswith("This service principal holds permissions you do not hold ("), (
        refused.text
    )

    assert (await client.delete(f"{realm.api}/tokens/{minted['id']}", headers=realm.headers)).status_code == 204
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT category, subject_type, subject_id, details FROM audit_events"
                " WHERE realm_id = :r AND type = 'token.revoked'"
            ),
            {"r": realm.id},
        )
        assert [tuple(row) for row in rows] == [
            (
                "authentication",
                "service_principal",
                sp["id"],
                {"token_id": minted["id"], "audience": "admin", "name": "nightly"},
            )
        ]
