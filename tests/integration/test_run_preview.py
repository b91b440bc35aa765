"""The preview of a run (``POST /workflows/{id}/preview``): step by step what the run would do, or
the refusal it would meet now, by the same decisions as the worker; it writes nothing."""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.authz import load_authority
from engine.directory.groups import create_group
from testing.factories import RealmHandle, bearer
from testing.runs import drain, load, make_runner
from testing.workflows import publish

Client = AsyncTestClient[Litestar]

COUNTED = (
    "workflow_runs",
    "step_attempts",
    "audit_events",
    "outbox_events",
    "workflow_approvals",
    "workflow_notices",
    "role_assignments",
    "group_members",
    "memberships",
)


def definition(*steps: dict[str, Any], triggers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"schema_version": 1, "triggers": triggers or [{"type": "manual"}], "steps": list(steps)}


async def rows(realm: RealmHandle) -> dict[str, int]:
    async with realm.sessions() as session:
        return {t: int(await session.scalar(text(f"SELECT count(*) FROM {t}")) or 0) for t in COUNTED}


async def preview(
    client: Client, realm: RealmHandle, wid: str, headers: dict[str, str] | None = None, **body: Any
) -> Any:
    return await client.post(f"{realm.api}/workflows/{wid}/preview", json=body, headers=headers or realm.headers)


