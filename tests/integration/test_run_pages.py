"""The run pages as a signed-in browser sees them: lists, the timeline, cancelling, starting by hand."""

from __future__ import annotations

import re
from datetime import timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.pages.runs.start import start_choices
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import ValidationFailed
from engine.platform.ids import new_id
from engine.runs import controls as run_controls
from engine.runs import service as runs
from engine.runs.runner import Runner
from engine.workflows.publication import publish_revision
from testing.factories import HTML, RealmHandle
from testing.pages import htmx, signed_in, step_block
from testing.runs import drain_realm, run_state, start
from testing.workflows import make_workflow, manual, publish, stage

Client = AsyncTestClient[Litestar]
POLLING = 'hx-trigger="every 2s'


# --- Lists ----------------------------------------------------------------------------------------


async def test_the_runs_list_shows_each_run_filters_and_pages(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    grace = await realm.user("grace@example.com", display_name="Grace Hopper")
    linus = await realm.user("linus@example.com")
    onboarding = await publish(realm, manual({"id": "done", "type": "end"}), "Onboarding")
    offboarding = await publish(realm, manual({"id": "bye", "type": "end"}), "Offboarding")
    first = await start(realm, onboarding, grace.id)
    await drain_realm(realm)
    second = await start(realm, offboarding, linus.id)  # stays pending

    base = f"/realms/{realm.slug}/runs"
    page = await client.get(base, headers=HTML)
    assert page.status_code == 200 and "<html" in page.text
    assert 'aria-current="page"' in page.text.split(f'href="{base}"', 1)[1][:30]
    assert first in page.text and second in page.text
    assert page.text.index(second) < page.text.index(first)  # newest first
    row = page.text.split(f'href="{base}/{first}"', 1)[1].split("</tr>", 1)[0]
    assert "Onboarding" in row and 'class="badge tone-ok" data-state="succeeded"' in row
    # The subject by name, their email beside it and as the link's title.
    subject = re.search(
        r'<a href="/realms/[^"]+/users/(\w+)" title="([^"]+)">([^<]+)</a> <span class="muted small">([^<]+)</span>', row
    )
    assert subject is not None, row
    assert subject.groups() == (grace.id, "grace@example.com", "Grace Hopper", "grace@example.com")
    pending = page.text.split(f'href="{base}/{second}"', 1)[1].split("</tr>", 1)[0]
    assert (
        "Offboarding" in pending
        and 'class="badge tone-progress" data-state="pending"' in pending
        and "<code>bye</code>" in pending
    )
    for state in ("awaiting approval", "compensation failed", "cancelled"):
        assert f">{state}</option>" in page.text

    succeeded = await client.get(base, params={"state": "succeeded"}, headers=HTML)
    assert first in succeeded.text and second not in succeeded.text
    by_workflow = await client.get(base, params={"workflow_id": offboarding}, headers=HTML)
    assert second in by_workflow.text and first not in by_workflow.text
    by_email = await client.get(base, params={"subject": "GRACE@example.com"}, headers=HTML)
    assert first in by_email.text and second not in by_email.text
    by_id = await client.get(base, params={"subject": linus.id}, headers=HTML)
    assert second in by_id.text and first not in by_id.text
    nobody = await client.get(base, params={"subject": "nobody@example.com"}, headers=HTML)
    assert "No user with the email nobody@example.com in this realm." in nobody.text and first not in nobody.text
    none = await client.get(base, params={"state": "failed"}, headers=HTML)
    assert "No run matches these filters." in none.text
    bad = await client.get(base, params={"state": "exploded"}, headers=HTML)
    assert bad.status_code == 422 and "state is one of pending" in bad.text

    fragment = await client.get(
        base, params={"state": "pending"}, headers=HTML | {"HX-Request": "true", "HX-Target": "runs-table"}
    )
    assert fragment.text.lstrip().startswith('<div id="runs-table">') and "<html" not in fragment.text
    assert second in fragment.text and first not in fragment.text

    # One workflow's runs, linked from its page.
    overview = await client.get(f"/realms/{realm.slug}/workflows/{onboarding}", headers=HTML)
    assert f'href="/realms/{realm.slug}/workflows/{onboarding}/runs"' in overview.text
    own = await client.get(f"/realms/{realm.slug}/workflows/{onboarding}/runs", headers=HTML)
    assert own.status_code == 200 and "Runs of Onboarding" in own.text
    assert first in own.text and second not in own.text
    missing = await client.get(f"/realms/{realm.slug}/workflows/wfl_nope/runs", headers=HTML)
    assert missing.status_code == 404

    for _ in range(50):
        await start(realm, offboarding, linus.id)
    paged = await client.get(base, params={"subject": linus.id}, headers=HTML)
    assert "Next page" in paged.text and second not in paged.text
    href = paged.text.split('<nav class="pager"', 1)[1].split('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    assert f"subject={linus.id}" in href
    following = await client.get(href, headers=HTML)
    assert following.status_code == 200 and second in following.text and first not in following.text


async def test_runs_of_another_realm_are_not_found(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    subject = await other_realm.user("someone@example.com")
    wid = await publish(other_realm, manual({"id": "done", "type": "end"}), "Theirs")
    theirs = await start(other_realm, wid, subject.id)
    page = await client.get(f"/realms/{realm.slug}/runs/{theirs}", headers=HTML)
    assert page.status_code == 404
    listed = await client.get(f"/realms/{realm.slug}/runs", headers=HTML)
    assert theirs not in listed.text and "No runs yet." in listed.text


# --- The timeline ---------------------------------------------------------------------------------


async def test_the_timeline_shows_attempts_and_compensation_and_polls_only_until_finished(
    client: Client, realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    subject = await realm.user("subject@example.com", display_name="Sam Subject")
    elsewhere = await realm.organization("Elsewhere")
    role = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"},
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id},
            {"id": "done", "type": "end"},
        ),
        "Joiner",
    )
    run_id = await start(realm, wid, subject.id)
    url = f"/realms/{realm.slug}/runs/{run_id}"

    before = await client.get(url, headers=HTML)
    assert before.status_code == 200 and "<html" in before.text
    assert POLLING in before.text and f'hx-get="{url}"' in before.text
    assert 'class="badge tone-progress" data-state="pending"' in before.text
    assert "up next" in step_block(before.text, "grant")
    assert "not reached" in step_block(before.text, "leave") and "not reached" in step_block(before.text, "done")
    assert f'href="/realms/{realm.slug}/workflows/{wid}/revisions/1"' in before.text
    assert "subject@example.com" in before.text and realm.admin.display_name in before.text
    assert "Cancel run" in before.text

    await drain_realm(realm)
    assert await run_state(realm, run_id) == "compensated"
    fragment = await client.get(url, headers=HTML | {"HX-Request": "true", "HX-Target": "run-timeline"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert fragment.text.lstrip().startswith('<div id="run-timeline"')
    assert "hx-trigger" not in fragment.text and "hx-get" not in fragment.text.split(">", 1)[0]
    assert 'class="badge tone-undone" data-state="compensated"' in fragment.text and "not_a_member" in fragment.text
    assert "Cancel run" not in fragment.text

    grant = step_block(fragment.text, "grant")
    assert 'class="badge tone-ok" data-state="succeeded"' in grant and f"{run_id}.grant" in grant
    assert re.search(r"r1:[0-9a-f]{16}:i1", grant)
    leave = step_block(fragment.text, "leave")
    assert (
        'class="badge tone-bad" data-state="failed"' in leave
        and "The subject is not a member of the organization." in leave
    )
    assert f"{run_id}.leave" in leave and "<code>not_a_member</code>" in leave
    assert "not reached" in step_block(fragment.text, "done")

    compensation = fragment.text.split('id="compensation-title"', 1)[1]
    entry = compensation.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert "<code>grant</code>" in entry and "undo" in entry and 'class="badge tone-ok" data-state="done"' in entry
    assert "<td>1</td>" in entry  # tries
    assert "<time" in entry  # when it was undone

    # The API tells the same story.
    api = await client.get(f"{realm.api}/workflow-runs/{run_id}", headers=realm.headers)
    assert [a["state"] for a in api.json()["attempts"]] == ["succeeded", "failed"]


async def test_a_waiting_retry_shows_when_the_next_attempt_is(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    subject = await realm.user("subject@example.com")
    role = await realm.role("viewer", ["realm.workflows.read"])
    wid = await publish(
        realm,
        manual(
            {
                "id": "grant",
                "type": "assign_role",
                "role_id": role.id,
                "scope": "realm",
                "retry": {"max_attempts": 3, "backoff": "5m"},
            }
        ),
        "Retrying",
    )
    run_id = await start(realm, wid, subject.id)
    due = SYSTEM_CLOCK.now() + timedelta(minutes=5)
    # The state the runner leaves after a transient failure: still running, due later, one failed attempt.
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "UPDATE workflow_runs SET state = 'running', due_at = :due, error_category = 'error',"
                " last_error = 'the directory did not answer' WHERE id = :r"
            ),
            {"due": due, "r": run_id},
        )
        await session.execute(
            text(
                "INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number,"
                " idempotency_key, state, input, input_version, error_category, error_message, max_attempts,"
                " backoff_ms, compensation_strategy, compensation_attempts, started_at, finished_at)"
                " VALUES (:id, :r, :realm, 'grant', 0, 'assign_role', 1, :key, 'failed', '{}'::jsonb,"
                " 'r1:0123456789abcdef:i1', 'error', 'the directory did not answer', 3, 300000, 'none', 0,"
                " now(), now())"
            ),
            {"id": new_id("wsa"), "r": run_id, "realm": realm.id, "key": f"{run_id}.grant"},
        )
    page = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    grant = step_block(page.text, "grant")
    assert 'class="badge tone-waiting" data-state="retrying"' in grant
    assert "next attempt at" in grant and due.strftime("%Y-%m-%d %H:%M:%S") in grant
    assert "the directory did not answer" in grant and re.search(r"1 <span[^>]*>of at most 3</span>", grant)
    assert POLLING in page.text
    # Above the steps and on the runs list, the run says it waits for a retry, not that it runs.
    retrying = f"Retrying at {due.strftime('%H:%M UTC')}: the directory did not answer"
    assert retrying in page.text or f"Retrying at {due.strftime('%d %b %H:%M UTC')}" in page.text
    listing = (await client.get(f"/realms/{realm.slug}/runs", headers=HTML)).text
    assert "Retrying at " in listing.split('data-testid="run-outcome"')[1].split("</td>")[0]


# --- Cancelling -----------------------------------------------------------------------------------


async def test_each_attempt_shows_the_retry_policy_its_step_really_has(client: Client, realm: RealmHandle) -> None:
    """Seed 000: waits and approvals are never retried; every other step (a notice and the end
    included: an infrastructure error is transient) is retried under the policy in force."""
    from datetime import UTC, datetime

    from engine.platform.clock import FixedClock

    await signed_in(client, realm)
    subject = await realm.user("ada@example.com")
    definition = manual(
        {"id": "hello", "type": "notify", "notice": "welcome"},
        {"id": "pause", "type": "wait", "duration": "1m"},
        {"id": "done", "type": "end"},
    ) | {"retry": {"max_attempts": 5, "backoff": "1s"}}
    run_id = await start(realm, await publish(realm, definition, "Policy shown"), subject.id)
    clock = FixedClock(datetime.now(UTC))
    runner = Runner(realm.sessions, "worker-test-pages-policy", clock=clock)
    for _ in range(10):
        if not await runner.run_pass():
            clock.advance(minutes=2)
            if not await runner.run_pass():
                break
    assert await run_state(realm, run_id) == "succeeded"
    async with realm.sessions() as session:
        recorded = dict(
            (
                await session.execute(
                    text("SELECT step_id, max_attempts FROM step_attempts WHERE run_id = :r"), {"r": run_id}
                )
            ).all()
        )
    assert recorded == {"hello": 5, "pause": 1, "done": 5}
    page = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    assert page.status_code == 200

    def shown(step: str) -> str:
        cell = step_block(page.text, step).split('data-testid="attempt-number">', 1)[1].split("</td>", 1)[0]
        return re.sub(r"<[^>]+>", "", cell).strip()

    assert shown("hello") == "1 of at most 5"
    assert shown("done") == "1 of at most 5"
    assert shown("pause") == "1 · never retried"
    assert "/5<" not in page.text and "/1<" not in page.text


async def test_cancel_asks_for_a_reason_and_answers_409_when_it_cannot(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Cancellable")
    run_id = await start(realm, wid, subject.id)
    url = f"/realms/{realm.slug}/runs/{run_id}"

    page = await client.get(url, headers=HTML)
    form = page.text.split('<details class="cancel-run"', 1)[1].split("</details>", 1)[0]
    assert "Cancel run" in form and 'name="reason"' in form and "<textarea" in form
    assert 'name="_csrf"' in form and f'action="{url}/cancel"' in form

    no_csrf = await client.post(f"{url}/cancel", data={"reason": "x"}, headers=HTML)
    assert no_csrf.status_code == 403

    too_long = await client.post(f"{url}/cancel", data={"reason": "x" * 501}, headers=htmx(login, "run-timeline"))
    assert too_long.status_code == 422 and "at most 500 characters" in too_long.text
    assert '<details class="cancel-run" open' in too_long.text  # the form stays open with what was typed
    assert await run_state(realm, run_id) == "pending"

    done = await client.post(f"{url}/cancel", data={"reason": "Hired by mistake"}, headers=htmx(login, "run-timeline"))
    assert done.status_code == 200 and "<html" not in done.text
    assert "Cancellation requested" in done.text
    assert "<q>Hired by mistake</q>" in done.text and realm.admin.display_name in done.text
    assert "Cancel run" not in done.text and POLLING in done.text
    async with realm.sessions() as session:
        audit = (
            await session.execute(
                text(
                    "SELECT actor_id, details->>'reason' FROM audit_events WHERE type = 'workflow.run.cancel_requested'"
                )
            )
        ).all()
    assert audit == [(realm.admin.id, "Hired by mistake")]

    again = await client.post(f"{url}/cancel", data={"reason": "twice"}, headers=htmx(login, "run-timeline"))
    assert again.status_code == 409
    assert "A cancellation was requested already." in again.text and "<code>conflict</code>" in again.text

    await drain_realm(realm)
    assert await run_state(realm, run_id) == "cancelled"
    finished = await client.get(url, headers=HTML)
    assert 'class="badge tone-stopped" data-state="cancelled"' in finished.text and "hx-trigger" not in finished.text
    # A cancellation is shown as such (who, when, why), not as an error.
    assert 'data-testid="cancellation">cancelled' in finished.text and "Last error" not in finished.text
    late = await client.post(f"{url}/cancel", data={"reason": "late", "_csrf": login.csrf}, headers=HTML)
    assert late.status_code == 409 and "The run has finished (cancelled)." in late.text and "<html" in late.text

    # Without JavaScript: a plain form post, then the run's page.
    other = await start(realm, wid, subject.id)
    plain = await client.post(
        f"/realms/{realm.slug}/runs/{other}/cancel",
        data={"reason": "", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert plain.status_code == 303 and plain.headers["location"].endswith(f"/runs/{other}?done=cancel-requested")
    shown = await client.get(plain.headers["location"], headers=HTML)
    assert "Cancellation requested" in shown.text and "(no reason given)" in shown.text


async def test_readers_see_runs_but_cannot_cancel_or_start(client: Client, realm: RealmHandle) -> None:
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, await realm.builtin_role("realm-auditor"))
    login = await signed_in(client, realm, reader)
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Readable")
    run_id = await start(realm, wid, subject.id)
    url = f"/realms/{realm.slug}/runs/{run_id}"
    page = await client.get(url, headers=HTML)
    assert page.status_code == 200 and "Cancel run" not in page.text
    refused = await client.post(f"{url}/cancel", data={"_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 403 and await run_state(realm, run_id) == "pending"
    overview = await client.get(f"/realms/{realm.slug}/workflows/{wid}", headers=HTML)
    assert overview.status_code == 200 and 'id="run-start"' not in overview.text
    start_page = await client.get(f"/realms/{realm.slug}/workflows/{wid}/runs/start", headers=HTML)
    assert start_page.status_code == 403


# --- Starting by hand -----------------------------------------------------------------------------


async def test_the_start_form_starts_a_run_and_opens_its_timeline(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("grace@example.com", display_name="Grace Hopper")
    org = await realm.organization("Acme")
    closed = await realm.organization("Closed Co")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE organizations SET state = 'inactive' WHERE id = :o"), {"o": closed.id})
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Hand started")
    start_url = f"/realms/{realm.slug}/workflows/{wid}/runs/start"

    overview = await client.get(f"/realms/{realm.slug}/workflows/{wid}", headers=HTML)
    placeholder = overview.text.split('id="run-start"', 1)[1].split("</section>", 1)[0]
    assert f'hx-get="{start_url}"' in placeholder and 'hx-trigger="load"' in placeholder
    assert f'href="{start_url}"' in placeholder

    fragment = await client.get(start_url, headers=HTML | {"HX-Request": "true", "HX-Target": "run-start"})
    assert fragment.status_code == 200 and fragment.text.lstrip().startswith('<section id="run-start"')
    assert '<option value="grace@example.com">Grace Hopper</option>' in fragment.text
    assert f'<option value="{org.id}"' in fragment.text and closed.id not in fragment.text
    assert 'name="_csrf"' in fragment.text

    # The preview names the person as the rest of the page does: the name, the email beside it.
    previewed = await client.post(
        f"{start_url}/preview",
        data={"subject": "Grace@Example.com", "organization_id": org.id, "_csrf": login.csrf},
        headers=HTML,
    )
    assert previewed.status_code == 200
    heading = previewed.text.split('data-testid="run-preview"', 1)[1].split("</h3>", 1)[0]
    assert 'Preview for Grace Hopper <span class="muted small">grace@example.com</span>' in heading

    started = await client.post(
        start_url,
        data={"subject": "Grace@Example.com", "organization_id": org.id, "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert started.status_code == 303
    location = started.headers["location"]
    assert re.fullmatch(rf"/realms/{realm.slug}/runs/wrn_[^/?]+\?done=started", location)
    timeline = await client.get(location, headers=HTML)
    assert "Run started." in timeline.text and "grace@example.com" in timeline.text and "Acme" in timeline.text
    assert "manual" in timeline.text and POLLING in timeline.text
    async with realm.sessions() as session:
        row = (
            await session.execute(
                text("SELECT subject_id, organization_id, starter_id, trigger_type FROM workflow_runs")
            )
        ).one()
    assert tuple(row) == (subject.id, org.id, realm.admin.id, "manual")

    # With htmx the answer tells the browser where to go instead of swapping the timeline into the form.
    by_htmx = await client.post(start_url, data={"subject": subject.id}, headers=htmx(login, "run-start"))
    assert by_htmx.status_code == 200 and by_htmx.headers["hx-redirect"].startswith(f"/realms/{realm.slug}/runs/wrn_")


async def test_a_run_certain_to_fail_starts_only_once_confirmed(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("outsider@example.com")
    org = await realm.organization("Elsewhere")
    wid = await publish(realm, manual({"id": "leave", "type": "remove_membership", "organization_id": org.id}), "Leave")
    start_url = f"/realms/{realm.slug}/workflows/{wid}/runs/start"

    asked = await client.post(start_url, data={"subject": subject.email}, headers=htmx(login, "run-start"))
    assert asked.status_code == 409
    box = asked.text.split('data-testid="confirm-failure"', 1)[1].split("</div>", 1)[0]
    assert "Step 1 <code>leave</code> is certain to fail:" in box and "<code>not_a_member</code>" in box
    assert 'name="confirm" value="yes"' in box and 'value="outsider@example.com"' in asked.text
    assert await count_runs(realm) == 0

    confirmed = await client.post(
        start_url,
        data={"subject": subject.email, "confirm": "yes", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert confirmed.status_code == 303 and confirmed.headers["location"].endswith("?done=started")
    assert await count_runs(realm) == 1


async def test_the_previews_show_why_a_person_is_refused_and_what_a_failing_run_would_do(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("outsider@example.com")
    org = await realm.organization("Elsewhere")
    closed = await realm.organization("Closed Co")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE organizations SET state = 'inactive' WHERE id = :o"), {"o": closed.id})
    wid = await publish(realm, manual({"id": "leave", "type": "remove_membership", "organization_id": org.id}), "Leave")
    start_url = f"/realms/{realm.slug}/workflows/{wid}/runs/start"

    # The one-person preview of nobody: the start form again, with the subject's error and what was typed.
    unknown = await client.post(
        f"{start_url}/preview", data={"subject": "ghost@example.com", "_csrf": login.csrf}, headers=HTML
    )
    assert unknown.status_code == 422 and "No user with the email ghost@example.com in this realm." in unknown.text
    assert 'value="ghost@example.com"' in unknown.text and 'data-testid="run-preview"' not in unknown.text

    # Asked to confirm a run certain to fail: the answer shows the whole preview beside the question.
    asked = await client.post(start_url, data={"subject": subject.email}, headers=htmx(login, "run-start"))
    assert asked.status_code == 409 and 'data-testid="confirm-failure"' in asked.text
    shown = asked.text.split('data-testid="run-preview"', 1)[1]
    assert "<code>leave</code>" in shown and "nothing was written" in shown

    # Several people: the organization chosen is the one each preview is judged in.
    many = await client.post(
        f"{start_url}-many/preview",
        data={"people": subject.email, "organization_id": closed.id, "_csrf": login.csrf},
        headers=HTML,
    )
    assert many.status_code == 200
    assert re.findall(r'data-testid="person-preview" data-outcome="([^"]+)"', many.text) == ["refused"]
    assert "The organization is inactive." in many.text
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM workflow_runs")) == 0


async def test_the_start_form_shows_every_error(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("subject@example.com")
    closed = await realm.organization("Closed Co")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE organizations SET state = 'inactive' WHERE id = :o"), {"o": closed.id})
    powerful = await realm.role("powerful", ["realm.users.suspend"])
    wid = await publish(
        realm,
        manual(
            {"id": "grant", "type": "assign_role", "role_id": powerful.id, "scope": "realm"},
            {"id": "done", "type": "end"},
        ),
        "Guarded",
    )
    start_url = f"/realms/{realm.slug}/workflows/{wid}/runs/start"
    target = htmx(login, "run-start")

    both = await client.post(start_url, data={"subject": "", "organization_id": closed.id}, headers=target)
    assert both.status_code == 422 and both.text.lstrip().startswith('<section id="run-start"')
    assert "Give the subject&#39;s email or user id." in both.text and "The organization is inactive." in both.text
    assert both.text.count('class="field-error"') == 2

    unknown = await client.post(start_url, data={"subject": "ghost@example.com"}, headers=target)
    assert unknown.status_code == 422 and "No user with the email ghost@example.com in this realm." in unknown.text
    assert 'value="ghost@example.com"' in unknown.text  # what was typed stays
    # The subject field keeps the 254 characters an email address may have, never the 255th.
    typed = "p" * 20 + "@" + "q" * 279
    too_long = await client.post(start_url, data={"subject": typed}, headers=target)
    assert too_long.status_code == 422 and f"No user with the email {typed[:254]} in this realm." in too_long.text
    assert f'value="{typed[:254]}"' in too_long.text

    myself = await client.post(start_url, data={"subject": realm.admin.email}, headers=target)
    assert myself.status_code == 403 and "Nobody starts a run about themselves." in myself.text
    assert "<code>self_action</code>" in myself.text

    # An operator who may run workflows but could not grant the role the first step assigns.
    operator = await realm.user("operator@example.com")
    await realm.assign(operator, await realm.role("runner", ["realm.workflows.read", "realm.workflows.run"]))
    operator_login = await signed_in(client, realm, operator)
    short = await client.post(start_url, data={"subject": subject.id}, headers=htmx(operator_login, "run-start"))
    assert short.status_code == 403 and "<code>forbidden</code>" in short.text
    listed = short.text.split('<ul class="step-errors">', 1)[1].split("</ul>", 1)[0]
    assert "Step 1 <code>grant</code>" in listed and "realm.users.suspend" in listed
    assert "/definition/steps/0" in listed and "<code>done</code>" not in listed

    login = await signed_in(client, realm)
    async with realm.sessions() as session, session.begin():
        await run_controls.set_workflow_enabled(session, realm.actor, wid, False)
    disabled = await client.post(start_url, data={"subject": subject.id}, headers=htmx(login, "run-start"))
    assert disabled.status_code == 409 and "The workflow is disabled" in disabled.text
    assert "This workflow is disabled" in disabled.text

    # Without JavaScript the errors come on the start page itself.
    plain = await client.post(start_url, data={"subject": "", "_csrf": login.csrf}, headers=HTML)
    assert plain.status_code == 422 and "<html" in plain.text and "Start a run of Guarded" in plain.text
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM workflow_runs")) == 0


# --- Starting for several people at once ----------------------------------------------------------


async def count_runs(realm: RealmHandle) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text("SELECT count(*) FROM workflow_runs")) or 0)


async def test_the_engine_starts_for_ten_people_at_once_and_refuses_eleven(realm: RealmHandle) -> None:
    people = [await realm.user(f"p{i}@example.com") for i in range(11)]
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Many")
    async with realm.sessions() as session, session.begin():
        try:
            await runs.start_manual_runs(
                session, realm.actor, wid, subject_ids=[p.id for p in people], organization_id=None
            )
        except ValidationFailed as exc:
            assert [(i.path, i.code) for i in exc.issues] == [("/subject_ids", "too_many")]
            assert exc.issues[0].message == "At most 10 people at once; 11 were chosen."
        else:
            raise AssertionError("eleven people were accepted")
    assert await count_runs(realm) == 0
    async with realm.sessions() as session, session.begin():
        started = await runs.start_manual_runs(
            session, realm.actor, wid, subject_ids=[p.id for p in people[:10]], organization_id=None
        )
    assert [r.subject_id for r in started] == [p.id for p in people[:10]]
    assert all(r.run is not None and r.refused is None for r in started)
    assert await count_runs(realm) == 10
    # The same person twice, or nobody, is refused before anything starts.
    async with realm.sessions() as session, session.begin():
        for subject_ids, code in (([people[0].id, people[0].id], "duplicate"), ([], "required")):
            try:
                await runs.start_manual_runs(session, realm.actor, wid, subject_ids=subject_ids, organization_id=None)
            except ValidationFailed as exc:
                assert exc.issues[0].code == code
            else:
                raise AssertionError(subject_ids)
    assert await count_runs(realm) == 10


async def test_the_start_page_for_several_people_previews_and_answers_per_person(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    grace = await realm.user("grace@example.com", display_name="Grace Hopper")
    alan = await realm.user("alan@example.com", display_name="Alan Turing")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Several")
    url = f"/realms/{realm.slug}/workflows/{wid}/runs/start-many"
    form_page = await client.get(url, headers=HTML)
    assert form_page.status_code == 200 and "at most 10 people" in form_page.text

    # The preview: one entry per person, nothing written; the administrator themselves would not start.
    assert f'name="picked" value="{grace.id}"' in form_page.text  # the people to tick
    people = f"{alan.id}, {realm.admin.email}\nnobody@example.com"
    picked = {"picked": [grace.id], "people": people, "_csrf": login.csrf}
    preview = await client.post(f"{url}/preview", data=picked, headers=HTML)
    assert preview.status_code == 200, preview.text[-3000:]
    outcomes = re.findall(r'data-testid="person-preview" data-outcome="([^"]+)"', preview.text)
    assert outcomes == ["would_succeed", "would_succeed", "refused", "refused"], outcomes
    assert "Grace Hopper" in preview.text and "Alan Turing" in preview.text
    assert "Nobody starts a run about themselves." in preview.text
    assert await count_runs(realm) == 0

    # Starting: one result per person; the refusals leave the others started.
    started = await client.post(url, data=picked, headers=HTML)
    assert started.status_code == 200
    assert re.findall(r'data-testid="person-result" data-started="(\w+)"', started.text) == ["yes", "yes", "no", "no"]
    assert "2 of 4 started." in started.text
    async with realm.sessions() as session:
        subjects = set((await session.execute(text("SELECT subject_id FROM workflow_runs"))).scalars())
    assert subjects == {grace.id, alan.id}
    # Nobody started: the answer carries the refusal's status.
    myself = await client.post(url, data={"people": realm.admin.email, "_csrf": login.csrf}, headers=HTML)
    assert myself.status_code == 403 and "0 of 1 started." in myself.text
    assert "Nobody starts a run about themselves." in myself.text and await count_runs(realm) == 2

    # Ten people are allowed, eleven refused with the limit named, and nothing starts.
    eleven = [await realm.user(f"many{i}@example.com") for i in range(11)]
    too_many = "\n".join(u.email for u in eleven)
    refused = await client.post(url, data={"people": too_many, "_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 422 and "At most 10 people at once; 11 were chosen." in refused.text
    refused = await client.post(f"{url}/preview", data={"people": too_many, "_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 422 and "At most 10 people at once; 11 were chosen." in refused.text
    assert await count_runs(realm) == 2
    ten = "\n".join(u.email for u in eleven[:10])
    allowed = await client.post(url, data={"people": ten, "_csrf": login.csrf}, headers=HTML)
    assert allowed.status_code == 200 and "10 of 10 started." in allowed.text
    assert await count_runs(realm) == 12

    # Someone who may only read workflows gets no such page and starts nothing.
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, await realm.builtin_role("realm-auditor"))
    reader_login = await signed_in(client, realm, reader)
    assert (await client.get(url, headers=HTML)).status_code == 403
    denied = await client.post(url, data={"people": grace.email, "_csrf": reader_login.csrf}, headers=HTML)
    assert denied.status_code == 403 and await count_runs(realm) == 12


async def test_both_start_forms_offer_the_same_active_people_and_organizations(
    client: Client, realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    zoe = await realm.user("zoe@example.com")
    ada = await realm.user("ada@example.com")
    gone = await realm.user("gone@example.com")
    beta, alpha, closed = [await realm.organization(n) for n in ("beta", "Alpha", "Closed")]
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": gone.id})
        await session.execute(text("UPDATE organizations SET state = 'inactive' WHERE id = :o"), {"o": closed.id})
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Choices")
    async with realm.sessions() as session:
        choices = await start_choices(session, realm.id, wid)
    assert choices.workflow.id == wid
    emails = [u.email for u in choices.users]
    assert emails == sorted(emails) and {ada.email, zoe.email} <= set(emails) and gone.email not in emails
    assert [o.id for o in choices.organizations] == [alpha.id, beta.id]  # by name, regardless of case
    for path in ("runs/start", "runs/start-many"):
        shown = (await client.get(f"/realms/{realm.slug}/workflows/{wid}/{path}", headers=HTML)).text
        offered = re.findall(r'<option value="(org_\w+)"', shown)
        assert offered == [alpha.id, beta.id], path
        assert "gone@example.com" not in shown and gone.id not in shown, path
        assert ("ada@example.com" if path == "runs/start" else ada.id) in shown, path


async def test_the_revision_preview_keeps_the_form_and_judges_the_revision_and_organization_asked_for(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    await realm.user("ada@example.com", display_name="Ada Lovelace")
    workflow = await make_workflow(realm, "Two revisions", body=manual({"id": "done", "type": "end"}))
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)
    assert await stage(realm, workflow, manual({"id": "finish", "type": "end"})) == 2
    sales = await realm.organization("Sales")
    closed = await realm.organization("Closed")
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE organizations SET state = 'inactive' WHERE id = :o"), {"o": closed.id})
    url = f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/2/preview"

    # The staged revision 2 is judged, not the published 1; the form keeps the person and organization.
    shown = await client.post(
        url, data={"subject": "ada@example.com", "organization_id": sales.id, "_csrf": login.csrf}, headers=HTML
    )
    assert shown.status_code == 200
    preview = shown.text.split('data-testid="run-preview"', 1)[1]
    assert "(revision 2, judged now; nothing was written)" in preview and 'data-step="finish"' in preview
    assert 'data-step="done"' not in preview
    assert 'id="preview-subject" type="text" name="subject" value="ada@example.com"' in shown.text
    assert f'<option value="{sales.id}" selected>Sales</option>' in shown.text

    # An inactive organization is refused at its field, and the form keeps what was typed.
    refused = await client.post(
        url, data={"subject": "ada@example.com", "organization_id": closed.id, "_csrf": login.csrf}, headers=HTML
    )
    assert refused.status_code == 422 and "<code>/organization_id</code> The organization is inactive." in refused.text
    assert 'id="preview-subject" type="text" name="subject" value="ada@example.com"' in refused.text
    assert 'data-testid="run-preview"' not in refused.text

    # A person typed too long is cut at 254 characters, in the message at its field and in the form.
    typed = "nobody@" + "a" * 290 + ".example.com"
    nobody = await client.post(url, data={"subject": typed, "organization_id": "", "_csrf": login.csrf}, headers=HTML)
    assert nobody.status_code == 422
    assert f"<code>/subject_id</code> No user with the email {typed[:254]} in this realm." in nobody.text
    assert f'name="subject" value="{typed[:254]}" required' in nobody.text


async def test_the_revision_page_previews_a_person_by_name(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    ada = await realm.user("ada@example.com", display_name="Ada Lovelace")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Named preview")
    previewed = await client.post(
        f"/realms/{realm.slug}/workflows/{wid}/revisions/1/preview",
        data={"subject": "ada@example.com", "organization_id": "", "_csrf": login.csrf},
        headers=HTML,
    )
    assert previewed.status_code == 200
    heading = previewed.text.split('data-testid="run-preview"', 1)[1].split("</h3>", 1)[0]
    assert 'Preview for Ada Lovelace <span class="muted small">ada@example.com</span>' in heading
    # By the user's id, the same person.
    by_id = await client.post(
        f"/realms/{realm.slug}/workflows/{wid}/revisions/1/preview",
        data={"subject": ada.id, "organization_id": "", "_csrf": login.csrf},
        headers=HTML,
    )
    assert by_id.status_code == 200
    heading = by_id.text.split('data-testid="run-preview"', 1)[1].split("</h3>", 1)[0]
    assert 'Preview for Ada Lovelace <span class="muted small">ada@example.com</span>' in heading
    # An email that names no one of the realm: the same words as the start form, at the field.
    nobody = await client.post(
        f"/realms/{realm.slug}/workflows/{wid}/revisions/1/preview",
        data={"subject": "nobody@example.com", "organization_id": "", "_csrf": login.csrf},
        headers=HTML,
    )
    assert nobody.status_code == 422 and "No user with the email nobody@example.com in this realm." in nobody.text
    assert 'data-testid="run-preview"' not in nobody.text
