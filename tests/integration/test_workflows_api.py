"""Workflows and revisions through the API (seed 000: TestWorkflowValidation, TestWorkflowDelegationCeiling,
and the revision half of TestWorkflowRevisionsRollbackAndDisable)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import RealmHandle, bearer, independent_admin

Client = AsyncTestClient[Litestar]


def definition(*steps: dict[str, Any], triggers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "triggers": triggers or [{"type": "manual"}],
        "steps": [*steps, {"id": "done", "type": "end"}],
    }


async def second_admin(realm: RealmHandle, email: str = "second-admin@example.com") -> dict[str, str]:
    """The headers of an independent second administrator's session (an MFA browser session)."""
    _, headers = await independent_admin(realm, email)
    return headers


async def count(realm: RealmHandle, sql: str) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text(sql), {"r": realm.id}) or 0)


async def audit_types(realm: RealmHandle, workflow_id: str) -> list[str]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT type FROM audit_events WHERE subject_id = :w ORDER BY id"), {"w": workflow_id}
        )
        return list(rows.scalars())


class TestWorkflowValidation:
    async def test_created_with_a_first_revision_stored_canonically(self, client: Client, realm: RealmHandle) -> None:
        role = await realm.role("viewer", ["realm.workflows.read"])
        body = definition({"type": "assign_role", "scope": "realm", "role_id": role.id, "id": "grant"})
        response = await client.post(
            realm.api + "/workflows", json={"name": "Onboarding", "definition": body}, headers=realm.headers
        )
        assert response.status_code == 201, response.text
        created = response.json()
        assert created["state"] == "draft" and created["requires_approval"] is False
        revision = created["revision"]
        assert revision["number"] == 1 and revision["status"] == "draft"
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert revision["hash"] == hashlib.sha256(canonical.encode()).hexdigest()
        async with realm.sessions() as session:
            stored = await session.scalar(
                text("SELECT canonical FROM workflow_revisions WHERE workflow_id = :w"), {"w": created["id"]}
            )
        assert stored == canonical
        assert await audit_types(realm, created["id"]) == ["workflow.created", "workflow.revision.staged"]

    async def test_unknown_and_misplaced_members_are_refused_and_nothing_is_created(
        self, client: Client, realm: RealmHandle
    ) -> None:
        bad = definition(
            {
                "id": "x",
                "type": "wait",
                "duration": "1h",
                "script": "rm -rf /",
                "retry": {"max_attempts": 2, "backoff": "1s"},
            }
        )
        response = await client.post(
            realm.api + "/workflows", json={"name": "Bad", "definition": bad}, headers=realm.headers
        )
        assert response.status_code == 422
        problem = response.json()
        assert problem["code"] == "validation_failed"
        paths = {e["path"] for e in problem["errors"]}
        assert "/definition/steps/0/script" in paths and "/definition/steps/0/retry" in paths
        assert await count(realm, "SELECT count(*) FROM workflows WHERE realm_id = :r") == 0

    async def test_references_are_checked_in_the_realm(
        self, client: Client, realm: RealmHandle, other_realm: RealmHandle
    ) -> None:
        org_role = await realm.role("org-viewer", ["realm.workflows.read"], boundary="organization")
        foreign_role = await other_realm.role("foreign", ["realm.workflows.read"])
        guest = await realm.user("guest@example.com", guest=True)
        body = definition(
            {"id": "approve", "type": "approval", "approvers": [guest.id], "expires_in": "72h"},
            {"id": "grant", "type": "assign_role", "role_id": org_role.id, "scope": "realm"},
            {"id": "grant2", "type": "assign_role", "role_id": foreign_role.id, "scope": "realm"},
        )
        response = await client.post(
            realm.api + "/workflows/validate", json={"definition": body}, headers=realm.headers
        )
        assert response.status_code == 200
        result = response.json()
        assert result["valid"] is False
        by_path = {e["path"]: e["code"] for e in result["errors"]}
        assert by_path["/definition/steps/0/approvers/0"] == "not_eligible"
        assert by_path["/definition/steps/1/role_id"] == "boundary_mismatch"
        assert by_path["/definition/steps/2/role_id"] == "not_found"

    async def test_every_kind_of_reference_the_realm_holds_is_valid_and_its_state_is_read(
        self, client: Client, realm: RealmHandle
    ) -> None:
        """A role of each boundary, an active organization, its group, an active approver and a
        subscription: all found, the definition is valid. Then an inactive organization and a deleted
        subscription: each named at its path."""
        realm_role = await realm.role("clerk", ["realm.users.read"])
        org_role = await realm.role("org-clerk", ["realm.users.read"], boundary="organization")
        org = await realm.organization("Front office")
        closed = await realm.organization("Closed office")
        group = (
            await client.post(
                f"{realm.api}/organizations/{org.id}/groups", json={"name": "Desk"}, headers=realm.headers
            )
        ).json()
        approver = await realm.user("approver@example.com")
        hook = (
            await client.post(
                realm.api + "/webhooks", json={"destination": "https://c.example.com/"}, headers=realm.headers
            )
        ).json()
        gone = (
            await client.post(
                realm.api + "/webhooks", json={"destination": "https://d.example.com/"}, headers=realm.headers
            )
        ).json()

        async def validate(*steps: dict[str, Any]) -> dict[str, Any]:
            response = await client.post(
                realm.api + "/workflows/validate", json={"definition": definition(*steps)}, headers=realm.headers
            )
            assert response.status_code == 200, response.text
            answer: dict[str, Any] = response.json()
            return answer

        found = await validate(
            {
                "id": "ask",
                "type": "approval",
                "approvers": [approver.id],
                "organization_id": org.id,
                "expires_in": "72h",
            },
            {"id": "grant", "type": "assign_role", "role_id": realm_role.id, "scope": "realm"},
            {"id": "grant-org", "type": "assign_role", "role_id": org_role.id, "scope": "organization"},
            {"id": "team", "type": "add_to_group", "group_id": group["id"]},
            {"id": "sync", "type": "call_webhook", "subscription_id": hook["id"]},
        )
        assert found == {"valid": True, "errors": []}

        async with realm.sessions() as session, session.begin():
            await session.execute(text("UPDATE organizations SET state = 'inactive' WHERE id = :o"), {"o": closed.id})
        deleted = await client.delete(f"{realm.api}/webhooks/{gone['id']}", headers=realm.headers)
        assert deleted.status_code == 204, deleted.text
        refused = await validate(
            {
                "id": "ask",
                "type": "approval",
                "approvers": [approver.id],
                "organization_id": closed.id,
                "expires_in": "72h",
            },
            {"id": "sync", "type": "call_webhook", "subscription_id": gone["id"]},
        )
        assert [(e["path"], e["code"]) for e in refused["errors"]] == [
            ("/definition/steps/0/organization_id", "inactive"),
            ("/definition/steps/1/subscription_id", "not_found"),
        ]

    async def test_validate_has_no_side_effects(self, client: Client, realm: RealmHandle) -> None:
        before = await count(realm, "SELECT count(*) FROM audit_events WHERE realm_id = :r")
        ok = await client.post(
            realm.api + "/workflows/validate", json={"definition": definition()}, headers=realm.headers
        )
        assert ok.json() == {"valid": True, "errors": []}
        for junk in (None, 42, "text", [], {"schema_version": 2}):
            response = await client.post(
                realm.api + "/workflows/validate", json={"definition": junk}, headers=realm.headers
            )
            assert response.status_code == 200 and response.json()["valid"] is False
        assert await count(realm, "SELECT count(*) FROM audit_events WHERE realm_id = :r") == before
        assert await count(realm, "SELECT count(*) FROM workflows WHERE realm_id = :r") == 0

    async def test_name_and_description_limits(self, client: Client, realm: RealmHandle) -> None:
        async def create(**body: Any) -> int:
            response = await client.post(realm.api + "/workflows", json=body, headers=realm.headers)
            return response.status_code

        assert await create(name="n" * 100, description="d" * 500) == 201
        assert await create(name="x") == 201  # the shortest name
        assert await create(name="m" * 101) == 422
        assert await create(name="two\nlines") == 422
        assert await create(name="ok", description="d" * 501) == 422
        assert await create(name="") == 422
        assert await create(name="N" * 100) == 409  # names are unique in the realm, whatever the case

    async def test_requires_approval_comes_from_the_request_or_the_policy_and_fails_closed(
        self, client: Client, realm: RealmHandle
    ) -> None:
        async def create(name: str, **extra: Any) -> bool:
            response = await client.post(realm.api + "/workflows", json={"name": name, **extra}, headers=realm.headers)
            assert response.status_code == 201, response.text
            return bool(response.json()["requires_approval"])

        assert await create("a") is False
        await client.patch(
            realm.api + "/policy", json={"extensions": {"workflow_publish_approval": True}}, headers=realm.headers
        )
        assert await create("b") is True
        refused = await client.post(
            realm.api + "/workflows", json={"name": "c", "requires_approval": False}, headers=realm.headers
        )
        assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "/requires_approval"
        assert await create("c", requires_approval=True) is True
        async with realm.sessions() as session, session.begin():
            await session.execute(text("DELETE FROM realm_policies WHERE realm_id = :r"), {"r": realm.id})
        assert await create("d") is True  # the policy cannot be read: approval required


