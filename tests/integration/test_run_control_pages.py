"""The operator's run controls in the cockpit (server-rendered): re-run, retry now, bulk, list filters."""

from __future__ import annotations

from datetime import timedelta

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.platform.clock import SYSTEM_CLOCK
from testing.factories import HTML, RealmHandle
from testing.pages import htmx, signed_in
from testing.runs import drain_realm, rows, run_state, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def test_rerun_from_the_timeline_links_both_ways(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Repeatable")
    original = await start(realm, wid, subject.id)
    url = f"/realms/{realm.slug}/runs/{original}"
    in_flight = await client.get(url, headers=HTML)
    assert 'data-testid="rerun"' not in in_flight.text  # only finished runs are re-run
    await drain_realm(realm)
    page = await client.get(url, headers=HTML)
    assert 'data-testid="rerun"' in page.text and "same subject" in page.text
    answer = await client.post(f"{url}/rerun", headers=htmx(login, "run-timeline"))
    assert answer.status_code == 200
    new_url = answer.headers["hx-redirect"]
    assert new_url.endswith("?done=rerun-started")
    new_id = new_url.split("/runs/", 1)[1].split("?", 1)[0]
    shown = await client.get(new_url, headers=HTML)
    assert "Re-run started" in shown.text and f'href="{url}" data-testid="rerun-of"' in shown.text
    back = await client.get(url, headers=HTML)
    assert f'/runs/{new_id}" data-testid="rerun-as"' in back.text


async def test_retry_now_on_the_timeline(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
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
                "retry": {"max_attempts": 3, "backoff": "1h"},
            }
        ),
        "Retrying",
    )
    run_id = await start(realm, wid, subject.id)
    url = f"/realms/{realm.slug}/runs/{run_id}"
    refused = await client.post(f"{url}/retry-now", headers=htmx(login, "run-timeline"))
    assert refused.status_code == 409 and "not waiting for a retry" in refused.text and "nothing_waits" in refused.text
    due = SYSTEM_CLOCK.now() + timedelta(hours=1)
    # The state the runner leaves after a transient failure (as in the timeline's own page tests).
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text(
                "UPDATE workflow_runs SET state = 'running', due_at = :due, error_category = 'error',"
                " last_error = 'the directory did not answer' WHERE id = :r"
            ),
            {"due": due, "r": run_id},
        )
    page = await client.get(url, headers=HTML)
    box = page.text.split('data-testid="retry-wait"', 1)[1].split("</div>", 1)[0]
    assert "Waiting for a retry" in box and due.strftime("%Y-%m-%d %H:%M:%S") in box and "Retry now" in box
    done = await client.post(f"{url}/retry-now", headers=htmx(login, "run-timeline"))
    assert done.status_code == 200 and "The retry is due now" in done.text
    assert 'data-testid="retry-wait"' not in done.text
    await drain_realm(realm)
    assert await run_state(realm, run_id) == "succeeded"


