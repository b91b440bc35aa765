"""Outcomes in people's words, and an approver's "no" as a decision rather than a failure.

Runs are made by the real engine (a Runner on the test's database) on a workflow that asks an
approver, then adds its subject to a team: a rejection fails the approval attempt
``approval_rejected`` (a decision); a subject outside the team's organization fails the team step
``not_a_member`` (an operational failure). Health, the home's figures, the runs list, the timeline
and the approver's "Decided by me" are read over real HTTP.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from engine.directory.models import User
from engine.runs.diagnostics import health_of
from engine.runs.runner import Runner
from testing.approvals import decide
from testing.factories import HTML, RealmHandle, browser_session
from testing.runs import clock_now, drain, load, make_runner, start
from testing.workflows import publish

Client = AsyncTestClient[Litestar]


class Desk:
    """A workflow "Lab access": the approver says yes or no, then the subject joins the lab team."""

    def __init__(self, realm: RealmHandle, approver: User, org_id: str, workflow_id: str, r: Runner) -> None:
        self.realm, self.approver, self.org_id, self.workflow_id, self.runner = realm, approver, org_id, workflow_id, r
        self.clock = clock_now()
        self.count = 0

    @classmethod
    async def make(cls, realm: RealmHandle) -> Desk:
        approver = await realm.user(display_name="Bo Approver")
        org = await realm.organization("Lab")
        async with realm.sessions() as session, session.begin():
            authority = await load_authority(session, realm.id, "user", realm.admin.id)
            group, _ = await create_group(session, realm.actor, authority, org.id, name="Lab team")
        definition = {
            "schema_version": 1,
            "triggers": [{"type": "manual"}],
            "steps": [
                {"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "2h"},
                {"id": "team", "type": "add_to_group", "group_id": group.id},
                {"id": "done", "type": "end"},
            ],
        }
        workflow_id = await publish(realm, definition, "Lab access")
        desk = cls(realm, approver, org.id, workflow_id, make_runner(realm))
        desk.clock = clock_now()
        desk.runner = make_runner(realm, desk.clock)
        return desk

    async def run(self, *, approve: bool, member: bool = True, comment: str | None = None) -> str:
        self.count += 1
        subject = await self.realm.user(display_name=f"Nora Example {self.count}")
        if member:
            async with self.realm.sessions() as session:
                from engine.directory.models import Organization

                org = await session.get(Organization, self.org_id)
            assert org is not None
            await self.realm.member(org, subject)
        run_id = await start(self.realm, self.workflow_id, subject.id)
        ahead = datetime.now(UTC) + timedelta(seconds=5) - self.clock.now()  # the new run is due
        self.clock.advance(seconds=max(0.0, ahead.total_seconds()))
        await drain(self.runner)
        await decide(
            self.realm, self.approver, run_id, "approve", approve=approve, comment=comment, now=self.clock.now()
        )
        await drain(self.runner)
        return run_id


async def diagnostics_of(client: Client, realm: RealmHandle, workflow_id: str) -> dict[str, Any]:
    response = await client.get(f"{realm.api}/workflows/{workflow_id}/diagnostics", headers=realm.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_rejection_is_a_decision_on_both_sides_of_the_ten_percent_line(
    client: Client, realm: RealmHandle
) -> None:
    desk = await Desk.make(realm)
    # Two rejections: 2 attempts, both failed approvals — a decision each, never degraded.
    for _ in range(2):
        await desk.run(approve=False, comment="Not this quarter")
    body = await diagnostics_of(client, realm, desk.workflow_id)
    assert body["attempts"] == {"total": 2, "failed": 0, "rejected": 2, "succeeded": 0, "started": 0}
    assert body["health"] == "healthy", body["health_reason"]
    assert body["health_reason"] == (
        "0 of 2 attempts failed (0.0 %); 2 rejected by an approver (a decision, not a failure), at most 10 %."
    )
    assert body["runs_rejected"] == 2 and body["step_failure_categories"] == {} and body["recent_failures"] == []

    # Two that succeed (3 attempts each) and one whose team step fails (2 attempts): 1 failed of
    # 10 — exactly 10 %, healthy. Counted as failures, the two rejections would make it 30 %.
    for _ in range(2):
        await desk.run(approve=True)
    await desk.run(approve=True, member=False)
    body = await diagnostics_of(client, realm, desk.workflow_id)
    assert (body["attempts"]["total"], body["attempts"]["failed"], body["attempts"]["rejected"]) == (10, 1, 2)
    assert body["health"] == "healthy", body["health_reason"]

    # One more operational failure: 2 of 12, more than 10 %: degraded.
    await desk.run(approve=True, member=False)
    body = await diagnostics_of(client, realm, desk.workflow_id)
    assert (body["attempts"]["total"], body["attempts"]["failed"]) == (12, 2)
    assert body["health"] == "degraded", body["health_reason"]
    assert body["step_failure_categories"] == {"team": {"not_a_member": 2}}

    # The lists' health (one statement for many workflows) says the same.
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    r = f"/realms/{realm.slug}"
    listing = (await client.get(f"{r}/workflows", headers=HTML)).text
    assert 'data-health="degraded"' in listing
    # Its badge says why, the rejections apart, in the words of the diagnostics; so does the
    # statement itself (the listing above read the entry the diagnostics had just kept).
    assert "; 2 rejected by an approver (a decision, not a failure), more than 10 %." in body["health_reason"]
    assert f'title="{body["health_reason"]}"' in listing
    async with realm.sessions() as session:
        health = (await health_of(session, realm.id, [desk.workflow_id]))[desk.workflow_id]
    assert (health.status, health.reason) == ("degraded", body["health_reason"])

    # The home's figures: rejections apart from the failures; the attention card and /attention
    # both lead a degraded workflow to its diagnostics.
    home = (await client.get(f"{r}/", headers=HTML)).text
    assert _kpi(home, "rejected") == "2" and _kpi(home, "failed") == "2"
    diag_href = f'href="{r}/workflows/{desk.workflow_id}/diagnostics" data-testid="attention-link"'
    assert diag_href in home
    attention = (await client.get(f"{r}/attention", headers=HTML)).text
    assert diag_href in attention and 'data-health="degraded"' in attention
    rejected_list = (await client.get(f"{r}/runs?state=group:rejected", headers=HTML)).text
    assert rejected_list.count('data-testid="run-row"') == 2


def _kpi(page: str, name: str) -> str:
    after = page.split(f'data-testid="kpi-{name}"')[1]
    return after.split('data-testid="kpi-value">')[1].split("<")[0].strip()


async def test_a_rejection_below_the_line_of_failures_leaves_the_workflow_healthy(
    client: Client, realm: RealmHandle
) -> None:
    """Only rejections: under "more than 10 % of attempts failed" counted naively this would be
    100 % — it is healthy; the first operational failure (1 of 2) degrades."""
    desk = await Desk.make(realm)
    await desk.run(approve=False, comment="No")
    assert (await diagnostics_of(client, realm, desk.workflow_id))["health"] == "healthy"
    await desk.run(approve=True, member=False)
    body = await diagnostics_of(client, realm, desk.workflow_id)
    assert (body["attempts"]["total"], body["attempts"]["failed"], body["health"]) == (3, 1, "degraded")


async def test_the_approver_the_auditor_and_the_lists_read_the_outcome_in_words(
    client: Client, realm: RealmHandle
) -> None:
    desk = await Desk.make(realm)
    no = await desk.run(approve=False, comment="Not this quarter")
    yes_then_failed = await desk.run(approve=True, member=False)
    yes = await desk.run(approve=True)

    # The decision is kept in the run's context, as an approval is.
    run, _attempts = await load(realm, no)
    assert [(a["status"], a["decided_by"], a["comment"]) for a in run.context["approvals"]] == [
        ("rejected", desk.approver.id, "Not this quarter")
    ]

    r = f"/realms/{realm.slug}"
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    listing = (await client.get(f"{r}/runs", headers=HTML)).text
    assert "Rejected by Bo Approver: Not this quarter" in listing
    assert "Lab access for Nora Example 1" in listing  # the run's title, not its id
    timeline = (await client.get(f"{r}/runs/{no}", headers=HTML)).text
    assert "Rejected by Bo Approver: Not this quarter" in timeline
    assert '<h1 data-testid="run-title">Lab access for Nora Example 1</h1>' in timeline
    assert f"Started by {realm.admin.display_name}" in timeline and "Trigger manual" not in timeline
    assert 'data-state="failed"' in timeline or 'data-state="compensated"' in timeline  # the state is the seed's

    # Names, not ids: the audit log and the home's activity name the approval by what was asked
    # for whom; the approval's page is its run's timeline.
    audit = (await client.get(f"{r}/audit", params={"type": "workflow.approval.rejected"}, headers=HTML)).text
    assert "approval of Lab access for Nora Example 1" in audit and f'href="{r}/runs/{no}"' in audit
    home = (await client.get(f"{r}/", headers=HTML)).text
    assert "approval of Lab access for Nora Example 3" in home or "Lab access for Nora Example 3" in home
    assert "wap_" not in home.split("<main", 1)[1].replace('title="wap_', "")

    # The notices' filters take names and emails (each approval request sent the approver one).
    notices = f"{r}/notices"
    for recipient in ("Bo Approver", desk.approver.email.upper(), desk.approver.id):
        listed = (await client.get(notices, params={"user_id": recipient}, headers=HTML)).text
        assert listed.count('data-testid="notice-row"') == 3, recipient
    by_workflow = (await client.get(notices, params={"run_id": "lab ACCESS"}, headers=HTML)).text
    assert by_workflow.count('data-testid="notice-row"') == 3
    by_run = (await client.get(notices, params={"run_id": no}, headers=HTML)).text
    assert by_run.count('data-testid="notice-row"') == 1
    nobody = (await client.get(notices, params={"user_id": "Nobody Here"}, headers=HTML)).text
    assert 'data-testid="notice-row"' not in nobody and "No one in this realm is called" in nobody
    subject_only = (await client.get(notices, params={"user_id": "Nora Example 1"}, headers=HTML)).text
    assert 'data-testid="notice-row"' not in subject_only  # a name filters by that person only

    # The approver learns how each run ended.
    client.cookies.clear()
    login = await browser_session(realm, desk.approver, mfa=False)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    decided = (await client.get(f"{r}/approvals/decided", headers=HTML)).text
    led_to = [
        part.split("</span>")[1].split("</p>")[0].strip()
        for part in decided.split('data-testid="approval-led-to">')[1:]
    ]
    failed_words = [w for w in led_to if w.startswith("approved — then failed")]
    assert sorted(led_to) == sorted(["rejected — the run stopped", failed_words[0], "approved — then succeeded"]), (
        led_to
    )
    assert "then failed" in failed_words[0] and yes and yes_then_failed
