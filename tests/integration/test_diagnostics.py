"""Workflow diagnostics, health at each boundary, Needs attention and marking a run resolved.

Runs are made by the real engine (a Runner on the test's database): a subject who belongs to
the group's organization succeeds (two succeeded attempts), one who does not fails at once
(one failed attempt, ``not_a_member``). A compensation that cannot undo (the directory refuses
the delete) ends ``compensation_failed`` after its five tries.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.ids import new_id
from engine.runs import diagnostics, run_reads
from engine.runs.retention import cleanup_finished_runs
from testing.diagnostics import Team, compensation_failed_run, diagnostics_of
from testing.factories import HTML, RealmHandle, browser_session
from testing.runs import drain, make_runner, start

Client = AsyncTestClient[Litestar]


# --- health at each boundary ----------------------------------------------------------------------


async def test_health_moves_through_each_boundary(client: Client, realm: RealmHandle) -> None:
    team = await Team.make(realm)
    runner = make_runner(realm)

    body = await diagnostics_of(client, realm, team.workflow_id)
    assert body["health"] == "unknown" and body["window"]["runs"] == 0
    assert body["run_duration_ms"] == {"count": 0, "p50": None, "p95": None}
    assert body["oldest_due_run"] is None

    # A run that has not started a step yet: still no data, and it is the oldest due run.
    waiting = await start(realm, team.workflow_id, (await team.subject(True)).id)
    body = await diagnostics_of(client, realm, team.workflow_id)
    assert body["health"] == "unknown", body["health_reason"]
    assert body["runs_by_state"]["pending"] == 1
    assert body["oldest_due_run"]["id"] == waiting and body["oldest_due_run"]["state"] == "pending"
    await drain(runner)

    # 2 failed of 20 attempts: exactly 10 %, which is still healthy.
    for _ in range(8):
        await team.run(True, runner)
    for _ in range(2):
        await team.run(False, runner)
    body = await diagnostics_of(client, realm, team.workflow_id)
    assert body["attempts"] == {"total": 20, "failed": 2, "succeeded": 18, "started": 0, "rejected": 0}
    assert body["health"] == "healthy", body["health_reason"]
    assert body["health_reason"] == "2 of 20 attempts failed (10.0 %), at most 10 %."
    assert body["runs_by_state"]["succeeded"] == 9 and body["runs_by_state"]["failed"] == 2
    assert body["workflow_id"] == team.workflow_id
    assert body["step_failure_categories"] == {"team": {"not_a_member": 2}}
    assert len(body["recent_failures"]) == 2 and {f["step_id"] for f in body["recent_failures"]} == {"team"}
    assert {f["error_category"] for f in body["recent_failures"]} == {"not_a_member"}
    assert body["run_duration_ms"]["count"] == 11 and body["run_duration_ms"]["p95"] >= body["run_duration_ms"]["p50"]
    assert body["oldest_due_run"] is None and body["compensation_failures"] == 0

    # One more failure: 3 of 21, just over 10 %.
    await team.run(False, runner)
    body = await diagnostics_of(client, realm, team.workflow_id)
    assert body["attempts"]["total"] == 21 and body["attempts"]["failed"] == 3
    assert body["health"] == "degraded", body["health_reason"]
    assert body["health_reason"] == "3 of 21 attempts failed (14.3 %), more than 10 %."


async def test_a_failed_compensation_requires_attention_until_resolved(client: Client, realm: RealmHandle) -> None:
    workflow_id, run_id, _subject = await compensation_failed_run(realm)
    body = await diagnostics_of(client, realm, workflow_id)
    assert body["health"] == "attention_required"
    assert body["health_reason"] == (
        f"1 compensation failed: an administrator must finish undoing it — see run {run_id}"
    )
    assert body["compensation_failures"] == 1 and body["unresolved_compensation_failures"] == [run_id]

    # Needs attention lists it, with what is left to undo by hand.
    listed = await client.get(f"{realm.api}/needs-attention", headers=realm.headers)
    assert listed.status_code == 200, listed.text
    (item,) = listed.json()["items"]
    assert item["run_id"] == run_id and item["resolution"] is None
    (left,) = item["left_to_undo"]
    assert left["step_id"] == "team" and left["strategy"] == "undo" and left["compensation_state"] == "failed"
    assert left["compensation_attempts"] == 5 and "the directory is unavailable" in left["last_error"]

    # Resolving needs a note: one 422 with its path, nothing changed.
    refused = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/resolve", json={"note": "  "}, headers=realm.headers
    )
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "/note"
    unknown = await client.post(f"{realm.api}/workflow-runs/{run_id}/resolve", json={}, headers=realm.headers)
    assert unknown.status_code == 422 and unknown.json()["errors"][0]["path"] == "/note"

    done = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/resolve",
        json={"note": "Removed the group membership by hand."},
        headers=realm.headers,
    )
    assert done.status_code == 200, done.text
    assert done.json()["resolved_by"] == realm.admin.id
    again = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/resolve", json={"note": "twice"}, headers=realm.headers
    )
    assert again.status_code == 409 and again.json()["code"] == "already_resolved"

    # The run keeps its state; health no longer asks for attention; the resolution is audited.
    run = (await client.get(f"{realm.api}/workflow-runs/{run_id}", headers=realm.headers)).json()
    assert run["state"] == "compensation_failed"
    body = await diagnostics_of(client, realm, workflow_id)
    assert body["health"] != "attention_required" and body["unresolved_compensation_failures"] == []
    assert body["compensation_failures"] == 1
    open_now = (await client.get(f"{realm.api}/needs-attention", headers=realm.headers)).json()
    assert open_now["items"] == []
    resolved = (await client.get(f"{realm.api}/needs-attention?show=resolved", headers=realm.headers)).json()
    assert resolved["items"][0]["resolution"]["note"] == "Removed the group membership by hand."
    async with realm.sessions() as session:
        audited = (
            await session.execute(
                text(
                    "SELECT actor_id, details FROM audit_events WHERE type = 'workflow.run.resolved' AND subject_id = :r"
                ),
                {"r": run_id},
            )
        ).all()
    assert audited == [(realm.admin.id, {"workflow_id": workflow_id, "note": "Removed the group membership by hand."})]


async def test_resolving_on_the_api_clears_the_health_badge_the_list_had_kept(
    client: Client, realm: RealmHandle
) -> None:
    _workflow_id, run_id, _subject = await compensation_failed_run(realm)
    login = await browser_session(realm, realm.admin, mfa=True)
    listing_url = f"/realms/{realm.slug}/workflows"

    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    before = (await client.get(listing_url, headers=HTML)).text
    assert 'data-health="attention_required"' in before
    client.cookies.clear()
    done = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/resolve", json={"note": "Undone by hand."}, headers=realm.headers
    )
    assert done.status_code == 200, done.text
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    after = (await client.get(listing_url, headers=HTML)).text
    assert 'data-testid="health-badge"' in after and 'data-health="attention_required"' not in after


async def test_resolving_on_the_page_clears_the_health_badge_the_list_had_kept(
    client: Client, realm: RealmHandle
) -> None:
    _workflow_id, run_id, _subject = await compensation_failed_run(realm)
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    listing_url = f"/realms/{realm.slug}/workflows"
    assert 'data-health="attention_required"' in (await client.get(listing_url, headers=HTML)).text
    done = await client.post(
        f"/realms/{realm.slug}/attention/{run_id}/resolve",
        data={"note": "Undone by hand.", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    after = (await client.get(listing_url, headers=HTML)).text
    assert 'data-testid="health-badge"' in after and 'data-health="attention_required"' not in after


async def test_only_a_compensation_failed_run_can_be_resolved(client: Client, realm: RealmHandle) -> None:
    team = await Team.make(realm)
    run_id = await team.run(True, make_runner(realm))
    refused = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/resolve", json={"note": "nothing to do"}, headers=realm.headers
    )
    assert refused.status_code == 409 and refused.json()["code"] == "not_compensation_failed"
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM run_resolutions")) == 0


async def test_diagnostics_never_carry_subjects_inputs_or_messages(client: Client, realm: RealmHandle) -> None:
    workflow_id, run_id, subject = await compensation_failed_run(realm)
    async with realm.sessions() as session:
        run = await run_reads.get_run(session, realm.id, run_id)
        attempts = await run_reads.run_attempts(session, run_id)
    secrets = {subject.id, subject.email, subject.display_name}
    secrets |= {str(v) for v in run.input.values() if v}
    secrets |= {
        run.last_error or "",
        *(a.error_message or "" for a in attempts),
        *(a.compensation_error or "" for a in attempts),
    }
    for attempt in attempts:
        secrets |= {str(v) for v in (attempt.input or {}).values() if isinstance(v, str) and len(v) > 6}
        secrets |= {str(v) for v in (attempt.result or {}).values() if isinstance(v, str) and len(v) > 6}
    secrets -= {"", workflow_id, run_id, "team", "leave", "done"}
    assert subject.id in secrets and subject.email in secrets and len(secrets) > 3
    api = json.dumps(await diagnostics_of(client, realm, workflow_id))
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    html = (await client.get(f"/realms/{realm.slug}/workflows/{workflow_id}/diagnostics", headers=HTML)).text
    for secret in secrets:
        assert secret not in api, secret
        assert secret not in html, secret


async def test_another_realms_workflow_answers_404(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    team = await Team.make(other_realm)
    theirs = await client.get(f"{realm.api}/workflows/{team.workflow_id}/diagnostics", headers=realm.headers)
    assert theirs.status_code == 404 and theirs.json()["code"] == "not_found"
    workflow_id, run_id, _ = await compensation_failed_run(other_realm)
    resolve = await client.post(
        f"{realm.api}/workflow-runs/{run_id}/resolve", json={"note": "not mine"}, headers=realm.headers
    )
    assert resolve.status_code == 404
    assert (await client.get(f"{realm.api}/needs-attention", headers=realm.headers)).json()["items"] == []
    page = await client.get(f"/realms/{realm.slug}/workflows/{workflow_id}/diagnostics", headers=realm.headers | HTML)
    assert page.status_code == 404


# --- pages ----------------------------------------------------------------------------------------


async def test_pages_show_health_charts_and_resolve_with_a_note(client: Client, realm: RealmHandle) -> None:
    workflow_id, run_id, subject = await compensation_failed_run(realm)
    healthy = await Team.make(realm, "Welcome")
    runner = make_runner(realm)
    for _ in range(3):
        await healthy.run(True, runner)
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    r = f"/realms/{realm.slug}"

    page = (await client.get(f"{r}/workflows/{workflow_id}/diagnostics", headers=HTML)).text
    assert 'data-health="attention_required"' in page and "Attention required" in page
    assert "1 compensation failed: an administrator must finish undoing it" in page
    assert f'href="{r}/runs/{run_id}"' in page
    assert 'id="chart-runs-over-time"' in page and 'id="chart-failures"' in page and 'id="chart-durations"' in page
    assert "<script" not in page.split("</head>")[1]  # charts are SVG from the server, no script

    listing = (await client.get(f"{r}/workflows", headers=HTML)).text
    assert listing.count('data-testid="health-badge"') == 2
    assert 'data-health="attention_required"' in listing and 'data-health="healthy"' in listing

    home = (await client.get(f"{r}/", headers=HTML)).text
    assert (
        'data-testid="attention-workflow"' in home
        and "Offboarding check" in home
        and "Welcome" not in home.split('id="workflows-attention"')[1].split("</section>")[0]
    )
    assert "1 run(s) to finish by hand" in home

    attention = (await client.get(f"{r}/attention", headers=HTML)).text
    assert (
        subject.email in attention
        and "Left to undo by hand" in attention
        and "the directory is unavailable" in attention
    )

    # Without the CSRF token: refused; without a note: the form says so; with one: resolved.
    refused = await client.post(f"{r}/attention/{run_id}/resolve", data={"note": "x"}, headers=HTML)
    assert refused.status_code == 403
    empty = await client.post(f"{r}/attention/{run_id}/resolve", data={"note": " ", "_csrf": login.csrf}, headers=HTML)
    assert empty.status_code == 422 and "say what was done by hand" in empty.text
    done = await client.post(
        f"{r}/attention/{run_id}/resolve",
        data={"note": "Took them out of Team by hand", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    after = (await client.get(done.headers["location"], headers=HTML)).text
    assert "Marked resolved" in after and 'data-testid="attention-empty"' in after
    page = (await client.get(f"{r}/workflows/{workflow_id}/diagnostics", headers=HTML)).text
    assert 'data-health="attention_required"' not in page


async def test_a_note_refused_on_the_page_stays_in_its_box_with_the_reason(client: Client, realm: RealmHandle) -> None:
    _workflow_id, run_id, _subject = await compensation_failed_run(realm)
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    note = "Took them out of Team by hand. " * 70  # 2,170 characters: over the limit
    refused = await client.post(
        f"/realms/{realm.slug}/attention/{run_id}/resolve", data={"note": note, "_csrf": login.csrf}, headers=HTML
    )
    assert refused.status_code == 422 and "must be at most 2000 characters" in refused.text
    box = refused.text.split(f'id="note-{run_id}"', 1)[1].split("</textarea>", 1)[0]
    assert 'aria-invalid="true"' in box and box.endswith(">" + note)  # kept as typed, to shorten it
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM run_resolutions WHERE run_id = :r"), {"r": run_id}) == 0


async def test_the_page_says_what_the_last_retention_cleanup_deleted(client: Client, realm: RealmHandle) -> None:
    team = await Team.make(realm, "Kept")
    await team.run(True, make_runner(realm))
    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    url = f"/realms/{realm.slug}/workflows/{team.workflow_id}/diagnostics"
    assert "no cleanup has run yet" in (await client.get(url, headers=HTML)).text
    async with realm.sessions() as session, session.begin():
        # A run that ended long ago: the cleanup deletes it.
        await session.execute(
            text(
                "UPDATE workflow_runs SET finished_at = now() - interval '400 days' WHERE id IN ("
                " SELECT id FROM workflow_runs WHERE realm_id = :r AND finished_at IS NOT NULL LIMIT 1)"
            ),
            {"r": realm.id},
        )
    done = await cleanup_finished_runs(realm.sessions, retention_days=30)
    assert done.deleted == 1
    page = (await client.get(url, headers=HTML)).text
    assert "Finished runs are deleted 30 days after they end" in page
    assert "deleted 1 run of every workflow" in page


async def test_the_window_holds_the_newest_thousand_attempts_even_of_an_older_run(
    client: Client, realm: RealmHandle
) -> None:
    """60 runs of 20 attempts (1,200): the window is the newest 1,000 by start, whichever run they
    belong to — here the oldest run retried its first step last, and that attempt comes first."""
    team = await Team.make(realm, "Big team")
    user = await realm.user()
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                """
                INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, state,
                       step_index, trigger_type, trigger_key, input, input_version, publisher_id, depth,
                       created_at, updated_at, finished_at)
                SELECT 'wrn_' || lpad(g::text, 26, '0'), :r, v.workflow_id, v.number, v.id, :u, 'succeeded',
                       0, 'manual', 'k' || g, '{}', 1, :u, 0, now() - interval '1 day' + g * interval '1 minute',
                       now(), now() - interval '1 day' + g * interval '1 minute' + interval '30 seconds'
                  FROM generate_series(1, 60) g, workflow_revisions v WHERE v.workflow_id = :w AND v.number = 1
                """
            ),
            {"r": realm.id, "u": user.id, "w": team.workflow_id},
        )
        await session.execute(
            text(
                """
                INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number,
                       idempotency_key, state, input_version, max_attempts, backoff_ms, compensation_strategy,
                       compensation_attempts, started_at, finished_at)
                SELECT 'sat_' || lpad((g * 100 + s)::text, 26, '0'), 'wrn_' || lpad(g::text, 26, '0'), :r,
                       's' || s, s, 'end', CASE WHEN g = 1 AND s = 0 THEN 2 ELSE 1 END, 'i' || g || '-' || s,
                       CASE WHEN s % 7 = 0 THEN 'failed' ELSE 'succeeded' END, 'v', 1, 0, 'none', 0,
                       CASE WHEN g = 1 AND s = 0 THEN now()
                            ELSE now() - interval '1 day' + g * interval '1 minute' + s * interval '1 second' END,
                       now()
                  FROM generate_series(1, 60) g, generate_series(0, 19) s
                """
            ),
            {"r": realm.id},
        )
    async with realm.sessions() as session:
        expected = [
            row[0]
            for row in await session.execute(
                text(
                    "SELECT a.id FROM step_attempts a JOIN workflow_runs r ON r.id = a.run_id"
                    " WHERE r.workflow_id = :w ORDER BY a.started_at DESC, a.id DESC LIMIT 1000"
                ),
                {"w": team.workflow_id},
            )
        ]
    assert expected[0] == "sat_" + "100".zfill(26)  # the oldest run's retry, started last
    found = await diagnostics_of(client, realm, team.workflow_id)
    assert found["window"]["attempts"] == 1000
    assert [a["id"] for a in found["recent_attempts"]] == expected[:20]
    failed = sum(1 for a in expected if int(a[-2:]) % 7 == 0)
    assert found["attempts"]["failed"] == failed


# --- runs written with known times and states -----------------------------------------------------


async def _insert_run(
    realm: RealmHandle,
    workflow_id: str,
    state: str,
    *,
    created_at: datetime,
    finished_at: datetime | None = None,
    due_at: datetime | None = None,
    attempt: tuple[str, str | None] | None = None,
) -> str:
    """One run of the workflow's first revision, and with ``attempt`` (state, error category) one
    attempt of its step ``team``; the run's id."""
    run_id = new_id("wrn")
    subject = await realm.user()
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                """
                INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, state,
                       step_index, trigger_type, trigger_key, input, input_version, publisher_id, depth,
                       created_at, updated_at, finished_at, due_at)
                SELECT :id, :r, v.workflow_id, v.number, v.id, :u, :state, 0, 'manual', :id, '{}', 1, :u, 0,
                       :created, :created, :finished, :due
                  FROM workflow_revisions v WHERE v.workflow_id = :w AND v.number = 1
                """
            ),
            {
                "id": run_id,
                "r": realm.id,
                "u": subject.id,
                "w": workflow_id,
                "state": state,
                "created": created_at,
                "finished": finished_at,
                "due": due_at,
            },
        )
        if attempt is not None:
            await session.execute(
                text(
                    """
                    INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number,
                           idempotency_key, state, error_category, input_version, max_attempts, backoff_ms,
                           compensation_strategy, compensation_attempts, started_at, finished_at)
                    VALUES (:id, :run, :r, 'team', 0, 'add_to_group', 1, :id, :state, :category, 'v', 1, 0,
                            'none', 0, :started, :started)
                    """
                ),
                {
                    "id": new_id("wsa"),
                    "run": run_id,
                    "r": realm.id,
                    "state": attempt[0],
                    "category": attempt[1],
                    "started": created_at,
                },
            )
    return run_id


