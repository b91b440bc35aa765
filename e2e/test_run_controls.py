"""The operator's run controls in Chromium against a live server and worker: re-run, retry now,
bulk cancel with checkboxes and "all matching the filter", and a schedule fired by the worker."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from playwright.sync_api import Page, expect
from sqlalchemy import text

from e2e.helpers import (
    FINISH_TIMEOUT,
    LiveServer,
    Setup,
    admin_of,
    in_database,
    publish,
    setup_realm,
    sign_in,
    subject_id,
)
from e2e.pages import RunsPage, TimelinePage
from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.platform.ids import new_id
from engine.runs import controls as run_controls
from engine.runs import service as runs


def start(live_server: LiveServer, setup: Setup, workflow_id: str) -> str:
    response = setup.api.post(f"/workflows/{workflow_id}/runs", json={"subject_id": subject_id(live_server, setup)})
    assert response.status_code == 202, response.text
    run_id: str = response.json()["id"]
    return run_id


def test_rerun_and_retry_now_from_the_timeline(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "controls")
    workflow_id = publish(
        setup,
        "Granter",
        [
            {
                "id": "grant",
                "type": "assign_role",
                "role_id": setup.role_id,
                "scope": "realm",
                "retry": {"max_attempts": 3, "backoff": "1h"},
            },
            {"id": "done", "type": "end"},
        ],
    )
    sign_in(live_server, page, setup)

    # Re-run: a finished run offers it; the new run links back, and the original links to it.
    repeatable = publish(setup, "Repeatable", [{"id": "done", "type": "end"}])
    original = start(live_server, setup, repeatable)
    timeline = TimelinePage(page, setup.realm).open(original)
    timeline.follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)
    page.get_by_test_id("rerun").click()
    expect(page).to_have_url(re.compile(r"done=rerun-started"))
    timeline.wait_until_open()
    assert timeline.run_id != original
    expect(timeline.message).to_contain_text("Re-run started")
    expect(page.get_by_test_id("rerun-of")).to_have_text(original)
    timeline.follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)
    again = timeline.run_id
    page.get_by_test_id("rerun-of").click()
    expect(page.get_by_test_id("rerun-as")).to_have_text(again)

    # Retry now: a run whose step failed and waits an hour for its next attempt.
    due = datetime.now(UTC) + timedelta(hours=1)

    async def waiting_run(session: Any) -> str:
        admin = await admin_of(session, setup.realm, setup.admin_email)
        actor = Actor(type="user", id=admin.id, realm_id=admin.realm_id)
        subject = await user_by_email(session, admin.realm_id, setup.subject_email)
        assert subject is not None
        await session.execute(text("DELETE FROM role_assignments WHERE user_id = :u"), {"u": subject.id})
        run = await runs.start_manual_run(session, actor, workflow_id, subject_id=subject.id, organization_id=None)
        # What the runner leaves after a transient failure, written in the run's own transaction so
        # the live worker never sees the run before: running, one failed attempt, due in an hour.
        await session.execute(
            text(
                "UPDATE workflow_runs SET state = 'running', due_at = :due, error_category = 'error',"
                " last_error = 'the directory did not answer' WHERE id = :r"
            ),
            {"due": due, "r": run.id},
        )
        await session.execute(
            text(
                "INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number,"
                " idempotency_key, state, input, input_version, error_category, error_message, max_attempts,"
                " backoff_ms, compensation_strategy, compensation_attempts, started_at, finished_at)"
                " VALUES (:id, :r, :realm, 'grant', 0, 'assign_role', 1, :key, 'failed', '{}'::jsonb,"
                " 'r1:0123456789abcdef:i1', 'error', 'the directory did not answer', 3, 3600000, 'none', 0,"
                " now(), now())"
            ),
            {"id": new_id("wsa"), "r": run.id, "realm": admin.realm_id, "key": f"{run.id}.grant"},
        )
        return str(run.id)

    waiting = in_database(live_server, waiting_run)
    timeline.open(waiting)
    box = page.get_by_test_id("retry-wait")
    expect(box).to_contain_text("Waiting for a retry")
    expect(box).to_contain_text(due.strftime("%Y-%m-%d %H:%M"))
    expect(box).to_contain_text("the directory did not answer")
    page.get_by_test_id("retry-now").click()
    expect(timeline.message).to_contain_text("The retry is due now")
    timeline.follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)  # the live worker took it at once
    expect(timeline.attempts("grant")).to_have_count(2)
    expect(page.get_by_test_id("retry-wait")).to_have_count(0)


def test_bulk_cancel_ticked_runs_then_all_matching_the_filter(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "bulk")
    workflow_id = publish(setup, "Paused", [{"id": "done", "type": "end"}])

    async def paused_runs(session: Any) -> list[str]:
        admin = await admin_of(session, setup.realm, setup.admin_email)
        actor = Actor(type="user", id=admin.id, realm_id=admin.realm_id)
        subject = await user_by_email(session, admin.realm_id, setup.subject_email)
        assert subject is not None
        made = []
        for _ in range(3):
            run = await runs.start_manual_run(session, actor, workflow_id, subject_id=subject.id, organization_id=None)
            made.append(str(run.id))
        await run_controls.set_workflow_enabled(session, actor, workflow_id, False)  # they stay pending
        return made

    first, second, third = in_database(live_server, paused_runs)
    sign_in(live_server, page, setup)
    listed = RunsPage(page, setup.realm).open(workflow_id=workflow_id)
    expect(listed.rows).to_have_count(3)
    listed.row(first).get_by_test_id("pick-run").check()
    listed.row(second).get_by_test_id("pick-run").check()
    page.get_by_text("Act on several runs…").click()
    page.get_by_test_id("action-cancel").check()
    page.get_by_label("Reason for cancelling").fill("imported twice")
    page.get_by_test_id("bulk-submit").click()
    progress = page.get_by_test_id("bulk-progress")
    expect(progress).to_have_attribute("data-finished", "true")
    expect(progress.get_by_test_id("bulk-count")).to_have_text("2 of 2")
    expect(progress.get_by_test_id("bulk-done")).to_have_text("2")

    # Everything in flight, by the filter: the two asked to cancel already are refused, the third is cancelled.
    listed.filter_state("group:in_flight")
    expect(listed.rows).to_have_count(3)
    page.get_by_test_id("scope-filter").check()
    page.get_by_test_id("action-cancel").check()
    page.get_by_test_id("bulk-submit").click()
    expect(progress.get_by_test_id("bulk-count")).to_have_text("3 of 3")
    expect(progress.get_by_test_id("bulk-done")).to_have_text("1")
    expect(progress.get_by_test_id("bulk-refused")).to_have_text("2")
    expect(page.get_by_test_id("bulk-refused-row")).to_have_count(2)
    expect(page.get_by_test_id("bulk-refused-row").first).to_contain_text("conflict")

    # The worker carries the cancellations out even though the workflow is disabled.
    timeline = TimelinePage(page, setup.realm).open(third)
    timeline.follow_to("cancelled", timeout_ms=FINISH_TIMEOUT)


def test_a_schedule_fires_in_the_worker_and_the_workflow_shows_it(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "sched")
    definition = {
        "schema_version": 1,
        "triggers": [
            {
                "type": "schedule",
                "every": "24h",
                "select": {"type": "organization_members", "organization_id": setup.org_id},
            }
        ],
        "steps": [{"id": "done", "type": "end"}],
    }
    created = setup.api.post("/workflows", json={"name": "Nightly review", "definition": definition})
    assert created.status_code in (200, 201), created.text
    workflow_id = created.json()["id"]
    assert setup.api.post(f"/workflows/{workflow_id}/revisions/1/publish", json={}).status_code == 200
    sign_in(live_server, page, setup)
    page.goto(f"/realms/{setup.realm}/workflows/{workflow_id}")
    schedules = page.get_by_test_id("schedules")
    expect(schedules).to_contain_text("members of Acme")
    # workflows.schedule runs once a minute: look again until the firing shows (generous deadline).
    deadline = time.monotonic() + 150
    while "run started" not in (page.get_by_test_id("last-firing").inner_text()):
        assert time.monotonic() < deadline, "the schedule did not fire within 150 s"
        page.wait_for_timeout(3000)
        page.reload()
    expect(page.get_by_test_id("last-firing")).to_contain_text("1 run started")
    listed = RunsPage(page, setup.realm).open(workflow_id=workflow_id)
    expect(listed.rows).to_have_count(1)
    expect(listed.rows.first).to_contain_text(setup.subject_email)
