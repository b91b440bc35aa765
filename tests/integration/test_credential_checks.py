"""Every request's credential check (engine/directory/credentials.py) at its limits: a browser
session's two idle hours and twelve hours, a token's expiry, the minute between "last used" marks,
the holder each credential answers with, and the kept authority's earliest expiry and size."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from engine.directory import credentials
from engine.directory.credentials import Caller, RealmRow, check_session, check_token
from engine.directory.models import ServicePrincipal
from engine.directory.tokens import mint_token
from engine.platform.db import driver_connection
from engine.platform.ids import new_id
from testing.factories import RealmHandle, browser_session

MICROSECOND = timedelta(microseconds=1)


async def _sql(realm: RealmHandle, statement: str, values: dict[str, Any]) -> Any:
    async with realm.sessions() as session, session.begin():
        result = await session.execute(text(statement), values)
        return result.first() if result.returns_rows else None


async def _realm_row(realm: RealmHandle) -> RealmRow:
    row = await _sql(realm, "SELECT slug, name, created_at, authz_epoch FROM realms WHERE id = :r", {"r": realm.id})
    return RealmRow(realm.id, *row)


async def test_a_session_is_a_caller_until_two_idle_hours_and_twelve_hours_and_not_at_them(
    realm: RealmHandle,
) -> None:
    user = await realm.user("ida@example.com", display_name="Ida")
    login = await browser_session(realm, user, mfa=False)
    opened = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=13)
    end = opened + timedelta(hours=12)
    ids = {"i": login.session_id}
    await _sql(realm, "UPDATE sessions SET expires_at = :e WHERE id = :i", ids | {"e": end})
    epoch = (await _sql(realm, "SELECT authz_epoch FROM users WHERE id = :u", {"u": user.id}))[0]
    realm_row = await _realm_row(realm)

    async def seen_at(moment: datetime) -> None:
        await _sql(realm, "UPDATE sessions SET last_seen_at = :m WHERE id = :i", ids | {"m": moment})

    async def at(moment: datetime, cookie: str = login.cookie) -> tuple[Caller | None, datetime]:
        async with realm.sessions() as session, session.begin():
            caller = await check_session(await driver_connection(session), cookie, moment=moment)
        last_seen = (await _sql(realm, "SELECT last_seen_at FROM sessions WHERE id = :i", ids))[0]
        return caller, last_seen

    await seen_at(opened)
    caller, last_seen = await at(opened + timedelta(minutes=1))  # a minute: not recorded
    assert caller == Caller(
        realm_row, "user", user.id, "Ida", "ida@example.com", "account", "session", login.session_id, epoch, False
    )
    assert last_seen == opened
    caller, last_seen = await at(opened + timedelta(minutes=1) + MICROSECOND)  # more than a minute: recorded
    assert caller is not None and caller.touched is True and last_seen == opened + timedelta(minutes=1) + MICROSECOND

    idle_end = opened + timedelta(hours=2)
    await seen_at(opened)
    caller, last_seen = await at(idle_end - MICROSECOND)
    assert caller is not None and caller.touched is True and last_seen == idle_end - MICROSECOND
    await seen_at(opened)
    assert await at(idle_end) == (None, opened)

    await seen_at(end - timedelta(minutes=30))
    assert (await at(end - MICROSECOND))[0] is not None
    assert (await at(end))[0] is None

    # A session opened with a second factor answers for the administration; an unknown cookie,
    # a suspended user's session and a revoked one answer nothing.
    await seen_at(opened)
    await _sql(realm, "UPDATE sessions SET mfa = true WHERE id = :i", ids)
    caller, _ = await at(opened + timedelta(seconds=1))
    assert caller is not None and caller.audience == "admin" and caller.touched is False
    assert (await at(opened + timedelta(seconds=1), "ses.unknown"))[0] is None
    await _sql(realm, "UPDATE users SET status = 'suspended' WHERE id = :u", {"u": user.id})
    assert (await at(opened + timedelta(seconds=1)))[0] is None
    await _sql(realm, "UPDATE users SET status = 'active' WHERE id = :u", {"u": user.id})
    assert (await at(opened + timedelta(seconds=1)))[0] is not None
    await _sql(realm, "UPDATE sessions SET revoked_at = :m WHERE id = :i", ids | {"m": opened})
    assert (await at(opened + timedelta(seconds=1)))[0] is None


async def test_a_token_is_a_caller_until_the_instant_it_expires_and_marks_its_use_once_a_minute(
    realm: RealmHandle,
) -> None:
    user = await realm.user("tom@example.com", display_name="Tom")
    token = await realm.token(user, audience="account", expires_in=timedelta(hours=1))
    row = await _sql(realm, "SELECT id, expires_at FROM api_tokens WHERE user_id = :u", {"u": user.id})
    token_id, expires = row
    epoch = (await _sql(realm, "SELECT authz_epoch FROM users WHERE id = :u", {"u": user.id}))[0]
    realm_row = await _realm_row(realm)
    ids = {"i": token_id}

    async def at(moment: datetime, presented: str = token) -> tuple[Caller | None, datetime | None]:
        async with realm.sessions() as session, session.begin():
            caller = await check_token(await driver_connection(session), presented, moment=moment)
        return caller, (await _sql(realm, "SELECT last_used_at FROM api_tokens WHERE id = :i", ids))[0]

    first = expires - timedelta(minutes=30)
    caller, last_used = await at(first)  # never used: recorded
    assert caller == Caller(
        realm_row, "user", user.id, "Tom", "tom@example.com", "account", "token", token_id, epoch, True
    )
    assert last_used == first
    caller, last_used = await at(first + timedelta(minutes=1))  # a minute later: not recorded
    assert caller is not None and caller.touched is False and last_used == first
    caller, last_used = await at(first + timedelta(minutes=1) + MICROSECOND)
    assert caller is not None and caller.touched is True and last_used == first + timedelta(minutes=1) + MICROSECOND

    assert (await at(expires - MICROSECOND))[0] is not None
    assert (await at(expires))[0] is None
    assert (await at(first, "pat_unknown"))[0] is None
    assert (await at(first, token.removeprefix("pat_")))[0] is None
    await _sql(realm, "UPDATE users SET status = 'suspended' WHERE id = :u", {"u": user.id})
    assert (await at(first))[0] is None
    await _sql(realm, "UPDATE users SET status = 'active' WHERE id = :u", {"u": user.id})
    await _sql(realm, "UPDATE api_tokens SET revoked_at = :m WHERE id = :i", ids | {"m": first})
    assert (await at(first))[0] is None


async def test_a_service_principals_token_answers_with_the_principal_and_no_user_epoch(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        principal = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="deployer")
        session.add(principal)
        await session.flush()
        token, row = await mint_token(session, realm.actor, audience="admin", service_principal=principal)
        token_id, expires = row.id, row.expires_at
    realm_row = await _realm_row(realm)
    async with realm.sessions() as session, session.begin():
        caller = await check_token(await driver_connection(session), token, moment=expires - timedelta(days=1))
    assert caller == Caller(
        realm_row, "service_principal", principal.id, "deployer", None, "admin", "token", token_id, 0, True
    )


async def test_a_kept_authority_serves_until_its_earliest_grant_expires_and_not_at_it(realm: RealmHandle) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    user = await realm.user()
    assignment = await realm.assign(user, role, expires_in=timedelta(hours=1))
    expires = assignment.expires_at
    assert expires is not None
    token = await realm.token(user)
    cache = credentials.AuthorityCache()
    moment = expires - timedelta(minutes=30)
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        caller = await check_token(conn, token, moment=moment)
        assert caller is not None
        assert (await cache.authority(conn, caller, moment=moment)).holds("realm.workflows.write")
        assert (await cache.authority(conn, caller, moment=expires - MICROSECOND)).holds("realm.workflows.write")
        assert cache.reads == 1
        assert not (await cache.authority(conn, caller, moment=expires)).holds("realm.workflows.write")
        assert cache.reads == 2


async def test_a_kept_authority_is_read_again_when_either_epoch_moves(realm: RealmHandle) -> None:
    role = await realm.role("editor", ["realm.workflows.write"])
    user = await realm.user()
    await realm.assign(user, role)
    token = await realm.token(user)
    cache = credentials.AuthorityCache()
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        caller = await check_token(conn, token)
        assert caller is not None
        assert (await cache.authority(conn, caller)).holds("realm.workflows.write")
        moved_realm = replace(caller, realm=replace(caller.realm, authz_epoch=caller.realm.authz_epoch + 1))
        moved_user = replace(moved_realm, user_epoch=caller.user_epoch + 1)
        for moved in (moved_realm, moved_user):
            assert (await cache.authority(conn, moved)).holds("realm.workflows.write")
            assert (await cache.authority(conn, moved)).holds("realm.workflows.write")
        assert cache.reads == 3  # once at first, once after each move, and kept between


async def test_a_full_authority_cache_starts_again_empty(realm: RealmHandle) -> None:
    first, second, third = [await realm.user() for _ in range(3)]
    tokens = [await realm.token(user) for user in (first, second, third)]
    cache = credentials.AuthorityCache(limit=2)
    async with realm.sessions() as session:
        conn = await driver_connection(session)
        a, b, c = [await check_token(conn, token) for token in tokens]
        assert a is not None and b is not None and c is not None
        for caller in (a, b, a, b):
            await cache.authority(conn, caller)
        assert cache.reads == 2  # two kept: the limit is reached, not passed
        await cache.authority(conn, c)  # the third: the cache starts again with it alone
        await cache.authority(conn, c)
        assert cache.reads == 3
        await cache.authority(conn, a)
        await cache.authority(conn, c)
        assert cache.reads == 4