def outcomes(answer: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    return [(s["step_id"], s["outcome"], (s["refusal"] or {}).get("category")) for s in answer["steps"]]


async def group_of(realm: RealmHandle, org_id: str, name: str = "Team") -> str:
    async with realm.sessions() as session, session.begin():
        authority = await load_authority(session, realm.id, "user", realm.admin.id)
        group, _ = await create_group(session, realm.actor, authority, org_id, name=name)
    return group.id


async def test_every_step_is_judged_after_an_approval_as_if_approved_and_nothing_is_written(
    client: Client, realm: RealmHandle
) -> None:
    subject = await realm.user("subject@example.com")
    approver = await realm.user("approver@example.com")
    admin_role = await realm.builtin_role("realm-admin")
    await realm.assign(approver, admin_role)
    auditor = await realm.role("Auditor", ["realm.audit.read"], requires_approval=True)
    org = await realm.organization("Eng")
    await realm.member(org, subject)
    group_id = await group_of(realm, org.id)
    wid = await publish(
        realm,
        definition(
            {"id": "ask", "type": "approval", "approvers": [approver.id, subject.id], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": auditor.id, "scope": "realm"},
            {"id": "team", "type": "add_to_group", "group_id": group_id},
            {"id": "out", "type": "remove_from_group", "group_id": group_id},
            {"id": "tell", "type": "notify", "notice": "access_granted"},
            {"id": "done", "type": "end"},
        ),
    )
    before = await rows(realm)
    answer = await preview(client, realm, wid, subject_id=subject.id)
    assert answer.status_code == 200, answer.text
    assert await rows(realm) == before
    found = answer.json()
    assert (found["revision"], found["outcome"], found["publisher_id"]) == (1, "would_succeed", realm.admin.id)
    assert [s["outcome"] for s in found["steps"]] == ["would_succeed"] * 6
    ask, grant, team, out, tell, done = found["steps"]
    # Who may decide: the subject is never one of them.
    assert ask["effect"]["values"]["approvers"] == [approver.id]
    # The grant is judged as approved by the eligible approver, and says so as data and in words.
    assert grant["effect"]["values"]["approver_id"] == approver.id
    assert grant["effect"]["values"]["role_id"] == auditor.id and "Auditor" in grant["summary"]
    assert [a["type"] for a in grant["effect"]["audit"]] == ["role.assigned"]
    # The group step after the join is judged on the join: the subject would be in the group by then.
    assert team["effect"]["kind"] == "add_to_group" and out["effect"]["kind"] == "remove_from_group"
    assert tell["effect"]["values"]["to_address"] == "subject@example.com"
    assert done["effect"]["ends_run"] is True


async def test_a_refusal_names_its_category_and_the_steps_after_it_are_not_reached(
    client: Client, realm: RealmHandle
) -> None:
    subject = await realm.user("subject@example.com")
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    await realm.assign(subject, viewer)
    wid = await publish(
        realm,
        definition(
            {"id": "grant", "type": "assign_role", "role_id": viewer.id, "scope": "realm"},
            {"id": "done", "type": "end"},
        ),
    )
    found = (await preview(client, realm, wid, subject_id=subject.id)).json()
    assert found["outcome"] == "would_fail"
    assert outcomes(found) == [("grant", "would_fail", "conflict"), ("done", "not_reached", None)]
    refusal = found["steps"][0]["refusal"]
    assert refusal == {
        "category": "conflict",
        "message": "The user already holds viewer in that scope.",
        "permanent": True,
    }
    # The run, started with nothing changed in between, meets the very same refusal.
    r = make_runner(realm)
    started = await client.post(
        f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
    )
    await drain(r)
    _, attempts = await load(realm, started.json()["id"])
    assert [(a.step_id, a.error_category, a.error_message) for a in attempts] == [
        ("grant", "conflict", refusal["message"])
    ]


async def test_refusals_of_approvals_organizations_and_notices(client: Client, realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    approver = await realm.user("approver@example.com")
    scoped = await realm.role("Org viewer", ["realm.workflows.read"], boundary="organization")
    approval = await publish(
        realm, definition({"id": "ask", "type": "approval", "approvers": [approver.id, subject.id], "expires_in": "1h"})
    )
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE users SET status = 'suspended' WHERE id = :u"), {"u": approver.id})
    found = (await preview(client, realm, approval, subject_id=subject.id)).json()
    assert outcomes(found) == [("ask", "would_fail", "no_eligible_approver")]
    grant = await publish(
        realm,
        definition({"id": "grant", "type": "assign_role", "role_id": scoped.id, "scope": "organization"}),
        name="Grant",
    )
    found = (await preview(client, realm, grant, subject_id=subject.id)).json()
    assert outcomes(found) == [("grant", "would_fail", "organization_required")]
    org = await realm.organization("Eng")
    found = (await preview(client, realm, grant, subject_id=subject.id, organization_id=org.id)).json()
    assert outcomes(found) == [("grant", "would_succeed", None)]
    assert found["steps"][0]["effect"]["values"]["organization_id"] == org.id
    # A person reads the organization's name; the id stays in the effect's values.
    assert found["steps"][0]["summary"] == "Grants Org viewer in Eng." and org.id not in found["steps"][0]["summary"]
    leave = await publish(
        realm, definition({"id": "leave", "type": "remove_membership", "organization_id": org.id}), name="Leave"
    )
    found = (await preview(client, realm, leave, subject_id=subject.id)).json()
    assert outcomes(found) == [("leave", "would_fail", "not_a_member")]
    await realm.member(org, subject)
    found = (await preview(client, realm, leave, subject_id=subject.id)).json()
    assert outcomes(found) == [("leave", "would_succeed", None)]
    assert found["steps"][0]["summary"] == "Takes the subject out of the organization Eng."


async def test_the_preview_keeps_the_rules_of_a_manual_start(client: Client, realm: RealmHandle) -> None:
    subject = await realm.user("subject@example.com")
    wid = await publish(realm, definition({"id": "done", "type": "end"}))
    own = await preview(client, realm, wid, subject_id=realm.admin.id)
    assert own.status_code == 403 and own.json()["code"] == "self_action"
    missing = await preview(client, realm, wid, subject_id="usr_" + "0" * 26)
    assert missing.status_code == 422 and missing.json()["errors"][0]["path"] == "/subject_id"
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, await realm.role("reader", ["realm.workflows.read"]))
    refused = await preview(client, realm, wid, bearer(await realm.token(reader)), subject_id=subject.id)
    assert refused.status_code == 403
    no_revision = await preview(client, realm, wid, subject_id=subject.id, revision=2)
    assert no_revision.status_code == 404
    assert (await preview(client, realm, wid, subject_id=subject.id, revision=1)).status_code == 200


async def test_a_call_is_judged_without_calling(client: Client, realm: RealmHandle) -> None:
    """The egress policy's verdict on the destination (the operator allows no private egress here),
    and the subscription's state; nothing is sent, and the attempt the run would record is named."""
    subject = await realm.user("subject@example.com")
    private = await client.post(
        f"{realm.api}/webhooks",
        json={"destination": "http://10.1.2.3/hook", "allow_private_network": True},
        headers=realm.headers,
    )
    assert private.status_code == 201, private.text
    wid = await publish(
        realm,
        definition(
            {"id": "call", "type": "call_webhook", "subscription_id": private.json()["id"]},
            {"id": "done", "type": "end"},
        ),
    )
    found = (await preview(client, realm, wid, subject_id=subject.id)).json()
    assert outcomes(found) == [("call", "would_fail", "egress_denied"), ("done", "not_reached", None)]
    assert found["steps"][0]["refusal"]["permanent"] is False  # retried, as the transport's verdict is
    paused = await client.patch(
        f"{realm.api}/webhooks/{private.json()['id']}", json={"state": "paused"}, headers=realm.headers
    )
    assert paused.status_code == 200, paused.text
    found = (await preview(client, realm, wid, subject_id=subject.id)).json()
    assert outcomes(found)[0] == ("call", "would_fail", "subscription_paused")
