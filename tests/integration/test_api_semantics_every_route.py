"""Idempotency keys, entity tags, conditional writes and ``Location`` on every route of the app.

The routes are read from the application itself, so a route added later is covered (or, when this
file cannot build a request for it, makes a test fail) without anyone remembering to list it.
The behaviour of each rule in detail is in tests/integration/test_api_http_semantics.py.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.api.http_semantics import REALM_PREFIX
from testing.factories import RealmHandle, independent_admin

Client = AsyncTestClient[Litestar]
REALM_ROUTE = REALM_PREFIX + "{realm:str}"
# A well-formed id per path parameter that names nothing: the handler answers its own 404.
ABSENT = {
    "approval_id": "wap_00000000000000000000000000",
    "org_id": "org_00000000000000000000000000",
    "group_id": "grp_00000000000000000000000000",
    "user_id": "usr_00000000000000000000000000",
    "role_id": "rol_00000000000000000000000000",
    "assignment_id": "ras_00000000000000000000000000",
    "sp_id": "spn_00000000000000000000000000",
    "webhook_id": "whk_00000000000000000000000000",
    "delivery_id": "wdl_00000000000000000000000000",
    "run_id": "wrn_00000000000000000000000000",
    "workflow_id": "wfl_00000000000000000000000000",
    "token_id": "tok_00000000000000000000000000",
    "n": "1",
    "name": "workflow_notice",
}


# Reads whose answer carries the moment it was made (``generated_at``).
MOMENTARY = {REALM_ROUTE + "/workflows/{workflow_id:str}/diagnostics"}


def routes(app: Litestar, *methods: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, path template, opt) of every realm route of the JSON API answering one of ``methods``."""
    for route in app.routes:
        if not route.path.startswith(REALM_ROUTE):
            continue
        for handler in getattr(route, "route_handlers", []):
            for method in sorted(handler.http_methods & set(methods)):
                yield method, route.path, dict(handler.opt)


def fill(template: str, realm: RealmHandle, ids: dict[str, str]) -> str:
    """The path of ``template`` (``/api/v1/realms/{realm:str}/users/{user_id:str}``) with ``ids`` put in."""

    def put_in(found: re.Match[str]) -> str:
        assert found[1] in ids, f"no id for {{{found[1]}}} in {template}: add one to this test"
        return ids[found[1]]

    return realm.api + re.sub(r"\{(\w+)(?::\w+)?\}", put_in, template.removeprefix(REALM_ROUTE))


async def kept_keys(realm: RealmHandle, key: str) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text("SELECT count(*) FROM idempotency_keys WHERE key = :k"), {"k": key}) or 0)


async def test_every_post_that_creates_or_acts_keeps_replays_and_guards_its_key(
    app: Litestar, client: Client, realm: RealmHandle
) -> None:
    acting = [(path, opt) for _, path, opt in routes(app, "POST") if not opt.get("reads_only")]
    reading = [path for _, path, opt in routes(app, "POST") if opt.get("reads_only")]
    assert len(acting) >= 30 and reading == [REALM_ROUTE + "/workflows/validate"]
    for number, (template, _) in enumerate(acting):
        url, key = fill(template, realm, ABSENT), f"every-route-{number}"
        headers = {**realm.headers, "Idempotency-Key": key}
        first = await client.post(url, json={}, headers=headers)
        assert first.status_code < 500 and first.status_code not in (409, 429), (template, first.text)
        again = await client.post(url, json={}, headers=headers)
        assert again.status_code == first.status_code and again.content == first.content, template
        assert again.headers.get("idempotent-replayed") == "true", template
        assert "idempotent-replayed" not in first.headers, template
        other = await client.post(url, json={"other": True}, headers=headers)
        assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused", (template, other.text)
        async with realm.sessions() as session, session.begin():
            await session.execute(
                text("UPDATE idempotency_keys SET state = 'in_flight', status = NULL, body = NULL WHERE key = :k"),
                {"k": key},
            )
        busy = await client.post(url, json={}, headers=headers)
        assert busy.status_code == 409 and busy.json()["code"] == "idempotency_key_in_use", (template, busy.text)
    # A request that only reads takes no key: nothing is kept, and the same key runs it again.
    validate = fill(reading[0], realm, ABSENT)
    headers = {**realm.headers, "Idempotency-Key": "reads"}
    for body in ({"definition": {}}, {"definition": {"schema_version": 1}}):
        answer = await client.post(validate, json=body, headers=headers)
        assert answer.status_code == 200 and "idempotent-replayed" not in answer.headers
    assert await kept_keys(realm, "reads") == 0


