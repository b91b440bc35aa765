from __future__ import annotations

from datetime import UTC, datetime, timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.audit import Actor, record_audit
from testing.factories import RealmHandle


async def _record(realm: RealmHandle, type_: str, **kwargs: object) -> str:
    async with realm.sessions() as session, session.begin():
        event = await record_audit(session, kwargs.pop("actor", realm.actor), type_, **kwargs)  # type: ignore[arg-type]
        return event.id


async def test_newest_first_with_keyset_paging(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    for i in range(5):
        await _record(realm, "webhook.created", category="configuration", subject_type="webhook", subject_id=f"whk_{i}")
    async with realm.sessions() as session:
        expected = (
            (
                await session.execute(
                    text("SELECT id FROM audit_events WHERE realm_id = :r ORDER BY id DESC"), {"r": realm.id}
                )
            )
            .scalars()
            .all()
        )
    seen: list[str] = []
    sizes: list[int] = []
    cursor = None
    while True:
        params = {"limit": "3"} | ({"cursor": cursor} if cursor else {})
        response = await client.get(realm.api + "/audit-events", params=params, headers=realm.headers)
        assert response.status_code == 200, response.text
        page = response.json()
        sizes.append(len(page["items"]))
        seen += [e["id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(expected) and len(seen) >= 8  # realm creation wrote three events
    assert len(sizes) > 1 and all(size == 3 for size in sizes[:-1]) and 0 < sizes[-1] <= 3


async def test_event_shape(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    actor = Actor(type="user", id=realm.admin.id, realm_id=realm.id, request_id="req_abc12345", correlation_id="wrn_x")
    await _record(
        realm,
        "policy.updated",
        actor=actor,
        category="configuration",
        subject_type="realm",
        subject_id=realm.id,
        details={"k": 1},
    )
    [event] = (
        await client.get(realm.api + "/audit-events", params={"type": "policy.updated"}, headers=realm.headers)
    ).json()["items"]
    assert set(event) == {
        "id",
        "occurred_at",
        "actor",
        "category",
        "type",
        "subject",
        "request_id",
        "correlation_id",
        "details",
    }
    assert (event["type"], event["category"]) == ("policy.updated", "configuration")
    assert event["actor"] == {"type": "user", "id": realm.admin.id}
    assert event["subject"] == {"type": "realm", "id": realm.id}
    assert (event["request_id"], event["correlation_id"], event["details"]) == ("req_abc12345", "wrn_x", {"k": 1})


async def test_filters(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    someone = await realm.user("someone@example.com")
    other_actor = Actor(type="user", id=someone.id, realm_id=realm.id)
    a = await _record(realm, "webhook.created", category="configuration", subject_type="webhook", subject_id="whk_a")
    b = await _record(realm, "webhook.secret_rotated", actor=other_actor, category="configuration", subject_id="whk_a")
    c = await _record(realm, "webhooks_other", category="configuration", subject_id="whk_b")
    old = await _record(realm, "workflow.created", category="workflow", subject_id="wfl_x")
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE audit_events SET occurred_at = :t WHERE id = :i"),
            {"t": datetime(2020, 1, 1, 12, tzinfo=UTC), "i": old},
        )

    async def ids(**params: str) -> list[str]:
        response = await client.get(realm.api + "/audit-events", params=params, headers=realm.headers)
        assert response.status_code == 200, response.text
        return [e["id"] for e in response.json()["items"]]

    assert await ids(type="webhook.created") == [a]
    assert await ids(type="webhook.*") == sorted([a, b], reverse=True)  # a prefix, and "_" is not a wildcard
    assert c in await ids(type="webhook*")
    assert await ids(category="workflow") == [old]
    assert await ids(actor_id=someone.id) == [b]
    assert await ids(subject_id="whk_a") == sorted([a, b], reverse=True)
    assert await ids(subject_id="whk_a", type="webhook.created") == [a]
    assert await ids(until="2020-01-02") == [old]
    assert await ids(since="2020-01-01T11:00:00Z", until="2020-01-01T12:00:00Z") == []  # until is exclusive
    assert await ids(since="2020-01-01T12:00:00+00:00", until="2020-01-01T12:00:01") == [old]
    recent = await ids(since=(datetime.now(UTC) - timedelta(hours=1)).isoformat())
    assert old not in recent and {a, b, c} <= set(recent)


async def test_bad_filters_are_422_with_every_path(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    response = await client.get(
        realm.api + "/audit-events", params={"since": "yesterday", "until": "2020-13-45"}, headers=realm.headers
    )
    assert response.status_code == 422
    assert {e["path"] for e in response.json()["errors"]} == {"query:since", "query:until"}
    backwards = await client.get(
        realm.api + "/audit-events", params={"since": "2021-01-01", "until": "2020-01-01"}, headers=realm.headers
    )
    assert backwards.status_code == 422 and backwards.json()["errors"][0]["path"] == "query:until"
    cursor = await client.get(realm.api + "/audit-events", params={"cursor": "!!"}, headers=realm.headers)
    assert cursor.status_code == 422 and cursor.json()["errors"][0]["path"] == "query:cursor"


async def test_realms_see_only_their_own_events(
    client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle
) -> None:
    await _record(other_realm, "webhook.created", actor=other_realm.actor, category="configuration")
    mine = (await client.get(realm.api + "/audit-events", params={"limit": "200"}, headers=realm.headers)).json()
    async with realm.sessions() as session:
        theirs = set(
            (await session.execute(text("SELECT id FROM audit_events WHERE realm_id = :r"), {"r": other_realm.id}))
            .scalars()
            .all()
        )
    assert theirs and not theirs & {e["id"] for e in mine["items"]}


async def test_a_type_prefix_matches_its_characters_literally(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    slash = await _record(realm, "cfg\\one.changed", category="configuration")
    await _record(realm, "cfgXone.changed", category="configuration")
    await _record(realm, "cfg\\\\one.changed", category="configuration")
    percent = await _record(realm, "cfg%one.changed", category="configuration")
    await _record(realm, "cfgwone.changed", category="configuration")
    underscore = await _record(realm, "cfg_two.changed", category="configuration")
    await _record(realm, "cfgYtwo.changed", category="configuration")

    async def ids(type_: str) -> list[str]:
        response = await client.get(realm.api + "/audit-events", params={"type": type_}, headers=realm.headers)
        assert response.status_code == 200, response.text
        return [e["id"] for e in response.json()["items"]]

    assert await ids("cfg\\one.*") == [slash]
    assert await ids("cfg%one*") == [percent]
    assert await ids("cfg_two*") == [underscore]


async def test_a_type_filter_is_refused_when_empty_or_longer_than_100(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    longest = "a" * 99 + "*"
    assert (
        await client.get(realm.api + "/audit-events", params={"type": longest}, headers=realm.headers)
    ).status_code == 200
    for refused in ("a" * 100 + "*", "*", "* *", "**"):
        response = await client.get(realm.api + "/audit-events", params={"type": refused}, headers=realm.headers)
        assert response.status_code == 422, refused
        assert [(e["path"], e["code"], e["message"]) for e in response.json()["errors"]] == [
            ("query:type", "invalid", "must be an event type, or a prefix ending with *")
        ], refused


async def test_bad_filters_are_told_what_to_write(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    url = realm.api + "/audit-events"
    same = await client.get(url, params={"since": "2020-01-01", "until": "2020-01-01T00:00Z"}, headers=realm.headers)
    assert same.status_code == 422 and same.json()["detail"] == "The filters are not valid."
    assert same.json()["errors"] == [
        {"path": "query:until", "code": "out_of_range", "message": "must be later than since"}
    ]
    unreadable = await client.get(url, params={"since": "soon"}, headers=realm.headers)
    assert unreadable.json()["errors"] == [
        {"path": "query:since", "code": "invalid_timestamp", "message": "must be an ISO 8601 date or date-time"}
    ]
    later = await client.get(
        url, params={"since": "2020-01-01", "until": "2020-01-01T00:00:01Z"}, headers=realm.headers
    )
    assert later.status_code == 200