class TestWorkflowDelegationCeiling:
    async def test_publisher_needs_the_ceiling_of_every_step(self, client: Client, realm: RealmHandle) -> None:
        powerful = await realm.role("powerful", ["realm.users.write", "realm.roles.write"])
        publisher_role = await realm.role("publisher", ["realm.workflows.*", "realm.users.read"])
        publisher = await realm.user("publisher@example.com")
        await realm.assign(publisher, publisher_role)
        token = await realm.token(publisher)
        body = definition(
            {"id": "wait", "type": "wait", "duration": "1h"},
            {"id": "grant", "type": "assign_role", "role_id": powerful.id, "scope": "realm"},
        )
        created = await client.post(
            realm.api + "/workflows", json={"name": "Grant", "definition": body}, headers=bearer(token)
        )
        assert created.status_code == 201, created.text
        wid = created.json()["id"]
        refused = await client.post(f"{realm.api}/workflows/{wid}/revisions/1/publish", json={}, headers=bearer(token))
        assert refused.status_code == 403
        problem = refused.json()
        assert problem["code"] == "grant_ceiling_exceeded"
        assert [e["path"] for e in problem["errors"]] == ["/definition/steps/1"]
        assert problem["detail"] == "The publisher lacks the authority some steps need: definition.steps[1]"
        # What the publisher lacks, as a member a program reads: the role's permissions it does not hold.
        assert problem["missing_permissions"] == [
            {"permission": "realm.roles.write", "organization_id": None},
            {"permission": "realm.users.write", "organization_id": None},
        ]
        # Nothing changed.
        workflow = (await client.get(f"{realm.api}/workflows/{wid}", headers=realm.headers)).json()
        assert workflow["state"] == "draft" and workflow["published_revision"] is None
        # An administrator holding everything publishes the same revision.
        ok = await client.post(f"{realm.api}/workflows/{wid}/revisions/1/publish", json={}, headers=realm.headers)
        assert ok.status_code == 200, ok.text
        assert ok.json()["workflow"]["state"] == "active"

    async def test_group_and_suspension_steps_need_their_permissions(self, client: Client, realm: RealmHandle) -> None:
        org = await realm.organization("Engineering")
        group = (
            await client.post(
                f"{realm.api}/organizations/{org.id}/groups", json={"name": "Team"}, headers=realm.headers
            )
        ).json()
        publisher_role = await realm.role("publisher", ["realm.workflows.*"])
        publisher = await realm.user("publisher@example.com")
        await realm.assign(publisher, publisher_role)
        token = await realm.token(publisher)
        body = definition(
            {"id": "team", "type": "add_to_group", "group_id": group["id"]},
            {"id": "suspend", "type": "suspend_user"},
        )
        created = await client.post(
            realm.api + "/workflows", json={"name": "Team", "definition": body}, headers=bearer(token)
        )
        wid = created.json()["id"]
        refused = await client.post(f"{realm.api}/workflows/{wid}/revisions/1/publish", json={}, headers=bearer(token))
        assert refused.status_code == 403
        assert refused.json()["code"] == "forbidden"
        assert [e["path"] for e in refused.json()["errors"]] == ["/definition/steps/0", "/definition/steps/1"]
        assert refused.json()["detail"] == (
            "The publisher lacks the authority some steps need: definition.steps[0], definition.steps[1]"
        )

    async def test_publishing_needs_the_publish_permission(self, client: Client, realm: RealmHandle) -> None:
        writer_role = await realm.role("writer", ["realm.workflows.read", "realm.workflows.write"])
        writer = await realm.user("writer@example.com")
        await realm.assign(writer, writer_role)
        token = await realm.token(writer)
        created = await client.post(
            realm.api + "/workflows", json={"name": "W", "definition": definition()}, headers=bearer(token)
        )
        wid = created.json()["id"]
        refused = await client.post(f"{realm.api}/workflows/{wid}/revisions/1/publish", json={}, headers=bearer(token))
        assert refused.status_code == 403


