"""Runs in a real browser: an administrator starts a run from the cockpit and watches it finish.

The live server runs ``cockpit serve`` and ``cockpit worker`` on a fresh database; the timeline
follows the run by polling itself and stops once the run has finished.
"""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, Request, Route, expect

from e2e.helpers import FINISH_TIMEOUT, LiveServer, Setup, admin_of, in_database, publish, setup_realm, sign_in
from e2e.pages import RevisionPage, RunsPage, TimelinePage, WorkflowPage
from engine.directory.accounts import user_by_email
from engine.directory.audit import Actor
from engine.runs import controls as run_controls
from engine.runs import service as runs


def is_poll(request: Request) -> bool:
    """The timeline asking for itself (htmx, ``HX-Target: run-timeline``)."""
    return request.headers.get("hx-target") == "run-timeline"


def start_paused_run(live_server: LiveServer, setup: Setup) -> str:
    """A run of a workflow disabled in the same transaction: the worker never finds it runnable,
    so it stays pending with its timeline polling, until it is cancelled."""
    workflow_id = publish(setup, "Paused", [{"id": "done", "type": "end"}])

    async def work(session: Any) -> str:
        admin = await admin_of(session, setup.realm, setup.admin_email)
        actor = Actor(type="user", id=admin.id, realm_id=admin.realm_id)
        subject = await user_by_email(session, admin.realm_id, setup.subject_email)
        assert subject is not None
        run = await runs.start_manual_run(session, actor, workflow_id, subject_id=subject.id, organization_id=None)
        await run_controls.set_workflow_enabled(session, actor, workflow_id, False)
        return run.id

    return in_database(live_server, work)


def test_a_run_started_from_the_cockpit_is_followed_until_it_succeeds(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "runs-ok")
    workflow_id = publish(
        setup,
        "Joiner",
        [
            {"id": "grant", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "done", "type": "end"},
        ],
    )
    sign_in(live_server, page, setup)

    # The start form loads into the workflow's page; a run that started opens its timeline.
    timeline = WorkflowPage(page, setup.realm, workflow_id).open().start_run(setup.subject_email, organization="Acme")
    expect(timeline.message).to_contain_text("Run started")
    page.evaluate("() => { window.sameDocument = true }")

    timeline.follow_to("succeeded", timeout_ms=FINISH_TIMEOUT)
    assert page.evaluate("() => window.sameDocument === true")  # the fragment refreshed itself, no reload
    for step in ("grant", "team", "done"):
        expect(timeline.step_state(step)).to_have_text("succeeded")
        expect(timeline.attempts(step)).to_have_count(1)
    expect(timeline.attempts("grant").get_by_test_id("idempotency-key")).to_have_text(f"{timeline.run_id}.grant")
    # Finished: the timeline no longer asks for itself, and nothing is left to cancel or undo.
    expect(timeline.timeline).not_to_have_attribute("hx-get", timeline.url_path)
    expect(timeline.cancel_control).to_have_count(0)
    expect(timeline.compensations()).to_have_count(0)

    # Links in the timeline open their pages.
    timeline.timeline.get_by_role("link", name="revision 1").click()
    revision = RevisionPage.current(page, setup.realm)
    assert (revision.workflow_id, revision.number) == (workflow_id, 1)
    expect(timeline.timeline).to_have_count(0)
    expect(revision.heading).to_be_visible()
    page.go_back()
    expect(timeline.state).to_have_text("succeeded")

    # The run is in the realm's list, with its workflow, subject and state.
    timeline.nav("Runs")
    listed = RunsPage(page, setup.realm)
    expect(listed.row(timeline.run_id)).to_contain_text("Joiner")
    expect(listed.row(timeline.run_id)).to_contain_text(setup.subject_email)
    expect(listed.state_of(timeline.run_id)).to_have_text("succeeded")


def test_a_run_whose_last_step_fails_undoes_its_steps_and_ends_compensated(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "runs-undo")
    elsewhere = setup.api.post("/organizations", json={"name": "Elsewhere"}).json()
    workflow_id = publish(
        setup,
        "Mover",
        [
            {"id": "grant", "type": "assign_role", "role_id": setup.role_id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": setup.group_id},
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere["id"]},
        ],
    )
    sign_in(live_server, page, setup)
    # The form previews the run first: its last step is certain to fail, so it asks before starting.
    workflow = WorkflowPage(page, setup.realm, workflow_id).open()
    timeline = workflow.start_run(setup.subject_email, certain_to_fail=True)

    timeline.follow_to("compensated", timeout_ms=FINISH_TIMEOUT)
    expect(timeline.step_state("leave")).to_have_text("failed")
    expect(timeline.step("leave")).to_contain_text("not_a_member")
    # Newest first: the group membership is undone before the role.
    expect(timeline.compensations()).to_have_text([re.compile(r"\bteam\b"), re.compile(r"\bgrant\b")])
    for step in ("team", "grant"):
        expect(timeline.compensation(step)).to_contain_text("undo")
        expect(timeline.compensation_state(step)).to_have_text("done")
    expect(timeline.timeline).to_contain_text("The subject is not a member of the organization.")

    # What was undone is gone from the directory.
    subject = setup.api.get("/users", params={"q": setup.subject_email}).json()["items"][0]
    assignments = setup.api.get("/role-assignments", params={"user_id": subject["id"]}).json()["items"]
    assert [a for a in assignments if a["role_id"] == setup.role_id] == []