async def test_run_durations_and_the_oldest_due_run_from_known_times(client: Client, realm: RealmHandle) -> None:
    """20 finished runs: 10 that took no time, one whose clock went back 5 s (0, never negative),
    and nine of 1 to 9 s, the eighth 8000.46 ms. Nearest rank: p50 is the 10th (0.0), p95 the
    19th (8000.46 ms, shown to one decimal). Of the runs still going, the oldest due is the
    pending one: a waiting run has a due time too, but it waits for its timer, not for a worker."""
    team = await Team.make(realm, "Timed")
    start_at = datetime.now(UTC) - timedelta(hours=3)
    lengths_ms = [0.0] * 10 + [-5000.0] + [1000.0 * k for k in range(1, 8)] + [8000.46, 9000.0]
    for n, length in enumerate(lengths_ms):
        created = start_at + timedelta(minutes=n)
        await _insert_run(
            realm,
            team.workflow_id,
            "succeeded",
            created_at=created,
            finished_at=created + timedelta(milliseconds=length),
        )
    now = datetime.now(UTC)
    await _insert_run(realm, team.workflow_id, "waiting", created_at=now, due_at=now - timedelta(hours=2))
    pending_due = now - timedelta(hours=1)
    pending = await _insert_run(realm, team.workflow_id, "pending", created_at=now, due_at=pending_due)
    await _insert_run(realm, team.workflow_id, "running", created_at=now, due_at=now - timedelta(minutes=30))

    body = await diagnostics_of(client, realm, team.workflow_id)
    assert body["window"]["runs"] == 23
    assert body["run_duration_ms"] == {"count": 20, "p50": 0.0, "p95": 8000.5}
    assert body["oldest_due_run"] == {"id": pending, "state": "pending", "due_at": pending_due.isoformat()}


