"""Role assignments: each refusal's words, what each grant and revocation audits, the list's
pages and filters, the labels of holders, and expiry at its boundary on both sides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.role_assignments import expire_due_assignments, principal_labels
from engine.platform.clock import SYSTEM_CLOCK
from testing.factories import RealmHandle, independent_admin, make_realm

Client = AsyncTestClient[Litestar]


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def service_principal(client: Client, realm: RealmHandle, name: str) -> str:
    made = await client.post(realm.api + "/service-principals", json={"name": name}, headers=realm.headers)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def test_each_refusal_of_an_assignment_says_what_is_wrong(client: Client, realm: RealmHandle) -> None:
    url = realm.api + "/role-assignments"
    role = await realm.role("reader", ["realm.users.read"])
    user = await realm.user()
    sp_id = await service_principal(client, realm, "bot")
    missing = "0" * 26

    both = await client.post(
        url, json={"role_id": role.id, "user_id": user.id, "service_principal_id": sp_id}, headers=realm.headers
    )
    assert [(e["path"], e["code"], e["message"]) for e in both.json()["errors"]] == [
        ("/service_principal_id", "exclusive", "give either user_id or service_principal_id, not both")
    ]
    neither = await client.post(url, json={"role_id": role.id}, headers=realm.headers)
    assert [(e["path"], e["code"], e["message"]) for e in neither.json()["errors"]] == [
        ("/user_id", "required", "give user_id or service_principal_id")
    ]
    overflow = await client.post(
        url,
        json={"role_id": role.id, "user_id": user.id, "expires_at": "0001-01-01T00:00:00+01:00"},
        headers=realm.headers,
    )
    assert [(e["path"], e["code"]) for e in overflow.json()["errors"]] == [("/expires_at", "out_of_range")]

    async def detail(body: dict[str, str]) -> tuple[int, str]:
        answer = await client.post(url, json=body, headers=realm.headers)
        return answer.status_code, answer.json()["detail"]

    assert await detail({"role_id": "rol_" + missing, "user_id": user.id}) == (404, "No such role.")
    assert await detail({"role_id": role.id, "user_id": "usr_" + missing}) == (404, "No such user.")
    assert await detail({"role_id": role.id, "service_principal_id": "spn_" + missing}) == (
        404,
        "No such service principal.",
    )
    org_role = await realm.role("desk", ["org.members.write"], boundary="organization")
    assert await detail({"role_id": org_role.id, "user_id": user.id, "organization_id": "org_" + missing}) == (
        404,
        "No such organization.",
    )
    assert await detail({"role_id": role.id, "user_id": user.id, "approver_id": "usr_" + missing}) == (
        403,
        "The approver must be an active user of the realm.",
    )
    assert await fetch(realm, "SELECT id FROM role_assignments WHERE role_id = :r", r=role.id) == []


async def test_grants_and_revocations_are_audited_with_their_scope_and_subject(
    client: Client, realm: RealmHandle
) -> None:
    url = realm.api + "/role-assignments"
    org = await realm.organization()
    desk = await realm.role("desk", ["org.members.write"], boundary="organization")
    reader = await realm.role("reader", ["realm.users.read"])
    user = await realm.user()
    sp_id = await service_principal(client, realm, "bot")
    approver, _ = await independent_admin(realm, "approver@example.com")
    expires = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)

    in_org = await client.post(
        url,
        json={"role_id": desk.id, "user_id": user.id, "organization_id": org.id, "expires_at": expires.isoformat()},
        headers=realm.headers,
    )
    assert in_org.status_code == 201, in_org.text
    # A role that needs no approval may still name one: the grant records who it was.
    to_sp = await client.post(
        url,
        json={"role_id": reader.id, "service_principal_id": sp_id, "approver_id": approver.id},
        headers=realm.headers,
    )
    assert to_sp.status_code == 201, to_sp.text
    assert to_sp.json()["approver_id"] == approver.id and to_sp.json()["service_principal_id"] == sp_id
    for made in (in_org, to_sp):
        assert (await client.delete(f"{url}/{made.json()['id']}", headers=realm.headers)).status_code == 204

    audit = await fetch(
        realm,
        "SELECT type, category, subject_type, subject_id, details FROM audit_events "
        "WHERE type IN ('role.assigned', 'role.revoked') AND subject_id IN (:u, :s) ORDER BY id",
        u=user.id,
        s=sp_id,
    )
    user_grant, sp_grant = in_org.json()["id"], to_sp.json()["id"]
    assert audit == [
        (
            "role.assigned",
            "authorization",
            "user",
            user.id,
            {
                "assignment_id": user_grant,
                "role_id": desk.id,
                "role": "desk",
                "organization_id": org.id,
                "expires_at": expires.isoformat(),
                "approver_id": None,
            },
        ),
        (
            "role.assigned",
            "authorization",
            "service_principal",
            sp_id,
            {
                "assignment_id": sp_grant,
                "role_id": reader.id,
                "role": "reader",
                "organization_id": None,
                "expires_at": None,
                "approver_id": approver.id,
            },
        ),
        (
            "role.revoked",
            "authorization",
            "user",
            user.id,
            {"assignment_id": user_grant, "role_id": desk.id, "role": "desk", "organization_id": org.id},
        ),
        (
            "role.revoked",
            "authorization",
            "service_principal",
            sp_id,
            {"assignment_id": sp_grant, "role_id": reader.id, "role": "reader", "organization_id": None},
        ),
    ]


async def test_an_approver_who_is_not_independent_is_refused_and_audited_with_the_scope(
    client: Client, realm: RealmHandle
) -> None:
    org = await realm.organization()
    desk = await realm.role("desk", ["org.members.write"], boundary="organization", requires_approval=True)
    subject = await realm.user()
    made_by_admin = await realm.user("made@example.com")
    await realm.assign(made_by_admin, await realm.builtin_role("realm-admin"))
    refused = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": desk.id, "user_id": subject.id, "organization_id": org.id, "approver_id": made_by_admin.id},
        headers=realm.headers,
    )
    assert refused.status_code == 403 and refused.json()["code"] == "reviewer_not_independent", refused.text
    events = await fetch(
        realm,
        "SELECT subject_type, subject_id, details->>'role_id', details->>'organization_id', details->>'reviewer_id' "
        "FROM audit_events WHERE type = 'role.assignment.approver_refused'",
    )
    assert events == [("user", subject.id, desk.id, org.id, made_by_admin.id)]


async def test_an_approved_assignment_keeps_its_organization(client: Client, realm: RealmHandle) -> None:
    org = await realm.organization()
    desk = await realm.role("desk", ["org.members.write"], boundary="organization", requires_approval=True)
    subject = await realm.user()
    approver, approver_session = await independent_admin(realm, "approver@example.com")
    requested = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": desk.id, "user_id": subject.id, "organization_id": org.id, "approver_id": approver.id},
        headers=realm.headers,
    )
    assert requested.status_code == 202, requested.text
    approval_id = requested.json()["approval"]["id"]
    decided = await client.post(f"{realm.api}/approvals/{approval_id}/approve", json={}, headers=approver_session)
    assert decided.status_code == 200, decided.text
    made = await fetch(
        realm, "SELECT user_id, organization_id, approver_id FROM role_assignments WHERE role_id = :r", r=desk.id
    )
    assert made == [(subject.id, org.id, approver.id)]


async def test_assignments_are_listed_page_by_page_and_by_organization(client: Client, realm: RealmHandle) -> None:
    north, south = await realm.organization("North"), await realm.organization("South")
    desk = await realm.role("desk", ["org.members.write"], boundary="organization")
    user = await realm.user()
    in_north = await realm.assign(user, desk, organization_id=north.id)
    in_south = await realm.assign(user, desk, organization_id=south.id)
    url = realm.api + "/role-assignments"
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(5):  # a cursor that never moves on must not loop forever
        params: dict[str, Any] = {"limit": 1, "role_id": desk.id} | ({"cursor": cursor} if cursor else {})
        page = (await client.get(url, params=params, headers=realm.headers)).json()
        seen += [a["id"] for a in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted([in_north.id, in_south.id])
    only_north = (await client.get(url, params={"organization_id": north.id}, headers=realm.headers)).json()
    assert [a["id"] for a in only_north["items"]] == [in_north.id]


async def test_the_holders_of_a_role_are_labelled_by_email_and_name_in_their_realm_only(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("holder@example.com")
    sp_id = await service_principal(client, realm, "deploy-bot")
    other = await make_realm(realm.sessions)
    stranger = await other.user("stranger@example.com")
    async with realm.sessions() as session:
        labels = await principal_labels(session, realm.id, [user.id, sp_id, stranger.id, None, "usr_" + "0" * 26])
        assert labels == {user.id: "holder@example.com", sp_id: "deploy-bot"}
        assert await principal_labels(session, realm.id, [sp_id]) == {sp_id: "deploy-bot"}
        assert await principal_labels(session, realm.id, []) == {}


async def test_an_assignment_expires_at_its_moment_not_a_microsecond_before(client: Client, realm: RealmHandle) -> None:
    org = await realm.organization()
    desk = await realm.role("desk", ["org.members.write"], boundary="organization")
    user = await realm.user()
    due = await realm.assign(user, desk, organization_id=org.id, expires_in=timedelta(minutes=5))
    assert due.expires_at is not None
    async with realm.sessions() as session, session.begin():
        assert await expire_due_assignments(session, due.expires_at - timedelta(microseconds=1)) == 0
    async with realm.sessions() as session, session.begin():
        assert await expire_due_assignments(session, due.expires_at) == 1
    expected = {
        "assignment_id": due.id,
        "role_id": desk.id,
        "user_id": user.id,
        "service_principal_id": None,
        "organization_id": org.id,
        "expires_at": due.expires_at.isoformat(),
    }
    outbox = await fetch(realm, "SELECT subject_id, payload FROM outbox_events WHERE type = 'role.assignment.expired'")
    assert outbox == [(user.id, expected)]
    audit = await fetch(
        realm, "SELECT subject_type, subject_id, details FROM audit_events WHERE type = 'role.assignment.expired'"
    )
    assert audit == [("user", user.id, expected | {"role": "desk"})]


async def test_a_grant_past_its_expiry_is_no_longer_held_so_it_may_be_given_again(
    client: Client, realm: RealmHandle
) -> None:
    role = await realm.role("reader", ["realm.users.read"])
    user = await realm.user()
    await realm.assign(user, role, expires_in=timedelta(minutes=1))
    url = realm.api + "/role-assignments"
    held = await client.post(url, json={"role_id": role.id, "user_id": user.id}, headers=realm.headers)
    assert held.status_code == 409 and held.json()["detail"] == "The user already holds reader in that scope."
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE role_assignments SET expires_at = :t WHERE role_id = :r"),
            {"t": SYSTEM_CLOCK.now() - timedelta(seconds=1), "r": role.id},
        )
    again = await client.post(url, json={"role_id": role.id, "user_id": user.id}, headers=realm.headers)
    assert again.status_code == 201, again.text