class TestWorkflowRevisionsRollbackAndDisable:
    async def test_approval_separation_of_duties_publication_and_rollback(
        self, client: Client, realm: RealmHandle
    ) -> None:
        other = await second_admin(realm)
        created = await client.post(
            realm.api + "/workflows",
            json={"name": "Reviewed", "requires_approval": True, "definition": definition()},
            headers=realm.headers,
        )
        wid = created.json()["id"]
        base = f"{realm.api}/workflows/{wid}"
        # The author can neither approve nor publish an unapproved revision.
        own = await client.post(f"{base}/revisions/1/approve", json={}, headers=realm.headers)
        assert own.status_code == 403
        unapproved = await client.post(f"{base}/revisions/1/publish", json={}, headers=realm.headers)
        assert unapproved.status_code == 403 and unapproved.json()["code"] == "approval_required"
        approved = await client.post(f"{base}/revisions/1/approve", json={"comment": "looks right"}, headers=other)
        assert approved.status_code == 200 and approved.json()["status"] == "approved"
        assert approved.json()["decision_comment"] == "looks right"
        published = await client.post(f"{base}/revisions/1/publish", json={}, headers=realm.headers)
        assert published.status_code == 200 and published.json()["revision"]["status"] == "published"
        # A second revision, approved and published, supersedes the first.
        second = definition({"id": "pause", "type": "wait", "duration": "2h"})
        staged = await client.post(f"{base}/revisions", json={"definition": second}, headers=realm.headers)
        assert staged.status_code == 201 and staged.json()["number"] == 2
        assert (await client.post(f"{base}/revisions/2/approve", json={}, headers=other)).status_code == 200
        assert (await client.post(f"{base}/revisions/2/publish", json={}, headers=realm.headers)).status_code == 200
        statuses = {
            r["number"]: r["status"]
            for r in (await client.get(f"{base}/revisions", headers=realm.headers)).json()["items"]
        }
        assert statuses == {1: "superseded", 2: "published"}
        # Diff between the two.
        diff = (await client.get(f"{base}/revisions/2/diff", params={"against": "1"}, headers=realm.headers)).json()
        assert diff["structured"]["steps"]["added"][0]["id"] == "pause"
        assert any(chunk["op"] != "equal" for chunk in diff["lines"])
        # Rollback to 1: the caller becomes accountable; 2 is superseded.
        back = await client.post(f"{base}/rollback", json={"revision": 1}, headers=other)
        assert back.status_code == 200, back.text
        assert back.json()["revision"]["published_by"] != realm.admin.id
        statuses = {
            r["number"]: r["status"]
            for r in (await client.get(f"{base}/revisions", headers=realm.headers)).json()["items"]
        }
        assert statuses == {1: "published", 2: "superseded"}
        assert (await client.post(f"{base}/rollback", json={"revision": 1}, headers=other)).status_code == 409
        types = await audit_types(realm, wid)
        assert types[:2] == ["workflow.created", "workflow.revision.staged"]
        assert {"workflow.revision.approved", "workflow.published", "workflow.rolled_back"} <= set(types)

    async def test_rejected_revisions_cannot_be_published(self, client: Client, realm: RealmHandle) -> None:
        other = await second_admin(realm)
        wid = (
            await client.post(
                realm.api + "/workflows", json={"name": "R", "definition": definition()}, headers=realm.headers
            )
        ).json()["id"]
        base = f"{realm.api}/workflows/{wid}"
        assert (
            await client.post(f"{base}/revisions/1/reject", json={"comment": "no"}, headers=other)
        ).status_code == 200
        assert (await client.post(f"{base}/revisions/1/publish", json={}, headers=realm.headers)).status_code == 409
        assert (await client.post(f"{base}/revisions/1/approve", json={}, headers=other)).status_code == 409

    async def test_publication_never_re_enables_a_disabled_workflow(self, client: Client, realm: RealmHandle) -> None:
        wid = (
            await client.post(
                realm.api + "/workflows", json={"name": "D", "definition": definition()}, headers=realm.headers
            )
        ).json()["id"]
        base = f"{realm.api}/workflows/{wid}"
        disabled = await client.post(f"{base}/disable", headers=realm.headers)
        assert disabled.json()["state"] == "disabled"
        published = await client.post(f"{base}/revisions/1/publish", json={}, headers=realm.headers)
        assert published.status_code == 200 and published.json()["workflow"]["state"] == "disabled"
        assert (await client.post(f"{base}/disable", headers=realm.headers)).status_code == 409
        enabled = await client.post(f"{base}/enable", headers=realm.headers)
        assert enabled.json()["state"] == "active"
        assert (await client.delete(base, headers=realm.headers)).status_code == 204
        assert (await client.get(base, headers=realm.headers)).status_code == 404
        assert {"workflow.disabled", "workflow.enabled", "workflow.deleted"} <= set(await audit_types(realm, wid))

    async def test_disabling_a_workflow_raises_a_security_alert(self, client: Client, realm: RealmHandle) -> None:
        wid = (
            await client.post(
                realm.api + "/workflows",
                json={"name": "Offboarding", "definition": definition()},
                headers=realm.headers,
            )
        ).json()["id"]
        base = f"{realm.api}/workflows/{wid}"
        assert (await client.post(f"{base}/disable", headers=realm.headers)).status_code == 200
        assert (await client.post(f"{base}/enable", headers=realm.headers)).status_code == 200
        async with realm.sessions() as session:
            alerts = (
                await session.execute(
                    text(
                        "SELECT category, actor_id, details FROM audit_events"
                        " WHERE type = 'security.alert' AND subject_id = :w"
                    ),
                    {"w": wid},
                )
            ).all()
        # One alert: for the disabling, by the administrator who disabled it; enabling raises none.
        assert [tuple(a) for a in alerts] == [
            ("security", realm.admin.id, {"reason": "workflow_disabled", "workflow_id": wid, "name": "Offboarding"})
        ]
        listed = await client.get(realm.api + "/audit-events", params={"category": "security"}, headers=realm.headers)
        assert listed.status_code == 200 and [e["type"] for e in listed.json()["items"]] == ["security.alert"]

    async def test_plugin_workflows_are_changed_only_through_their_plugin(
        self, client: Client, realm: RealmHandle
    ) -> None:
        wid = (
            await client.post(
                realm.api + "/workflows", json={"name": "P", "definition": definition()}, headers=realm.headers
            )
        ).json()["id"]
        async with realm.sessions() as session, session.begin():
            await session.execute(text("UPDATE workflows SET plugin_id = 'acme-hr' WHERE id = :w"), {"w": wid})
        base = f"{realm.api}/workflows/{wid}"
        calls = [
            ("POST", f"{base}/revisions", {"definition": definition()}),
            ("POST", f"{base}/revisions/1/approve", {}),
            ("POST", f"{base}/revisions/1/reject", {}),
            ("POST", f"{base}/revisions/1/publish", {}),
            ("POST", f"{base}/rollback", {"revision": 1}),
            ("POST", f"{base}/enable", None),
            ("POST", f"{base}/disable", None),
            ("DELETE", base, None),
        ]
        for method, url, body in calls:
            response = await client.request(method, url, json=body, headers=realm.headers)
            assert response.status_code == 409, (method, url, response.text)

    async def test_contracts_are_served(self, client: Client) -> None:
        for name in ("definition.v1.json", "step-call.v1.json"):
            response = await client.get(f"/api/v1/contracts/workflows/{name}")
            assert response.status_code == 200
            assert response.json()["$schema"].startswith("https://json-schema.org/draft/2020-12")
        assert (await client.get("/api/v1/contracts/workflows/other.json")).status_code == 404


