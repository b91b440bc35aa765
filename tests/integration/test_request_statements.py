"""What a request costs the database: one session, no pre-ping, a few queries.

The guard sends one statement (the credential, its holder, realm and authorization epochs); the
caller's authority is kept by the process while those epochs stand. A route that writes runs its
handler in one transaction; a route that only reads (``reads_only``) sends its queries without
transaction control. Each request below is made
twice to warm the pool (connections, prepared statements), then once more while every statement
the app's engine sends is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.state import context_of
from engine.directory import credentials
from testing.factories import HTML, RealmHandle, bearer
from testing.pages import signed_in
from testing.runs import drain_realm, start
from testing.statements import StatementLog, recording
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


@dataclass(frozen=True)
class Read:
    name: str
    path: str  # relative to the realm: {api} or {page} prefix
    browser: bool
    max_queries: int


READS = [
    # The credential with its holder, realm and epochs: one query before the handler's (the
    # authority was read by the warm-up requests and is kept while the epochs stand).
    Read("run list (API)", "{api}/workflow-runs", browser=False, max_queries=2),
    Read("run list (page)", "{page}/runs", browser=True, max_queries=4),
    # One more for the run's approval records (who may decide, until when).
    Read("run timeline (page)", "{page}/runs/{run}", browser=True, max_queries=5),
    # + 2: the published workflows with the open compensation failures, and (unless cached) their health.
    Read("realm home (page)", "{page}/", browser=True, max_queries=7),
    Read("workflow list (API)", "{api}/workflows", browser=False, max_queries=2),
    # + 1: the health badge of every row, in one statement (none while cached); + 1: the revisions of
    # the listed workflows that wait for the reader's review.
    Read("workflow list (page)", "{page}/workflows", browser=True, max_queries=5),
]


async def measure(client: Client, app: Litestar, url: str, headers: dict[str, str]) -> StatementLog:
    with recording(context_of(app).db) as log:
        for _ in range(2):  # warm: the pool's connections and their prepared statements
            warm = await client.get(url, headers=headers)
            assert warm.status_code == 200, warm.text
        log.clear()
        response = await client.get(url, headers=headers)
        assert response.status_code == 200, response.text
    return log


@pytest.mark.parametrize("read", READS, ids=[r.name for r in READS])
async def test_a_read_sends_its_queries_alone(client: Client, app: Litestar, realm: RealmHandle, read: Read) -> None:
    login = await signed_in(client, realm)
    grace = await realm.user("grace@example.com")
    workflow_id = await publish(
        realm,
        manual({"id": "first", "type": "end"}),
        "Onboarding",
    )
    run_ids = [await start(realm, workflow_id, grace.id) for _ in range(3)]
    await drain_realm(realm)
    url = read.path.format(api=realm.api, page=f"/realms/{realm.slug}", run=run_ids[0])
    headers = HTML if read.browser else bearer(realm.admin_token)
    if not read.browser:
        client.cookies.clear()
    assert login.cookie

    log = await measure(client, app, url, headers)

    print(f"{read.name}: {log.summary()}")
    assert log.control == []  # no pre-ping, no BEGIN/COMMIT around reads
    assert len(log.queries) <= read.max_queries, log.queries


async def test_a_write_is_one_transaction_after_the_guard_s_one_statement(
    client: Client, app: Litestar, realm: RealmHandle
) -> None:
    url = f"{realm.api}/workflows"
    with recording(context_of(app).db) as log:
        for i in range(2):
            warm = await client.post(url, json={"name": f"Warm {i}"}, headers=realm.headers)
            assert warm.status_code == 201, warm.text
        log.clear()
        response = await client.post(url, json={"name": "Offboarding"}, headers=realm.headers)
        assert response.status_code == 201, response.text
    print(f"create workflow (API): {log.summary()}")
    assert log.pings == 0
    assert [s.strip().split()[0].rstrip(";").upper() for s in log.control] == ["BEGIN", "COMMIT"]
    # The guard's one statement (sent before BEGIN, on the same connection), then the handler's.
    assert log.queries[0] == credentials.TOKEN_SQL.sql
    assert credentials.TOKEN_SQL.sql not in log.queries[1:]


async def test_validating_a_definition_resolves_its_references_in_one_query(
    client: Client, app: Litestar, realm: RealmHandle
) -> None:
    role = await realm.role("reader", ["realm.workflows.read"], boundary="organization")
    approver = await realm.user("ada@example.com")
    org = await realm.organization("Engineering")
    steps: list[dict[str, object]] = [
        {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "72h"},
        *(
            {
                "id": f"grant-{i}",
                "type": "assign_role",
                "role_id": role.id,
                "scope": "organization",
                "organization_id": org.id,
            }
            for i in range(18)
        ),
        {"id": "done", "type": "end"},
    ]
    body = {"definition": {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps}}
    url = f"{realm.api}/workflows/validate"
    with recording(context_of(app).db) as log:
        for _ in range(2):
            warm = await client.post(url, json=body, headers=realm.headers)
            assert warm.json() == {"valid": True, "errors": []}, warm.text
        log.clear()
        response = await client.post(url, json=body, headers=realm.headers)
        assert response.json() == {"valid": True, "errors": []}
        # A reference that is not there is still reported, through the same one query.
        missing = {**body["definition"], "steps": [{**steps[1], "role_id": "rol_missing"}, steps[-1]]}
        refused = await client.post(url, json={"definition": missing}, headers=realm.headers)
    print(f"validate: {log.summary()}")
    assert refused.status_code == 200
    assert refused.json()["valid"] is False
    assert [e["path"] for e in refused.json()["errors"]] == ["/definition/steps/0/role_id"]
    assert log.control == []  # validating writes nothing: no transaction control
    # Per request: the credential and the references (the authority is kept).
    assert len(log.queries) == 4, log.queries
    assert log.queries[0::2] == [credentials.TOKEN_SQL.sql] * 2


async def test_a_failed_request_still_records_that_its_token_was_used(client: Client, realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE api_tokens SET last_used_at = now() - interval '1 hour' WHERE realm_id = :r"), {"r": realm.id}
        )
    # The handler fails (no such run): the request's transaction rolls back, the mark stays.
    response = await client.post(f"{realm.api}/workflow-runs/wrn_missing/cancel", headers=realm.headers)
    assert response.status_code == 404
    async with realm.sessions() as session:
        age = await session.scalar(
            text("SELECT now() - last_used_at < interval '5 minutes' FROM api_tokens WHERE realm_id = :r"),
            {"r": realm.id},
        )
    assert age is True


async def test_a_refused_request_still_records_that_its_session_was_used(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE sessions SET last_seen_at = now() - interval '10 minutes' WHERE id = :s"),
            {"s": login.session_id},
        )
    # The guard refuses (another realm's page is not found): nothing but the mark is kept.
    response = await client.get("/realms/no-such-realm/runs", headers=HTML)
    assert response.status_code == 404
    async with realm.sessions() as session:
        recent = await session.scalar(
            text("SELECT now() - last_seen_at < interval '5 minutes' FROM sessions WHERE id = :s"),
            {"s": login.session_id},
        )
    assert recent is True