# Counts the timeline's own polls as htmx sends them and as their answers arrive (just before the
# swap is decided: the old timeline is gone after it), from the first script of every document on.
COUNT_POLLS = """
window.timelinePolls = 0;
window.timelineAnswers = 0;
document.addEventListener("htmx:beforeRequest", (event) => {
  if (event.detail.elt.id === "run-timeline") window.timelinePolls += 1;
});
document.addEventListener("htmx:beforeSwap", (event) => {
  const from = event.detail.requestConfig && event.detail.requestConfig.elt;
  if (from && from.id === "run-timeline") window.timelineAnswers += 1;
});
"""


def polls_sent(page: Page) -> int:
    sent: int = page.evaluate("() => window.timelinePolls")
    return sent


def wait_for_quiet_timeline(page: Page, *, deadline_s: float = 30) -> None:
    """Every poll sent so far has been answered and handled."""
    page.wait_for_function("() => window.timelineAnswers >= window.timelinePolls", timeout=deadline_s * 1000)


def test_cancelling_asks_for_a_reason_and_the_timeline_follows_the_run_to_cancelled(
    live_server: LiveServer, page: Page
) -> None:
    setup = setup_realm(live_server, "runs-cancel")
    run_id = start_paused_run(live_server, setup)
    sign_in(live_server, page, setup)
    page.add_init_script(COUNT_POLLS)

    # The page's clock is the test's: time flows, and the test can move it on at once.
    page.clock.install()
    timeline = TimelinePage(page, setup.realm, run_id).open()
    expect(timeline.state).to_have_text("pending")
    page.wait_for_function("() => window.timelinePolls >= 1")  # it refreshes itself while unfinished
    wait_for_quiet_timeline(page)

    # The open confirmation holds the polling, so the reason being typed is not replaced.
    timeline.open_cancel_form()
    timeline.cancel_reason.fill("Hired by mistake")
    before = polls_sent(page)
    page.clock.run_for(10_000)  # five polling periods pass; each timer finds the form open
    assert polls_sent(page) == before
    expect(timeline.cancel_reason).to_have_value("Hired by mistake")

    timeline.confirm_cancel()
    expect(timeline.message).to_contain_text("Cancellation requested")
    expect(timeline.cancellation).to_contain_text("Hired by mistake")
    expect(timeline.cancellation).to_contain_text("Ada Admin")
    expect(timeline.cancel_control).to_have_count(0)
    timeline.follow_to("cancelled", timeout_ms=FINISH_TIMEOUT)
    assert page.url == live_server.url + timeline.url_path  # followed in place
    expect(timeline.timeline).to_contain_text("cancelled")


def test_a_poll_in_flight_when_the_cancel_form_opens_does_not_close_it(live_server: LiveServer, page: Page) -> None:
    setup = setup_realm(live_server, "runs-inflight")
    run_id = start_paused_run(live_server, setup)
    sign_in(live_server, page, setup)
    page.add_init_script(COUNT_POLLS)

    # Hold the first poll of the timeline in the network until the form is open.
    held: list[Route] = []

    def hold_first_poll(route: Route) -> None:
        if is_poll(route.request) and not held:
            held.append(route)
        else:
            route.continue_()

    timeline = TimelinePage(page, setup.realm, run_id)
    page.route(lambda url: url.split("?", 1)[0].endswith(timeline.url_path), hold_first_poll)
    timeline.open()
    expect(timeline.state).to_have_text("pending")
    page.wait_for_function("() => window.timelinePolls >= 1")  # the first poll has left (and is held)
    timeline.open_cancel_form()
    timeline.cancel_reason.fill("Started by mistake")
    assert len(held) == 1 and polls_sent(page) == 1

    # Its answer lands now, with the form open: it must not replace the timeline.
    with page.expect_response(lambda response: is_poll(response.request)) as answered:
        held[0].continue_()
    assert answered.value.status == 200
    page.wait_for_function("() => window.timelineAnswers >= 1")
    expect(timeline.cancel_reason).to_be_visible()
    expect(timeline.cancel_reason).to_have_value("Started by mistake")

    # The form's own answer does replace it.
    timeline.confirm_cancel()
    expect(timeline.message).to_contain_text("Cancellation requested")
    expect(timeline.cancellation).to_contain_text("Started by mistake")
    timeline.follow_to("cancelled", timeout_ms=FINISH_TIMEOUT)