async def test_run_controls_without_javascript_redirect_and_refusals_say_why(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Plain")
    run_id = await start(realm, wid, subject.id)
    url = f"/realms/{realm.slug}/runs/{run_id}"

    reason = "Hired by mistake, " * 30  # 540 characters: over the limit
    too_long = await client.post(f"{url}/cancel", data={"reason": reason, "_csrf": login.csrf}, headers=HTML)
    assert too_long.status_code == 422 and "<html" in too_long.text
    box = too_long.text.split('<details class="cancel-run" open', 1)[1].split("</textarea>", 1)[0]
    assert 'aria-invalid="true"' in box and box.endswith(">" + reason.strip())  # kept as typed, to shorten it

    in_flight = await client.post(f"{url}/rerun", headers=htmx(login, "run-timeline"))
    assert in_flight.status_code == 409
    assert "The run is still pending; re-run it once it has finished." in in_flight.text
    assert "<code>run_in_flight</code>" in in_flight.text
    assert await rows(realm, "SELECT count(*) FROM workflow_runs WHERE workflow_id = :w", w=wid) == [(1,)]

    await drain_realm(realm)
    plain = await client.post(f"{url}/rerun", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert plain.status_code == 303
    new_url = plain.headers["location"]
    ((new_id,),) = await rows(
        realm, "SELECT id FROM workflow_runs WHERE workflow_id = :w AND id <> :r", w=wid, r=run_id
    )
    assert new_url == f"/realms/{realm.slug}/runs/{new_id}?done=rerun-started"
    assert "Re-run started" in (await client.get(new_url, headers=HTML)).text
    # On the timeline: an empty answer whose HX-Redirect opens the newer run.
    on_timeline = await client.post(f"{url}/rerun", headers=htmx(login, "run-timeline"))
    assert on_timeline.status_code == 200 and on_timeline.content == b""
    assert on_timeline.headers["hx-redirect"].endswith("?done=rerun-started")
    newest = on_timeline.headers["hx-redirect"].split("/runs/", 1)[1].split("?", 1)[0]
    assert newest not in (run_id, new_id)

    due = SYSTEM_CLOCK.now() + timedelta(hours=1)
    async with realm.sessions() as session, session.begin():  # as the runner leaves a transient failure
        await session.execute(
            text(
                "UPDATE workflow_runs SET state = 'running', due_at = :due, error_category = 'error',"
                " last_error = 'the directory did not answer' WHERE id = :r"
            ),
            {"due": due, "r": new_id},
        )
    retried = await client.post(
        f"/realms/{realm.slug}/runs/{new_id}/retry-now",
        data={"_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert retried.status_code == 303
    assert retried.headers["location"] == f"/realms/{realm.slug}/runs/{new_id}?done=retry-now"
    assert "The retry is due now" in (await client.get(retried.headers["location"], headers=HTML)).text

    # Cancelling on the timeline says what follows, in its status line.
    other = await start(realm, wid, subject.id)
    cancelled = await client.post(
        f"/realms/{realm.slug}/runs/{other}/cancel", data={"reason": ""}, headers=htmx(login, "run-timeline")
    )
    assert cancelled.status_code == 200 and "<html" not in cancelled.text
    assert (
        '<div class="flash ok" role="status">Cancellation requested: the run undoes what it did and ends cancelled.</div>'
        in cancelled.text
    )


async def test_list_filters_and_bulk_cancel_in_parts(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Bulky")
    subjects = [await realm.user() for _ in range(3)]
    finished = await start(realm, wid, subjects[0].id)
    await drain_realm(realm)
    waiting = [await start(realm, wid, s.id) for s in subjects]  # 3 pending runs
    base = f"/realms/{realm.slug}/runs"

    listed = await client.get(base, params={"state": "group:in_flight", "trigger_type": "manual"}, headers=HTML)
    assert listed.status_code == 200
    assert all(w in listed.text for w in waiting) and finished not in listed.text
    assert 'data-testid="pick-run"' in listed.text and "All runs matching the filters" in listed.text
    none = await client.get(base, params={"trigger_type": "schedule"}, headers=HTML)
    assert "No run matches these filters." in none.text
    bad = await client.get(base, params={"created_after": "yesterday"}, headers=HTML)
    assert bad.status_code == 422 and "2026-12-01T09:30" in bad.text

    # Ticked runs: one of them finished already, so it is refused and the others are cancelled.
    first = await client.post(
        f"{base}/bulk",
        data={"action": "cancel", "scope": "selected", "ids": [finished, *waiting], "reason": "wrong import"},
        headers=htmx(login, "bulk-progress"),
    )
    assert first.status_code == 200
    assert 'data-finished="true"' in first.text and "4 of 4" in first.text
    assert 'data-testid="bulk-done">3<' in first.text and 'data-testid="bulk-refused">1<' in first.text
    assert f"{finished}</code></a> refused: <code>conflict</code>" in first.text
    async with realm.sessions() as session:
        reasons = (
            (
                await session.execute(
                    text("SELECT cancel_reason FROM workflow_runs WHERE id = ANY(:ids)"), {"ids": waiting}
                )
            )
            .scalars()
            .all()
        )
    assert list(reasons) == ["wrong import"] * 3

    await drain_realm(realm)  # the cancelled runs finish cancelled
    # All matching a filter, worked through 50 at a time: the answer asks for the next part itself.
    many = [await start(realm, wid, subjects[i % 3].id) for i in range(60)]
    # A pending run of another workflow is outside the filter and stays as it is.
    other = await start(realm, await publish(realm, manual({"id": "done", "type": "end"}), "Other"), subjects[0].id)
    part = await client.post(
        f"{base}/bulk",
        data={"action": "cancel", "scope": "filter", "state": "pending", "workflow_id": wid, "reason": "bad batch"},
        headers=htmx(login, "bulk-progress"),
    )
    assert 'data-finished="false"' in part.text and "50 of 60" in part.text and 'hx-trigger="load"' in part.text
    # The next part is asked for with the same reason.
    assert '<input type="hidden" name="reason" value="bad batch">' in part.text
    pending = part.text.split('name="pending" value="', 1)[1].split('"', 1)[0].split(",")
    assert len(pending) == 10 and set(pending) <= set(many)
    rest = await client.post(
        f"{base}/bulk",
        data={
            "action": "cancel",
            "reason": "bad batch",
            "pending": ",".join(pending),
            "total": "60",
            "matched": "60",
            "done": "50",
            "refused": "0",
        },
        headers=htmx(login, "bulk-progress"),
    )
    assert 'data-finished="true"' in rest.text and "60 of 60" in rest.text
    async with realm.sessions() as session:
        left = (
            await session.execute(
                text("SELECT count(*) FROM workflow_runs WHERE id = ANY(:ids) AND cancel_requested_at IS NULL"),
                {"ids": many},
            )
        ).scalar_one()
    assert left == 0
    assert await rows(realm, "SELECT id FROM workflow_runs WHERE id = :o AND cancel_requested_at IS NULL", o=other)

    nothing = await client.post(
        f"{base}/bulk", data={"action": "cancel", "scope": "selected"}, headers=htmx(login, "bulk-progress")
    )
    assert nothing.status_code == 422 and "Tick the runs" in nothing.text


async def test_bulk_refuses_an_unknown_action_or_person_and_filters_by_the_subjects_email(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Bulky")
    chosen, other = await realm.user("chosen@example.com"), await realm.user("other@example.com")
    chosen_run, other_run = await start(realm, wid, chosen.id), await start(realm, wid, other.id)
    base = f"/realms/{realm.slug}/runs"
    ids = [chosen_run, other_run]
    cancelled = "SELECT id FROM workflow_runs WHERE id = ANY(:ids) AND cancel_requested_at IS NOT NULL"

    wrong = await client.post(
        f"{base}/bulk",
        data={"action": "delete", "scope": "selected", "ids": ids},
        headers=htmx(login, "bulk-progress"),
    )
    assert wrong.status_code == 422 and "Choose cancel or re-run." in wrong.text
    assert await rows(realm, cancelled, ids=ids) == []

    nobody = await client.post(
        f"{base}/bulk",
        data={"action": "cancel", "scope": "filter", "state": "pending", "subject": "nobody@example.com"},
        headers=htmx(login, "bulk-progress"),
    )
    assert nobody.status_code == 422 and "No user with the email nobody@example.com in this realm." in nobody.text
    assert await rows(realm, cancelled, ids=ids) == []

    one = await client.post(
        f"{base}/bulk",
        data={"action": "cancel", "scope": "filter", "state": "pending", "subject": " chosen@example.com "},
        headers=htmx(login, "bulk-progress"),
    )
    assert one.status_code == 200 and 'data-testid="bulk-count">1 of 1<' in one.text
    assert [r.id for r in await rows(realm, cancelled, ids=ids)] == [chosen_run]


async def test_bulk_without_javascript_is_a_whole_runs_page_and_filters_by_trigger(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Bulky")
    subject = await realm.user()
    run_ids = [await start(realm, wid, subject.id) for _ in range(2)]  # manual runs, both pending
    base = f"/realms/{realm.slug}/runs"
    cancelled = "SELECT id FROM workflow_runs WHERE id = ANY(:ids) AND cancel_requested_at IS NOT NULL"

    # A plain form post (no htmx) answers the whole page, with Runs as the current section.
    wrong = await client.post(
        f"{base}/bulk", data={"action": "archive", "ids": run_ids, "_csrf": login.csrf}, headers=HTML
    )
    assert wrong.status_code == 422 and "<h1>Act on several runs</h1>" in wrong.text
    assert f'<a href="{base}" aria-current="page">Runs</a>' in wrong.text
    assert (
        '<div class="flash bad" role="alert" data-testid="bulk-error">'
        "The request is not valid. Choose cancel or re-run.</div>"
    ) in wrong.text

    # All scheduled runs: none of the manual ones match, so nothing is cancelled.
    scheduled = await client.post(
        f"{base}/bulk",
        data={"action": "cancel", "scope": "filter", "trigger_type": "schedule", "_csrf": login.csrf},
        headers=HTML,
    )
    assert scheduled.status_code == 200 and 'data-testid="bulk-count">0 of 0<' in scheduled.text
    assert await rows(realm, cancelled, ids=run_ids) == []
    manual_runs = await client.post(
        f"{base}/bulk",
        data={"action": "cancel", "scope": "filter", "trigger_type": "manual", "_csrf": login.csrf},
        headers=HTML,
    )
    assert manual_runs.status_code == 200 and 'data-testid="bulk-count">2 of 2<' in manual_runs.text
    assert sorted(r.id for r in await rows(realm, cancelled, ids=run_ids)) == sorted(run_ids)


async def test_readers_get_no_controls(client: Client, realm: RealmHandle) -> None:
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, await realm.builtin_role("realm-auditor"))
    login = await signed_in(client, realm, reader)
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Readable")
    run_id = await start(realm, wid, subject.id)
    await drain_realm(realm)
    page = await client.get(f"/realms/{realm.slug}/runs/{run_id}", headers=HTML)
    assert 'data-testid="rerun"' not in page.text
    listed = await client.get(f"/realms/{realm.slug}/runs", headers=HTML)
    assert 'data-testid="pick-run"' not in listed.text and 'id="bulk-form"' not in listed.text
    for path in (f"/runs/{run_id}/rerun", f"/runs/{run_id}/retry-now", "/runs/bulk"):
        refused = await client.post(
            f"/realms/{realm.slug}{path}", data={"action": "rerun", "ids": [run_id]}, headers=htmx(login, "x")
        )
        assert refused.status_code == 403, path