async def test_decisions_and_cancellation_take_an_optional_body(client: Client, realm: RealmHandle) -> None:
    wid = (
        await client.post(
            realm.api + "/workflows", json={"name": "B", "definition": definition()}, headers=realm.headers
        )
    ).json()["id"]
    published = await client.post(f"{realm.api}/workflows/{wid}/revisions/1/publish", headers=realm.headers)
    assert published.status_code == 200, published.text


async def test_saving_the_latest_definition_again_makes_no_new_revision(client: Client, realm: RealmHandle) -> None:
    first = definition({"id": "pause", "type": "wait", "duration": "1h"})
    created = await client.post(
        realm.api + "/workflows", json={"name": "Same", "definition": first}, headers=realm.headers
    )
    base = f"{realm.api}/workflows/{created.json()['id']}"
    # The same definition with its keys in another order: nothing changed, revision 1 comes back.
    reordered = {"steps": [{"type": "wait", "duration": "1h", "id": "pause"}, {"type": "end", "id": "done"}]}
    reordered |= {"triggers": [{"type": "manual"}], "schema_version": 1}
    audit_before = await audit_types(realm, created.json()["id"])
    same = await client.post(f"{base}/revisions", json={"definition": reordered}, headers=realm.headers)
    assert same.status_code == 200, same.text
    assert same.json()["number"] == 1 and "location" not in same.headers
    assert await audit_types(realm, created.json()["id"]) == audit_before
    # One character different: a new draft revision.
    changed = definition({"id": "pause", "type": "wait", "duration": "2h"})
    staged = await client.post(f"{base}/revisions", json={"definition": changed}, headers=realm.headers)
    assert staged.status_code == 201 and staged.json()["number"] == 2
    # Going back to revision 1's text is a change against the latest (2): revision 3.
    back = await client.post(f"{base}/revisions", json={"definition": first}, headers=realm.headers)
    assert back.status_code == 201 and back.json()["number"] == 3
    again = await client.post(f"{base}/revisions", json={"definition": first}, headers=realm.headers)
    assert again.status_code == 200 and again.json()["number"] == 3
    numbers = [r["number"] for r in (await client.get(f"{base}/revisions", headers=realm.headers)).json()["items"]]
    assert sorted(numbers) == [1, 2, 3]


