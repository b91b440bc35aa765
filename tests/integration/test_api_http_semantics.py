"""Idempotency keys, entity tags with conditional requests, and ``Location``: one implementation for
every JSON API route (cockpit/api/http_semantics.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform import idempotency
from testing.factories import RealmHandle, bearer, independent_admin
from testing.workflows import publish

Client = AsyncTestClient[Litestar]


def keyed(realm: RealmHandle, key: str) -> dict[str, str]:
    return {**realm.headers, "Idempotency-Key": key}


async def count(realm: RealmHandle, sql: str, **params: Any) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text(sql), params) or 0)


async def age_key(realm: RealmHandle, key: str, by: timedelta) -> None:
    """Move a kept key ``by`` into the past, as if that much time had gone by since its request."""
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "UPDATE idempotency_keys SET created_at = created_at - CAST(:by AS interval), expires_at = expires_at - CAST(:by AS interval) WHERE key = :k"
            ),
            {"by": by, "k": key},
        )


class TestIdempotencyKeys:
    async def test_the_same_post_with_the_same_key_makes_one_run_and_replays_its_answer(
        self, client: Client, realm: RealmHandle
    ) -> None:
        subject = await realm.user("s@example.com")
        wid = await publish(
            realm, {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "d", "type": "end"}]}
        )
        url = f"{realm.api}/workflows/{wid}/runs"
        first = await client.post(url, json={"subject_id": subject.id}, headers=keyed(realm, '"run-1"'))
        again = await client.post(url, json={"subject_id": subject.id}, headers=keyed(realm, '"run-1"'))
        assert first.status_code == again.status_code == 202, again.text
        assert again.json() == first.json()
        assert again.headers["location"] == first.headers["location"]
        assert again.headers["content-type"] == first.headers["content-type"]
        assert again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
        assert await count(realm, "SELECT count(*) FROM workflow_runs WHERE workflow_id = :w", w=wid) == 1
        # Without a key, or with another key, the request runs again.
        other = await client.post(url, json={"subject_id": subject.id}, headers=keyed(realm, "run-2"))
        plain = await client.post(url, json={"subject_id": subject.id}, headers=realm.headers)
        assert other.status_code == plain.status_code == 202
        assert len({first.json()["id"], other.json()["id"], plain.json()["id"]}) == 3

    async def test_a_secret_shown_once_is_replayed_but_kept_encrypted(self, client: Client, realm: RealmHandle) -> None:
        body = {"destination": "http://127.0.0.1:9/h", "allow_private_network": True}
        made = await client.post(realm.api + "/webhooks", json=body, headers=keyed(realm, "hook"))
        replay = await client.post(realm.api + "/webhooks", json=body, headers=keyed(realm, "hook"))
        assert made.status_code == replay.status_code == 201, made.text
        secret = made.json()["secret"]
        assert replay.json() == made.json()
        async with realm.sessions() as session:
            kept = await session.scalar(text("SELECT body FROM idempotency_keys WHERE key = 'hook'"))
        assert kept and secret.encode() not in kept and made.json()["id"].encode() not in kept

    async def test_the_same_key_with_another_body_or_path_is_422_and_changes_nothing(
        self, client: Client, realm: RealmHandle
    ) -> None:
        made = await client.post(
            realm.api + "/users", json={"email": "a@example.com", "display_name": "A"}, headers=keyed(realm, "k1")
        )
        assert made.status_code == 201
        reused = await client.post(
            realm.api + "/users", json={"email": "b@example.com", "display_name": "B"}, headers=keyed(realm, "k1")
        )
        assert reused.status_code == 422
        problem = reused.json()
        assert problem["code"] == "idempotency_key_reused"
        assert problem["errors"][0]["path"] == "header:Idempotency-Key"
        elsewhere = await client.post(realm.api + "/organizations", json={"name": "A"}, headers=keyed(realm, "k1"))
        assert elsewhere.status_code == 422 and elsewhere.json()["code"] == "idempotency_key_reused"
        assert await count(realm, "SELECT count(*) FROM users WHERE realm_id = :r", r=realm.id) == 2
        assert await count(realm, "SELECT count(*) FROM organizations WHERE realm_id = :r", r=realm.id) == 0
        # The same JSON value with its members in another order is the same request.
        same = await client.post(
            realm.api + "/users",
            content=b'{"display_name": "A", "email": "a@example.com"}',
            headers={**keyed(realm, "k1"), "Content-Type": "application/json"},
        )
        assert same.status_code == 201 and same.json() == made.json()

    async def test_keys_are_per_principal(self, client: Client, realm: RealmHandle) -> None:
        other_admin = await realm.user("other@example.com")
        await realm.assign(other_admin, await realm.builtin_role("realm-admin"))
        other_headers = {**bearer(await realm.token(other_admin)), "Idempotency-Key": "shared"}
        mine = await client.post(realm.api + "/organizations", json={"name": "Mine"}, headers=keyed(realm, "shared"))
        theirs = await client.post(realm.api + "/organizations", json={"name": "Theirs"}, headers=other_headers)
        assert mine.status_code == theirs.status_code == 201
        assert mine.json()["id"] != theirs.json()["id"]

    async def test_a_duplicate_while_the_first_is_in_flight_is_409(self, client: Client, realm: RealmHandle) -> None:
        body = {"name": "Acme"}
        in_flight = await client.post(realm.api + "/organizations", json=body, headers=keyed(realm, "busy"))
        assert in_flight.status_code == 201
        async with realm.sessions() as session, session.begin():
            await session.execute(text("UPDATE idempotency_keys SET state = 'in_flight', status = NULL, body = NULL"))
        duplicate = await client.post(realm.api + "/organizations", json=body, headers=keyed(realm, "busy"))
        assert duplicate.status_code == 409 and duplicate.json()["code"] == "idempotency_key_in_use"
        # A reservation left behind by a process that stopped is taken over after five minutes.
        await age_key(realm, "busy", idempotency.ABANDONED_AFTER - timedelta(seconds=1))
        still = await client.post(realm.api + "/organizations", json=body, headers=keyed(realm, "busy"))
        assert still.status_code == 409
        await age_key(realm, "busy", timedelta(seconds=1))
        taken_over = await client.post(
            realm.api + "/organizations", json={"name": "Acme 2"}, headers=keyed(realm, "busy")
        )
        assert taken_over.status_code == 422  # another body is never taken over
        retried = await client.post(realm.api + "/organizations", json=body, headers=keyed(realm, "busy"))
        assert retried.status_code == 409  # a second Acme: the conflict of the request itself

    async def test_an_answer_is_kept_24_hours(self, client: Client, realm: RealmHandle) -> None:
        made = await client.post(realm.api + "/organizations", json={"name": "Kept"}, headers=keyed(realm, "day"))
        async with realm.sessions() as session:
            window = await session.scalar(
                text("SELECT expires_at - created_at FROM idempotency_keys WHERE key = 'day'")
            )
        assert window == idempotency.WINDOW == timedelta(hours=24)
        await age_key(realm, "day", timedelta(hours=24) - timedelta(seconds=5))
        replay = await client.post(realm.api + "/organizations", json={"name": "Kept"}, headers=keyed(realm, "day"))
        assert replay.status_code == 201 and replay.json() == made.json()
        assert replay.headers["idempotent-replayed"] == "true"
        await age_key(realm, "day", timedelta(seconds=5))
        fresh = await client.post(realm.api + "/organizations", json={"name": "Kept"}, headers=keyed(realm, "day"))
        assert fresh.status_code == 409 and fresh.json()["code"] == "conflict"  # the request ran again
        assert "idempotent-replayed" not in fresh.headers

    async def test_expired_keys_are_swept_when_an_answer_is_kept(self, client: Client, realm: RealmHandle) -> None:
        await client.post(realm.api + "/organizations", json={"name": "Old"}, headers=keyed(realm, "old"))
        await age_key(realm, "old", timedelta(hours=24))
        await client.post(realm.api + "/organizations", json={"name": "New"}, headers=keyed(realm, "new"))
        async with realm.sessions() as session:
            keys = (await session.execute(text("SELECT key FROM idempotency_keys"))).scalars().all()
        assert keys == ["new"]

    async def test_a_conflict_is_not_kept_so_the_same_key_may_try_again(
        self, client: Client, realm: RealmHandle
    ) -> None:
        await client.post(realm.api + "/organizations", json={"name": "Taken"}, headers=realm.headers)
        clash = await client.post(realm.api + "/organizations", json={"name": "Taken"}, headers=keyed(realm, "c"))
        assert clash.status_code == 409
        assert await count(realm, "SELECT count(*) FROM idempotency_keys") == 0
        bad = await client.post(realm.api + "/organizations", json={"name": ""}, headers=keyed(realm, "v"))
        replay = await client.post(realm.api + "/organizations", json={"name": ""}, headers=keyed(realm, "v"))
        assert bad.status_code == replay.status_code == 422
        assert replay.headers["idempotent-replayed"] == "true"

    @pytest.mark.parametrize(
        ("key", "status"),
        [("k" * 255, 201), ('"' + "k" * 255 + '"', 201), ("k" * 256, 422), ("", 422), ("a b", 422), ('""', 422)],
    )
    async def test_the_key_is_1_to_255_visible_characters(
        self, client: Client, realm: RealmHandle, key: str, status: int
    ) -> None:
        response = await client.post(realm.api + "/organizations", json={"name": "K"}, headers=keyed(realm, key))
        assert response.status_code == status, response.text
        if status == 422:
            assert response.json()["errors"][0]["path"] == "header:Idempotency-Key"

    async def test_a_key_does_not_get_past_authorization(self, client: Client, realm: RealmHandle) -> None:
        reader = await realm.user("reader@example.com")
        headers = {**bearer(await realm.token(reader)), "Idempotency-Key": "x"}
        refused = await client.post(realm.api + "/organizations", json={"name": "No"}, headers=headers)
        assert refused.status_code == 403
        assert await count(realm, "SELECT count(*) FROM idempotency_keys") == 0


class TestEntityTags:
    async def test_get_has_an_etag_and_if_none_match_answers_304(self, client: Client, realm: RealmHandle) -> None:
        user = await realm.user("t@example.com")
        url = f"{realm.api}/users/{user.id}"
        first = await client.get(url, headers=realm.headers)
        tag = first.headers["etag"]
        assert tag.startswith('"') and tag.endswith('"')
        not_modified = await client.get(url, headers={**realm.headers, "If-None-Match": tag})
        assert not_modified.status_code == 304 and not_modified.content == b""
        assert not_modified.headers["etag"] == tag
        weak = await client.get(url, headers={**realm.headers, "If-None-Match": f'"other", W/{tag}'})
        assert weak.status_code == 304
        other = await client.get(url, headers={**realm.headers, "If-None-Match": '"other"'})
        assert other.status_code == 200 and other.json() == first.json()
        await client.patch(url, json={"display_name": "Changed"}, headers=realm.headers)
        changed = await client.get(url, headers={**realm.headers, "If-None-Match": tag})
        assert changed.status_code == 200 and changed.headers["etag"] != tag

    async def test_if_match_refuses_a_stale_write_with_412(self, client: Client, realm: RealmHandle) -> None:
        user = await realm.user("m@example.com")
        url = f"{realm.api}/users/{user.id}"
        tag = (await client.get(url, headers=realm.headers)).headers["etag"]
        first = await client.patch(url, json={"display_name": "One"}, headers={**realm.headers, "If-Match": tag})
        assert first.status_code == 200
        stale = await client.patch(url, json={"display_name": "Two"}, headers={**realm.headers, "If-Match": tag})
        assert stale.status_code == 412 and stale.json()["code"] == "precondition_failed"
        assert (await client.get(url, headers=realm.headers)).json()["display_name"] == "One"
        weak = await client.patch(url, json={"display_name": "Two"}, headers={**realm.headers, "If-Match": "W/" + tag})
        assert weak.status_code == 412  # If-Match compares strongly
        anything = await client.patch(url, json={"display_name": "Three"}, headers={**realm.headers, "If-Match": "*"})
        assert anything.status_code == 200

    async def test_if_match_on_put_and_delete(self, client: Client, realm: RealmHandle) -> None:
        hook = (
            await client.post(
                realm.api + "/webhooks",
                json={"destination": "http://127.0.0.1:9/h", "allow_private_network": True},
                headers=realm.headers,
            )
        ).json()
        url = f"{realm.api}/webhooks/{hook['id']}"
        stale = await client.delete(url, headers={**realm.headers, "If-Match": '"stale"'})
        assert stale.status_code == 412
        tag = (await client.get(url, headers=realm.headers)).headers["etag"]
        assert (await client.delete(url, headers={**realm.headers, "If-Match": tag})).status_code == 204
        template = f"{realm.api}/templates/workflow_notice"
        current = await client.get(template, headers=realm.headers)
        body = {"subject": "Hello", "body": "Hi"}
        refused = await client.put(template, json=body, headers={**realm.headers, "If-Match": '"stale"'})
        assert refused.status_code == 412
        saved = await client.put(template, json=body, headers={**realm.headers, "If-Match": current.headers["etag"]})
        assert saved.status_code == 200, saved.text

    async def test_if_match_on_something_that_is_not_there_is_its_404(self, client: Client, realm: RealmHandle) -> None:
        missing = await client.patch(
            f"{realm.api}/users/usr_00000000000000000000000000",
            json={"display_name": "X"},
            headers={**realm.headers, "If-Match": '"x"'},
        )
        assert missing.status_code == 404


class TestLocation:
    async def test_every_201_and_202_route_declares_where_its_answer_lives(self, app: Litestar) -> None:
        missing = []
        for route in app.routes:
            for handler in getattr(route, "route_handlers", []):
                statuses = {handler.status_code, *(getattr(handler, "responses", None) or {})}
                if route.path.startswith("/api/") and statuses & {201, 202} and "location" not in handler.opt:
                    missing.append(handler.operation_id)
        assert missing == []

    async def test_created_and_accepted_answers_carry_location(self, client: Client, realm: RealmHandle) -> None:
        org = await client.post(realm.api + "/organizations", json={"name": "Loc"}, headers=realm.headers)
        assert org.headers["location"] == f"{realm.api}/organizations/{org.json()['id']}"
        assert (await client.get(org.headers["location"], headers=realm.headers)).json() == org.json()
        group = await client.post(org.headers["location"] + "/groups", json={"name": "G"}, headers=realm.headers)
        assert (await client.get(group.headers["location"], headers=realm.headers)).json() == group.json()
        subject = await realm.user("loc@example.com")
        member = await client.post(
            org.headers["location"] + "/members", json={"user_id": subject.id}, headers=realm.headers
        )
        assert member.headers["location"] == f"{org.headers['location']}/members/{subject.id}"
        wid = await publish(
            realm, {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "d", "type": "end"}]}
        )
        run = await client.post(
            f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
        )
        assert run.status_code == 202
        assert run.headers["location"] == f"{realm.api}/workflow-runs/{run.json()['id']}"
        assert (await client.get(run.headers["location"], headers=realm.headers)).status_code == 200
        revision = await client.post(
            f"{realm.api}/workflows/{wid}/revisions",
            json={
                "definition": {
                    "schema_version": 1,
                    "triggers": [{"type": "manual"}],
                    "steps": [{"id": "e", "type": "end"}],
                }
            },
            headers=realm.headers,
        )
        assert revision.status_code == 201, revision.text
        assert revision.headers["location"] == f"{realm.api}/workflows/{wid}/revisions/2"

    async def test_a_role_that_needs_approval_points_at_its_approval(self, client: Client, realm: RealmHandle) -> None:
        approver, _ = await independent_admin(realm, "approver@example.com")  # nobody the requester made
        subject = await realm.user("gated@example.com")
        gated = await realm.role("gated", ["realm.users.read"], requires_approval=True)
        pending = await client.post(
            realm.api + "/role-assignments",
            json={"role_id": gated.id, "user_id": subject.id, "approver_id": approver.id},
            headers=realm.headers,
        )
        assert pending.status_code == 202, pending.text
        assert pending.headers["location"] == f"{realm.api}/approvals/{pending.json()['approval']['id']}"
        as_approver = bearer(await realm.token(approver, audience="account"))
        assert (await client.get(pending.headers["location"], headers=as_approver)).status_code == 200