async def test_the_home_and_attention_list_attention_required_first_then_degraded_by_name(
    client: Client, realm: RealmHandle
) -> None:
    """Made oldest first, so that newest first (the order they are read in) is neither order:
    the two whose compensation failed come first, by name whatever its case, then the degraded
    one; the healthy one is not listed."""
    zulu = await Team.make(realm, "Zulu offboarding")
    beta = await Team.make(realm, "beta offboarding")
    alpha = await Team.make(realm, "Alpha onboarding")
    healthy = await Team.make(realm, "Welcome")
    at = datetime.now(UTC) - timedelta(hours=1)
    open_runs = {}
    for team in (zulu, beta):
        open_runs[team.workflow_id] = await _insert_run(
            realm, team.workflow_id, "compensation_failed", created_at=at, finished_at=at, attempt=("succeeded", None)
        )
    await _insert_run(
        realm, alpha.workflow_id, "failed", created_at=at, finished_at=at, attempt=("failed", "not_a_member")
    )
    await _insert_run(
        realm, healthy.workflow_id, "succeeded", created_at=at, finished_at=at, attempt=("succeeded", None)
    )
    expected = [beta.workflow_id, zulu.workflow_id, alpha.workflow_id]

    async with realm.sessions() as session:
        found, open_total = await diagnostics.realm_attention(session, realm.id)
    assert [(w.name, w.health.status) for w in found] == [
        ("beta offboarding", "attention_required"),
        ("Zulu offboarding", "attention_required"),
        ("Alpha onboarding", "degraded"),
    ]
    assert open_total == 2

    login = await browser_session(realm, realm.admin, mfa=True)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    listed = re.compile(r'data-testid="attention-workflow" data-workflow-id="([^"]+)"')
    home = (await client.get(f"/realms/{realm.slug}/", headers=HTML)).text
    assert listed.findall(home) == expected
    assert "2 run(s) to finish by hand" in home
    # Each whose compensation failed leads to its run, the degraded one to its diagnostics.
    items = home.split('data-testid="attention-workflow"')[1:]
    for workflow_id, item in zip(expected, items, strict=True):
        item = item.split("</li>")[0]
        if workflow_id in open_runs:
            run_id = open_runs[workflow_id]
            assert f'href="/realms/{realm.slug}/runs/{run_id}"' in item and f"finish run {run_id[:12]}… by hand" in item
        else:
            assert f'href="/realms/{realm.slug}/workflows/{workflow_id}/diagnostics"' in item
            assert "finish run" not in item
    attention = (await client.get(f"/realms/{realm.slug}/attention", headers=HTML)).text
    assert listed.findall(attention) == expected