async def test_a_workflows_name_description_and_owner_change_and_are_read_back(
    client: Client, realm: RealmHandle
) -> None:
    created = await client.post(
        realm.api + "/workflows", json={"name": "Before", "description": "Old words"}, headers=realm.headers
    )
    base = f"{realm.api}/workflows/{created.json()['id']}"
    owner = await realm.user("owner@example.com")
    changed = await client.patch(
        base, json={"name": "After", "description": "New words", "owner_id": owner.id}, headers=realm.headers
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["name"], body["description"], body["owner_id"]) == ("After", "New words", owner.id)
    assert (await client.get(base, headers=realm.headers)).json() == body
    async with realm.sessions() as session:
        details = await session.scalar(
            text("SELECT details FROM audit_events WHERE subject_id = :w AND type = 'workflow.updated'"),
            {"w": body["id"]},
        )
    assert details == {"changed": ["description", "name", "owner_id"]}


async def test_a_decisions_and_a_publications_comment_is_kept(client: Client, realm: RealmHandle) -> None:
    other = await second_admin(realm)
    rejected_id = (
        await client.post(
            realm.api + "/workflows", json={"name": "Rejected", "definition": definition()}, headers=realm.headers
        )
    ).json()["id"]
    rejected = await client.post(
        f"{realm.api}/workflows/{rejected_id}/revisions/1/reject", json={"comment": "not yet"}, headers=other
    )
    assert rejected.status_code == 200, rejected.text
    assert (rejected.json()["status"], rejected.json()["decision_comment"]) == ("rejected", "not yet")

    wid = (
        await client.post(
            realm.api + "/workflows", json={"name": "Shipped", "definition": definition()}, headers=realm.headers
        )
    ).json()["id"]
    published = await client.post(
        f"{realm.api}/workflows/{wid}/revisions/1/publish", json={"comment": "ship it"}, headers=realm.headers
    )
    assert published.status_code == 200, published.text
    async with realm.sessions() as session:
        comment = await session.scalar(
            text("SELECT details->>'comment' FROM audit_events WHERE subject_id = :w AND type = 'workflow.published'"),
            {"w": wid},
        )
    assert comment == "ship it"
