"""Smoke flows against a running cockpit (see ``conftest.py``): sign in, the directory, the editor
with a second administrator's approval, a run followed to its end, and an approver deciding on
the self-service approvals page while the administrator's timeline moves on.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from e2e.pages import (
    RealmHome,
    RevisionPage,
    RunsPage,
    TimelinePage,
    UsersPage,
    WorkflowPage,
    WorkflowsPage,
    sign_in_with_link,
)
from e2e.signin import create_sign_in_link
from e2e.smoke.deployment import Deployment, Person

pytestmark = pytest.mark.smoke

RUN_DEADLINE_MS = 90_000

MINIMAL = '{"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}'
WITH_A_PAUSE = """{
  "schema_version": 1,
  "triggers": [{"type": "manual"}],
  "steps": [
    {"id": "pause", "type": "wait", "duration": "1h"},
    {"id": "done", "type": "end"}
  ]
}"""


def test_an_administrator_signs_in_with_a_one_time_link(deployment: Deployment, page: Page) -> None:
    admin = deployment.administrator("signin", "Smoke Sign-in")
    link = create_sign_in_link(deployment.api, admin.id)
    sign_in_with_link(page, deployment.url + link.path, deployment.realm)
    home = RealmHome(page, deployment.realm)
    expect(home.navigation.get_by_role("link", name="Workflows")).to_be_visible()
    expect(home.kpi_value("active-workflows")).to_have_text(re.compile(r"^\d+$"))
    expect(page.get_by_role("banner")).to_contain_text(admin.email)
    # The link is spent.
    assert deployment.api.post("/sign-in-links", json={"user_id": admin.id}).status_code == 201
    assert page.request.get(deployment.url + link.path).status == 400


def test_directory_round_trip(deployment: Deployment, signed_in: Callable[[Person], Page]) -> None:
    admin = deployment.administrator("directory", "Smoke Directory")
    page = signed_in(admin)
    users = UsersPage(page, deployment.realm).open()
    email = deployment.email("person")
    users.create(email, "Smoke Person")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Smoke Person")

    # The API sees what the browser made; the browser sees what the API changes.
    [found] = deployment.call("GET", "/users", params={"q": email})["items"]
    assert found["display_name"] == "Smoke Person" and found["status"] == "active"
    deployment.users.append(found["id"])
    deployment.call("PATCH", f"/users/{found['id']}", json={"display_name": "Smoke Person Renamed"})
    users.open().search(email)
    expect(users.row(email)).to_contain_text("Smoke Person Renamed")
    expect(users.status_of(email)).to_have_text("active")

    person = users.open_user(email)
    person.suspend()
    expect(person.status).to_have_text("suspended")
    assert deployment.call("GET", f"/users/{found['id']}")["status"] == "suspended"


def test_editor_second_administrator_approves_author_publishes_and_reads_the_diff(
    deployment: Deployment, signed_in: Callable[[Person], Page]
) -> None:
    author = deployment.administrator("author", "Smoke Author")
    approver = deployment.administrator("approver", "Smoke Approver")
    page = signed_in(author)
    name = deployment.name("editor")

    editor = WorkflowsPage(page, deployment.realm).open().create(name, definition=MINIMAL, requires_approval=True)
    editor.type_definition(WITH_A_PAUSE)
    editor.expect_valid()
    expect(editor.preview).to_contain_text("pause")
    editor.save()
    revision = RevisionPage.current(page, deployment.realm)
    assert revision.number == 2
    expect(revision.state).to_have_text("draft")
    expect(revision.publish_button).to_have_count(0)  # approval comes first

    other = signed_in(approver)
    theirs = RevisionPage(other, deployment.realm, revision.workflow_id, revision.number).open()
    theirs.approve("Smoke approval.")
    expect(theirs.message).to_have_text("Revision approved.")
    expect(theirs.properties).to_contain_text("Smoke Approver")

    revision.open()
    expect(revision.state).to_have_text("approved")
    revision.publish()
    expect(revision.message).to_have_text("Revision published.")
    expect(revision.state).to_have_text("published")
    expect(revision.diff.get_by_role("heading", level=2)).to_have_text("Changes from revision 1 to revision 2")
    expect(revision.diff_step_status("pause")).to_have_text("added")
    expect(revision.side_by_side).to_contain_text('"duration": "1h"')

    workflows = WorkflowsPage(page, deployment.realm).open().search(name)
    expect(workflows.state_of(name)).to_have_text("active")


def test_a_run_started_in_the_cockpit_is_followed_to_its_end(
    deployment: Deployment, signed_in: Callable[[Person], Page]
) -> None:
    admin = deployment.administrator("runner", "Smoke Runner")
    subject = deployment.user("subject", "Smoke Subject")
    role_id = deployment.role("reader", ["realm.workflows.read"])
    steps = [
        {"id": "grant", "type": "assign_role", "role_id": role_id, "scope": "realm"},
        {"id": "revoke", "type": "remove_role", "role_id": role_id},
        {"id": "done", "type": "end"},
    ]
    workflow_id = deployment.workflow("run", steps)
    page = signed_in(admin)

    timeline = WorkflowPage(page, deployment.realm, workflow_id).open().start_run(subject.email)
    expect(timeline.message).to_contain_text("Run started")
    timeline.follow_to("succeeded", timeout_ms=RUN_DEADLINE_MS)
    for step in ("grant", "revoke", "done"):
        expect(timeline.step_state(step)).to_have_text("succeeded")
        expect(timeline.attempts(step)).to_have_count(1)
    expect(timeline.cancel_control).to_have_count(0)

    runs = RunsPage(page, deployment.realm).open(workflow_id=workflow_id)
    expect(runs.state_of(timeline.run_id)).to_have_text("succeeded")
    assert deployment.call("GET", f"/workflow-runs/{timeline.run_id}")["state"] == "succeeded"
    # What the run did, it undid: the subject holds nothing of the suite's role.
    held = deployment.call("GET", "/role-assignments", params={"user_id": subject.id})["items"]
    assert [a for a in held if a["role_id"] == role_id] == []


def test_an_approver_approves_on_the_self_service_page_and_the_timeline_moves_on(
    deployment: Deployment, signed_in: Callable[[Person], Page], new_context: Callable[..., BrowserContext]
) -> None:
    admin = deployment.administrator("watcher", "Smoke Watcher")
    password = secrets.token_urlsafe(18)
    approver = deployment.user("decider", "Smoke Decider", password=password)  # no role: an account only
    subject = deployment.user("joiner", "Smoke Joiner")
    role_id = deployment.role("joiner", ["realm.workflows.read"])
    steps = [
        {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"},
        {"id": "grant", "type": "assign_role", "role_id": role_id, "scope": "realm"},
        {"id": "revoke", "type": "remove_role", "role_id": role_id},
        {"id": "done", "type": "end"},
    ]
    workflow_id = deployment.workflow("approval", steps)
    name = deployment.name("approval")
    run = deployment.call("POST", f"/workflows/{workflow_id}/runs", expected=202, json={"subject_id": subject.id})

    # The administrator watches the run wait for the approver.
    page = signed_in(admin)
    timeline = TimelinePage(page, deployment.realm, run["id"]).open()
    timeline.follow_to("awaiting_approval", timeout_ms=RUN_DEADLINE_MS)
    expect(page.get_by_test_id("approval-row")).to_contain_text("Smoke Decider")

    # The approver signs in with a password only (an account session) and decides on "Waiting for me".
    theirs = new_context().new_page()
    approvals = f"/realms/{deployment.realm}/approvals"
    theirs.goto(f"{deployment.url}/realms/{deployment.realm}/sign-in?next={approvals}")
    theirs.get_by_label("Email").fill(approver.email)
    theirs.get_by_label("Password").fill(password)
    theirs.get_by_role("button", name="Sign in").click()
    expect(theirs).to_have_url(re.compile(re.escape(approvals) + "$"))
    card = theirs.get_by_test_id("approval-card").filter(has_text=name)
    deadline = time.monotonic() + RUN_DEADLINE_MS / 1000
    while card.count() == 0:  # the list does not poll: the request shows once the worker made it
        assert time.monotonic() < deadline, "the approval never reached the approver's page"
        theirs.wait_for_timeout(500)
        theirs.reload()
    expect(card).to_contain_text("Smoke Joiner")
    card.get_by_role("link", name="Decide").click()
    theirs.get_by_label(re.compile("^Comment")).fill("Smoke approval.")
    theirs.get_by_test_id("approve").click()
    expect(theirs.get_by_test_id("flash")).to_contain_text("Approved")
    expect(theirs.get_by_test_id("decision")).to_contain_text("approved by Smoke Decider")

    # The administrator's timeline, still open, moves on to its end by itself.
    timeline.follow_to("succeeded", timeout_ms=RUN_DEADLINE_MS)
    for step in ("approve", "grant", "revoke", "done"):
        expect(timeline.step_state(step)).to_have_text("succeeded")
    expect(page.get_by_test_id("approval-status")).to_have_text("approved")
    assert deployment.call("GET", f"/workflow-runs/{run['id']}")["state"] == "succeeded"
