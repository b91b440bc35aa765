"""``/metrics``: Prometheus text format (parsed by prometheus_client), labels, gauges, the token."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from typing import Any

from litestar.testing import AsyncTestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from cockpit.app import create_app
from engine.platform.config import Settings
from engine.runs.runner import Runner, RunnerSettings
from testing.diagnostics import Team, compensation_failed_run
from testing.factories import RealmHandle
from testing.pages import Client
from testing.runs import start

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of the exposition, keyed by name and sorted labels (the parser refuses bad text)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def scrape(client: Client, headers: dict[str, str] | None = None) -> Samples:
    response = await client.get("/metrics", headers=headers or {})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


def failed_jobs(found: Samples) -> float:
    return found[("cockpit_jobs_failed_total", (("type", "workflow"),))]


async def test_request_metrics_carry_route_templates_never_realm_data(client: Client, realm: RealmHandle) -> None:
    for _ in range(3):
        assert (await client.get(f"{realm.api}/workflows", headers=realm.headers)).status_code == 200
    assert (
        await client.get(f"{realm.api}/workflows/wfl_00000000000000000000000000", headers=realm.headers)
    ).status_code == 404
    found = await scrape(client)
    route = "/api/v1/realms/{realm}/workflows"
    key = ("cockpit_http_requests_total", (("method", "GET"), ("route", route), ("status", "200")))
    assert found[key] >= 3
    assert found[("cockpit_http_request_duration_seconds_count", key[1])] >= 3
    assert (
        found[
            ("cockpit_http_requests_total", (("method", "GET"), ("route", route + "/{workflow_id}"), ("status", "404")))
        ]
        >= 1
    )
    for (_name, labels), _value in found.items():
        for label, value in labels:
            assert realm.slug not in value and "wfl_" not in value, (label, value)


async def test_gauges_come_from_the_database(client: Client, realm: RealmHandle) -> None:
    team = await Team.make(realm)
    started = [await start(realm, team.workflow_id, (await team.subject(member)).id) for member in (True, True, False)]
    before = time.monotonic()
    async with realm.sessions() as session, session.begin():  # the oldest has waited ten minutes
        await session.execute(
            text("UPDATE workflow_runs SET due_at = now() - interval '600 seconds' WHERE id = :r"), {"r": started[0]}
        )
    found = await scrape(client)
    waited = time.monotonic() - before
    r = ("realm_id", realm.id)
    assert found[("cockpit_runs", (r, ("state", "pending")))] == 3
    assert found[("cockpit_runs", (r, ("state", "running")))] == 0
    assert found[("cockpit_runs_due", (r,))] == 3
    assert 600 <= found[("cockpit_oldest_due_run_age_seconds", (r,))] <= 600 + waited
    assert found[("cockpit_approvals_pending", ())] == 0
    assert found[("cockpit_webhook_deliveries_failing", ())] == 0

    runner = Runner(realm.sessions, "worker-metrics-1-aaaa", settings=RunnerSettings(lease=timedelta(seconds=30)))
    for _ in range(20):
        if not await runner.run_pass():
            break
    found = await scrape(client)
    assert found[("cockpit_runs", (r, ("state", "pending")))] == 0
    assert found[("cockpit_runs_due", (r,))] == 0
    assert found[("cockpit_oldest_due_run_age_seconds", (r,))] == 0
    assert found[("cockpit_runs_finished_24h", (r, ("state", "succeeded")))] == 2
    assert found[("cockpit_runs_finished_24h", (r, ("state", "failed")))] == 1


async def test_the_failed_jobs_counter_counts_runs_ending_failed_compensated_or_compensation_failed(
    client: Client, realm: RealmHandle
) -> None:
    team = await Team.make(realm)
    runner = Runner(realm.sessions, "worker-metrics-2-aaaa", settings=RunnerSettings(lease=timedelta(seconds=30)))
    before = failed_jobs(await scrape(client))
    await team.run(True, runner)
    assert failed_jobs(await scrape(client)) == before  # a success is not counted
    await team.run(False, runner)
    assert failed_jobs(await scrape(client)) == before + 1  # failed
    await compensation_failed_run(realm)
    assert failed_jobs(await scrape(client)) == before + 2  # compensation_failed


async def test_a_metrics_token_is_required_when_set(settings: Settings, database_url: str) -> None:
    app = create_app(dataclasses.replace(settings, metrics_token="s3cret-metrics-token"), database_url=database_url)
    async with AsyncTestClient(app=app) as client:
        missing = await client.get("/metrics")
        assert missing.status_code == 401 and missing.json()["code"] == "unauthorized"
        wrong: Any = await client.get("/metrics", headers={"Authorization": "Bearer s3cret-metrics-tokem"})
        assert wrong.status_code == 401
        basic = await client.get("/metrics", headers={"Authorization": "Basic s3cret-metrics-token"})
        assert basic.status_code == 401
        assert (
            "cockpit_runs"
            in (await client.get("/metrics", headers={"Authorization": "Bearer s3cret-metrics-token"})).text
        )


async def test_metrics_are_open_without_a_token(client: Client) -> None:
    response = await client.get("/metrics")
    assert response.status_code == 200 and "cockpit_jobs_failed_total" in response.text