async def world(client: Client, realm: RealmHandle) -> tuple[dict[str, str], dict[str, str]]:
    """One of everything a path can name, made through the API: the ids, and the approver's headers."""
    api, headers = realm.api, realm.headers

    async def made(path: str, body: Any, status: int = 201) -> Any:
        answer = await client.post(api + path, json=body, headers=headers)
        assert answer.status_code == status, (path, answer.text)
        return answer.json()

    user = await made("/users", {"email": "every@example.com", "display_name": "Every"})
    approver, as_approver = await independent_admin(realm, "every-approver@example.com")
    sp = await made("/service-principals", {"name": "every-bot"})
    sp_token = await made(f"/service-principals/{sp['id']}/tokens", {"name": "every"})
    org = await made("/organizations", {"name": "Every"})
    await made(f"/organizations/{org['id']}/members", {"user_id": user["id"]})
    role = await made("/roles", {"name": "every-reader", "permissions": ["realm.users.read"], "boundary": "realm"})
    group = await made(f"/organizations/{org['id']}/groups", {"name": "Everyone"})
    await made(f"/organizations/{org['id']}/groups/{group['id']}/members", {"user_id": user["id"]})
    assignment = await made("/role-assignments", {"role_id": role["id"], "user_id": user["id"]})
    gated = await made(
        "/roles",
        {"name": "every-gated", "permissions": ["realm.users.read"], "boundary": "realm", "requires_approval": True},
    )
    pending = await made(
        "/role-assignments", {"role_id": gated["id"], "user_id": user["id"], "approver_id": approver.id}, 202
    )
    hook = await made("/webhooks", {"destination": "https://hooks.example.com/every"})
    definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    workflow = await made("/workflows", {"name": "Every", "definition": definition})
    await made(f"/workflows/{workflow['id']}/revisions/1/publish", {}, 200)
    run = await made(f"/workflows/{workflow['id']}/runs", {"subject_id": user["id"]}, 202)
    ids = {
        "approval_id": pending["approval"]["id"],
        "org_id": org["id"],
        "group_id": group["id"],
        "user_id": user["id"],
        "role_id": role["id"],
        "assignment_id": assignment["id"],
        "sp_id": sp["id"],
        "webhook_id": hook["id"],
        "run_id": run["id"],
        "workflow_id": workflow["id"],
        "token_id": sp_token["id"],
        "n": "1",
        "name": "workflow_notice",
    }
    return ids, as_approver


async def test_every_get_answers_an_etag_and_304_for_it(app: Litestar, client: Client, realm: RealmHandle) -> None:
    ids, as_approver = await world(client, realm)
    reads = [path for _, path, _ in routes(app, "GET")]
    assert len(reads) >= 30
    for template in reads:
        url = fill(template, realm, ids)
        headers = as_approver if "/approvals" in template else realm.headers
        if template.endswith("/diff"):
            url += "?against=1"
        first = await client.get(url, headers=headers)
        assert first.status_code == 200, (template, first.text)
        tag = first.headers.get("etag", "")
        assert tag.startswith('"') and tag.endswith('"') and len(tag) > 2, template
        other = await client.get(url, headers={**headers, "If-None-Match": '"other"'})
        assert other.status_code == 200 and other.headers["etag"].startswith('"'), template
        if template in MOMENTARY:
            # It says when it was made, so each answer is another representation: only * matches.
            assert other.headers["etag"] != tag, template
            tag = "*"
        same = await client.get(url, headers={**headers, "If-None-Match": tag})
        assert same.status_code == 304 and same.content == b"" and same.headers["etag"].startswith('"'), template


async def test_every_patch_put_and_delete_refuses_a_stale_if_match_with_412(
    app: Litestar, client: Client, realm: RealmHandle
) -> None:
    ids, _ = await world(client, realm)
    writes = list(routes(app, "PATCH", "PUT", "DELETE"))
    readable = {path for _, path, _ in routes(app, "GET")}
    assert len(writes) >= 15
    for method, template, _ in writes:
        url = fill(template, realm, ids)
        before = await client.get(url, headers=realm.headers) if template in readable else None
        stale = await client.request(method, url, json={}, headers={**realm.headers, "If-Match": '"stale"'})
        assert stale.status_code == 412 and stale.json()["code"] == "precondition_failed", (method, template)
        if before is not None:
            after = await client.get(url, headers=realm.headers)
            assert after.status_code == 200 and after.headers["etag"] == before.headers["etag"], (method, template)
    # With the current tag the change goes ahead (an empty PATCH changes nothing, yet is not refused).
    for method, template, _ in writes:
        if method != "PATCH":
            continue
        url = fill(template, realm, ids)
        tag = (await client.get(url, headers=realm.headers)).headers["etag"]
        current = await client.patch(url, json={}, headers={**realm.headers, "If-Match": tag})
        assert current.status_code in (200, 422), (template, current.text)  # 422: a member it needs


async def test_every_201_and_202_location_names_members_the_answer_has(app: Litestar, client: Client) -> None:
    """A declared ``Location`` is filled from the path and the answer: each name in it must be one of them."""
    document = (await client.get("/schema/openapi.json")).json()
    schemas = document["components"]["schemas"]
    checked = 0
    for _, template, opt in routes(app, "POST"):
        declared = opt.get("location")
        if declared is None:
            continue
        by_status = declared if isinstance(declared, dict) else {201: declared, 202: declared}
        path = template.replace(":str", "").replace(":int", "")
        answers = document["paths"][path]["post"]["responses"]
        for status, location in by_status.items():
            if str(status) not in answers:
                continue
            assert "Location" in answers[str(status)]["headers"], (template, status)
            ref = answers[str(status)]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
            members = set(schemas[ref]["properties"])
            params = set(re.findall(r"\{(\w+)\}", path))
            for _, field, _, _ in string.Formatter().parse(location):
                if field:
                    assert field.split("[")[0] in members | params, (template, field, ref)
            checked += 1
    assert checked >= 15
