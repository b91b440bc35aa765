from __future__ import annotations

import logging
from importlib import metadata

import pytest
from litestar import Litestar, get
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.app import create_app
from engine.platform.config import Settings
from engine.platform.migrate import head_revision
from testing.factories import make_worker_heartbeat


async def test_healthz_answers_while_the_process_is_up_with_its_version(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": metadata.version("lifecycle-cockpit")}


async def test_readyz_needs_a_worker_heartbeat(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["migrations"]["ok"] is True
    assert body["checks"]["worker"]["ok"] is False


async def test_readyz_is_ready_with_a_fresh_heartbeat(client: AsyncTestClient[Litestar], db: AsyncSession) -> None:
    await make_worker_heartbeat(db)
    response = await client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ready"


async def test_readyz_refuses_a_heartbeat_older_than_30_seconds(
    client: AsyncTestClient[Litestar], db: AsyncSession
) -> None:
    await make_worker_heartbeat(db, age_seconds=31)
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["worker"]["last_heartbeat_age_s"] >= 31


async def test_readyz_reports_migrations_behind_head(client: AsyncTestClient[Litestar], db: AsyncSession) -> None:
    from sqlalchemy import text

    await make_worker_heartbeat(db)
    await db.execute(text("UPDATE alembic_version SET version_num = 'older'"))
    await db.commit()
    response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == {"ok": False, "current": "older", "head": head_revision()}


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [("GET", "/api/v1/nothing-here", 404, "not_found"), ("DELETE", "/healthz", 405, "method_not_allowed")],
)
async def test_routing_errors_are_problem_details(
    client: AsyncTestClient[Litestar], method: str, path: str, status: int, code: str
) -> None:
    response = await client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status and body["code"] == code
    assert {"type", "title", "detail"} <= body.keys()


async def test_unexpected_errors_are_500_problems_without_a_stack_trace(
    settings: Settings, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    @get("/api/v1/boom", operation_id="boom")
    async def boom() -> None:
        raise RuntimeError("secret internal detail")

    app = create_app(settings, database_url=database_url)
    app.register(boom)
    with caplog.at_level(logging.ERROR, logger="cockpit.errors"):
        async with AsyncTestClient(app=app) as client:
            response = await client.get("/api/v1/boom")
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "internal_error"
    assert "secret internal detail" not in response.text
    assert "Traceback" not in response.text
    assert any("unhandled error" in r.getMessage() for r in caplog.records)  # logged for operators


async def test_pages_get_an_html_error_page(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/no-such-page", headers={"accept": "text/html"})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "404" in response.text


async def test_every_request_gets_a_request_id_in_the_header_and_the_log(
    client: AsyncTestClient[Litestar], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="cockpit.access"):
        response = await client.get("/healthz")
        given = await client.get("/healthz", headers={"x-request-id": "abc-123-given-id"})
    request_id = response.headers["x-request-id"]
    assert request_id.startswith("req_")
    # The caller's id is kept for the logs in its own field; the request id is always ours.
    own = given.headers["x-request-id"]
    assert own.startswith("req_") and own != request_id
    access = [r for r in caplog.records if r.name == "cockpit.access"]
    logged = [(getattr(r, "request_id", None), getattr(r, "client_request_id", None)) for r in access]
    assert (request_id, None) in logged and (own, "abc-123-given-id") in logged


async def test_openapi_document_is_served(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/schema/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert "/healthz" in paths and "/readyz" in paths


async def test_home_page_has_the_layout_and_vendored_htmx(client: AsyncTestClient[Litestar]) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert '<nav class="nav"' in page.text and "/static/vendor/htmx.min.js" in page.text
    script = await client.get("/static/vendor/htmx.min.js")
    assert script.status_code == 200 and "htmx" in script.text[:2000]
