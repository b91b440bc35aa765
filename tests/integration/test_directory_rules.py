"""Directory and authorization rules, each pinned by its code and by what is (not) changed:
the removals a run makes, separation of duties, the grant ceiling of a role change, the end of
the sign-in throttle window, and the plugin guard."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.authz import load_authority
from engine.directory.groups import add_group_member
from engine.directory.throttle import THROTTLE_PER_ACCOUNT, THROTTLE_PER_ADDRESS, THROTTLE_WINDOW, UnknownRealmFailures
from engine.platform.clock import FixedClock
from testing.directory import in_group, member_group
from testing.factories import HTML, RealmHandle, bearer, form_value, independent_admin
from testing.runs import drain, events, load, make_runner
from testing.runs import start as start_run
from testing.workflows import manual
from testing.workflows import publish as publish_workflow

Client = AsyncTestClient[Litestar]
PASSWORD = "correct horse battery staple"


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


# --- remove_from_group and suspend_user at run time ----------------------------------------------


async def join_group(realm: RealmHandle, group_id: str, user_id: str) -> None:
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        org_id = await session.scalar(text("SELECT organization_id FROM groups WHERE id = :g"), {"g": group_id})
        await add_group_member(session, realm.actor, authority, org_id, group_id, user_id)


async def test_removals_and_suspensions_happen_and_are_never_reversed(realm: RealmHandle) -> None:
    subject = await realm.user("leaver@example.com")
    _, group_id = await member_group(realm, subject.id)
    await join_group(realm, group_id, subject.id)
    elsewhere = await realm.organization("Elsewhere")  # the last step fails there: not a member
    wid = await publish_workflow(
        realm,
        manual(
            {"id": "out", "type": "remove_from_group", "group_id": group_id},
            {"id": "suspend", "type": "suspend_user"},
            {"id": "leave", "type": "remove_membership", "organization_id": elsewhere.id},
        ),
    )
    assert await in_group(realm, group_id, subject.id)
    run_id = await start_run(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=1))))
    run, attempts = await load(realm, run_id)
    assert [(a.step_id, a.state, a.compensation_state) for a in attempts] == [
        ("out", "succeeded", "not_needed"),
        ("suspend", "succeeded", "not_needed"),
        ("leave", "failed", None),
    ]
    assert attempts[0].result == {"group_id": group_id} and attempts[1].result == {"status": "suspended"}
    # Nothing was undone: the run ends failed (not compensated), the effects stay.
    assert run.state == "failed" and run.error_category == "not_a_member"
    assert not await in_group(realm, group_id, subject.id)
    assert await fetch(realm, "SELECT status FROM users WHERE id = :u", u=subject.id) == [("suspended",)]
    directory = await events(realm, run_id, prefix="")
    effects = [(t, actor, d) for t, actor, d in directory if not t.startswith("workflow.")]
    assert [(t, actor) for t, actor, _ in effects] == [
        ("group.member_removed", realm.admin.id),
        ("user.suspended", realm.admin.id),
    ]
    assert effects[0][2]["group_id"] == group_id
    kinds = [t for t, _, _ in directory if t.startswith("workflow.")]
    assert "workflow.step.compensated" not in kinds
    assert kinds[-1] == "workflow.run.failed" and kinds.count("workflow.run.failed") == 2


async def test_removing_from_a_group_the_subject_is_not_in_fails_permanently(realm: RealmHandle) -> None:
    subject = await realm.user("stranger@example.com")
    _, group_id = await member_group(realm, subject.id)
    wid = await publish_workflow(
        realm,
        manual(
            {"id": "out", "type": "remove_from_group", "group_id": group_id}, {"id": "suspend", "type": "suspend_user"}
        ),
    )
    run_id = await start_run(realm, wid, subject.id)
    await drain(make_runner(realm, FixedClock(datetime.now(UTC) + timedelta(seconds=1))))
    run, attempts = await load(realm, run_id)
    assert run.state == "failed" and run.error_category == "not_a_member"
    assert [(a.step_id, a.state, a.error_category) for a in attempts] == [("out", "failed", "not_a_member")]
    assert await fetch(realm, "SELECT status FROM users WHERE id = :u", u=subject.id) == [("active",)]


# --- separation of duties: the author neither approves nor rejects ---------------------------------


async def test_the_author_of_a_revision_can_neither_approve_nor_reject_it(client: Client, realm: RealmHandle) -> None:
    body = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    created = await client.post(
        realm.api + "/workflows",
        json={"name": "Reviewed", "requires_approval": True, "definition": body},
        headers=realm.headers,
    )
    assert created.status_code == 201, created.text
    base = f"{realm.api}/workflows/{created.json()['id']}"
    for verb in ("reject", "approve"):
        refused = await client.post(f"{base}/revisions/1/{verb}", json={"comment": "mine"}, headers=realm.headers)
        assert refused.status_code == 403, (verb, refused.text)
        assert refused.json()["code"] == "separation_of_duties", verb
    assert await fetch(
        realm, "SELECT status, decided_by FROM workflow_revisions WHERE workflow_id = :w", w=created.json()["id"]
    ) == [("draft", None)]
    assert not await fetch(
        realm,
        "SELECT id FROM audit_events WHERE type LIKE 'workflow.revision.%ed' AND type <> 'workflow.revision.staged'",
    )
    reviewer, reviewer_session = await independent_admin(realm, "reviewer@example.com")
    rejected = await client.post(f"{base}/revisions/1/reject", json={"comment": "no"}, headers=reviewer_session)
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert await fetch(
        realm, "SELECT status, decided_by FROM workflow_revisions WHERE workflow_id = :w", w=created.json()["id"]
    ) == [("rejected", reviewer.id)]


# --- a role change: the grant ceiling before and after ------------------------------------------


async def test_a_role_change_needs_the_ceiling_for_the_role_before_and_after(
    client: Client, realm: RealmHandle
) -> None:
    delegate = await realm.user("delegate@example.com")
    await realm.assign(delegate, await realm.role("role-writer", ["realm.roles.*", "realm.users.read"]))
    token = bearer(await realm.token(delegate))
    stronger = await realm.role("stronger", ["realm.users.read", "realm.users.write"])
    weaker = await realm.role("weaker", ["realm.users.read"])

    async def refused(role_id: str, body: dict[str, Any], missing: str) -> None:
        before = await fetch(realm, "SELECT name, permissions, requires_approval FROM roles WHERE id = :r", r=role_id)
        response = await client.patch(f"{realm.api}/roles/{role_id}", json=body, headers=token)
        assert response.status_code == 403, (body, response.text)
        assert response.json()["code"] == "grant_ceiling_exceeded"
        assert missing in response.json()["detail"]
        after = await fetch(realm, "SELECT name, permissions, requires_approval FROM roles WHERE id = :r", r=role_id)
        assert after == before

    # Removing a permission the delegate does not hold weakens a role stronger than them: refused.
    await refused(stronger.id, {"permissions": ["realm.users.read"]}, "realm.users.write")
    # So is any change to it, even its name.
    await refused(stronger.id, {"name": "renamed"}, "realm.users.write")
    # Adding one they do not hold: refused.
    await refused(weaker.id, {"permissions": ["realm.users.read", "realm.users.write"]}, "realm.users.write")
    assert not await fetch(realm, "SELECT id FROM audit_events WHERE type = 'role.updated'")
    # Within the ceiling both before and after: allowed and audited.
    allowed = await client.patch(
        f"{realm.api}/roles/{weaker.id}", json={"permissions": ["realm.users.read", "realm.roles.read"]}, headers=token
    )
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["permissions"] == ["realm.users.read", "realm.roles.read"]
    assert await fetch(realm, "SELECT actor_id, subject_id FROM audit_events WHERE type = 'role.updated'") == [
        (delegate.id, weaker.id)
    ]


# --- the sign-in throttle window ends ---------------------------------------------------------------


async def post_password(client: Client, slug: str, email: str, password: str) -> httpx.Response:
    page = await client.get(f"/realms/{slug}/sign-in", headers=HTML)
    return await client.post(
        f"/realms/{slug}/sign-in",
        data={"email": email, "password": password, "_csrf": form_value(page.text, "_csrf"), "next": ""},
        headers=HTML,
        follow_redirects=False,
    )


async def age_failures(realm: RealmHandle, by: timedelta) -> None:
    """Move the recorded failures into the past (time passes for them)."""
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE sign_in_failures SET occurred_at = occurred_at - make_interval(secs => :s)"),
            {"s": by.total_seconds()},
        )


async def test_the_account_throttle_ends_with_its_window(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    for _ in range(THROTTLE_PER_ACCOUNT):
        assert (await post_password(client, realm.slug, "pat@example.com", "wrong")).status_code == 401
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 429
    await age_failures(realm, THROTTLE_WINDOW - timedelta(minutes=1))
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 429  # still inside
    await age_failures(realm, timedelta(minutes=1, seconds=1))
    signed_in = await post_password(client, realm.slug, "pat@example.com", PASSWORD)
    assert signed_in.status_code == 303, signed_in.text
    assert client.cookies.get("cockpit_session")


async def test_the_address_throttle_ends_with_its_window(client: Client, realm: RealmHandle) -> None:
    await realm.user("pat@example.com", password=PASSWORD)
    for i in range(THROTTLE_PER_ADDRESS):
        assert (await post_password(client, realm.slug, f"guess{i}@example.com", "wrong")).status_code == 401
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 429
    await age_failures(realm, THROTTLE_WINDOW + timedelta(seconds=1))
    assert (await post_password(client, realm.slug, "pat@example.com", PASSWORD)).status_code == 303


def test_failures_at_unknown_realms_count_only_inside_the_window() -> None:
    failures = UnknownRealmFailures()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(THROTTLE_PER_ACCOUNT):
        failures.record("nowhere", "Pat@example.com", "10.0.0.1", moment=start)
    inside = start + THROTTLE_WINDOW - timedelta(seconds=1)
    assert failures.per_account("nowhere", "pat@example.com", inside) == THROTTLE_PER_ACCOUNT
    assert failures.per_address("10.0.0.1", inside) == THROTTLE_PER_ACCOUNT
    after = start + THROTTLE_WINDOW + timedelta(seconds=1)
    assert failures.per_account("nowhere", "pat@example.com", after) == 0
    assert failures.per_address("10.0.0.1", after) == 0


# --- the plugin guard answers plugin_managed, for every verb -----------------------------------------


async def test_a_plugin_workflow_is_changed_only_through_its_plugin(client: Client, realm: RealmHandle) -> None:
    body = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}
    wid = (
        await client.post(realm.api + "/workflows", json={"name": "P", "definition": body}, headers=realm.headers)
    ).json()["id"]
    base = f"{realm.api}/workflows/{wid}"
    # Revision 1 published, then superseded by 2, and the workflow disabled: rollback and enable
    # would both succeed were it not for the plugin.
    assert (await client.post(f"{base}/revisions/1/publish", json={}, headers=realm.headers)).status_code == 200
    second = {**body, "steps": [{"id": "pause", "type": "wait", "duration": "1h"}, {"id": "done", "type": "end"}]}
    assert (
        await client.post(f"{base}/revisions", json={"definition": second}, headers=realm.headers)
    ).status_code == 201
    assert (await client.post(f"{base}/revisions/2/publish", json={}, headers=realm.headers)).status_code == 200
    assert (await client.post(f"{base}/revisions", json={"definition": body}, headers=realm.headers)).status_code == 201
    assert (await client.post(f"{base}/disable", headers=realm.headers)).status_code == 200
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE workflows SET plugin_id = 'acme-hr' WHERE id = :w"), {"w": wid})
    snapshot = "SELECT w.state, w.published_revision, r.number, r.status FROM workflows w JOIN workflow_revisions r ON r.workflow_id = w.id WHERE w.id = :w ORDER BY r.number"
    before = await fetch(realm, snapshot, w=wid)
    assert before == [("disabled", 2, 1, "superseded"), ("disabled", 2, 2, "published"), ("disabled", 2, 3, "draft")]
    audit_before = await fetch(realm, "SELECT count(*) FROM audit_events WHERE subject_id = :w", w=wid)
    reviewer = bearer(await realm.token(await second_admin(realm)))
    calls = [
        ("POST", f"{base}/rollback", {"revision": 1}, realm.headers),
        ("POST", f"{base}/enable", None, realm.headers),
        ("POST", f"{base}/disable", None, realm.headers),
        ("POST", f"{base}/revisions", {"definition": body}, realm.headers),
        ("POST", f"{base}/revisions/3/approve", {}, reviewer),
        ("POST", f"{base}/revisions/3/reject", {}, reviewer),
        ("POST", f"{base}/revisions/3/publish", {}, realm.headers),
        ("DELETE", base, None, realm.headers),
    ]
    for method, url, payload, headers in calls:
        response = await client.request(method, url, json=payload, headers=headers)
        assert response.status_code == 409, (method, url, response.text)
        assert response.json()["code"] == "plugin_managed", (method, url, response.json())
        assert "acme-hr" in response.json()["detail"]
    assert await fetch(realm, snapshot, w=wid) == before
    assert await fetch(realm, "SELECT count(*) FROM audit_events WHERE subject_id = :w", w=wid) == audit_before


async def second_admin(realm: RealmHandle) -> Any:
    user = await realm.user("second-admin@example.com")
    await realm.assign(user, await realm.builtin_role("realm-admin"))
    return user
