"""The API's declared answer shapes: every operation answers a named, typed shape of the OpenAPI
document, and every answer is sent as the engine's read model (``engine/<area>/read_models.py``),
the one declaration of both.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient

from cockpit.app import create_app
from cockpit.openapi import declare_problem_responses
from engine.directory import webhooks
from engine.directory.authz import LEVELS
from engine.directory.organizations import ORGANIZATION_STATES
from engine.directory.principals import USER_STATUSES
from engine.directory.roles import ROLE_BOUNDARIES
from engine.endpoints import deliveries
from engine.platform.config import VERSION, Settings
from engine.runs.approval_models import NOTICE_STATES
from engine.runs.attention import ATTENTION_FILTERS
from engine.runs.diagnostics import HEALTH_STATES
from engine.workflows.models import REVISION_STATUSES, WORKFLOW_STATES
from testing.factories import RealmHandle, independent_admin
from testing.runs import drain, make_runner

Client = AsyncTestClient[Litestar]

# Members whose value is free-form by nature: a step's input and result, an audit
# event's details, what a role-assignment approval would grant.
FREE_FORM = {
    ("AuditEvent", "details"),
    ("WorkflowRun", "input"),
    ("RunWithAttempts", "input"),
    ("RunTimeline", "input"),
    ("StepAttempt", "input"),
    ("StepAttempt", "result"),
    ("Compensation", "result"),
    ("Approval", "request"),
    ("PreviewEffect", "values"),  # the rows a previewed step would write, by step type
    ("PreviewEffect", "result"),  # its attempt's result, as a step attempt's
    ("PreviewAuditEvent", "details"),
}
# Answers that are free-form documents themselves: the JSON Schemas of the public contracts.
FREE_FORM_OPERATIONS = {"getWorkflowContract"}


def _document(settings: Settings, database_url: str) -> dict[str, Any]:
    document: dict[str, Any] = declare_problem_responses(create_app(settings, database_url=database_url)).to_schema()
    return document


def _bare_object(schema: dict[str, Any]) -> bool:
    """An object that says nothing of its members (``{"type": "object"}``, any values)."""
    variants = schema.get("oneOf") or schema.get("anyOf") or [schema]
    for variant in variants:
        if variant.get("type") == "object" and not variant.get("properties"):
            extra = variant.get("additionalProperties")
            if extra in (None, True, {}):
                return True
    return False


def test_every_operation_answers_a_named_typed_shape(settings: Settings, database_url: str) -> None:
    document = _document(settings, database_url)
    components = document["components"]["schemas"]
    untyped: list[str] = []
    referenced: set[str] = set()
    operations = 0
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            operations += 1
            if operation["operationId"] in FREE_FORM_OPERATIONS:
                continue
            for status, response in operation["responses"].items():
                for media_type, content in (response.get("content") or {}).items():
                    if not media_type.endswith("json"):
                        continue
                    ref = content.get("schema", {}).get("$ref", "")
                    if not ref.startswith("#/components/schemas/"):
                        untyped.append(f"{method.upper()} {path} {status}: {content.get('schema')}")
                        continue
                    referenced.add(ref.rsplit("/", 1)[1])
    assert operations > 80
    assert not untyped, "\n".join(untyped)
    assert {"RunTimeline", "WorkflowRunPage", "Workflow", "WorkflowRevision", "Problem", "Readiness"} <= referenced

    # Every member of every shape reachable from an answer is typed, except the free-form ones.
    seen: set[str] = set()
    bare: list[str] = []

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for member, schema in (components[name].get("properties") or {}).items():
            if _bare_object(schema) and (name, member) not in FREE_FORM:
                bare.append(f"{name}.{member}")
            for ref in _refs(schema):
                walk(ref)

    for name in sorted(referenced):
        walk(name)
    assert not bare, bare
    assert {"StepAttempt", "Approval", "ApprovalDelegation", "StructuredDiff", "ProblemIssue"} <= seen


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        found = [schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else []
        return found + [r for value in schema.values() for r in _refs(value)]
    if isinstance(schema, list):
        return [r for value in schema for r in _refs(value)]
    return []


def test_problem_answers_are_declared_where_they_can_happen(settings: Settings, database_url: str) -> None:
    document = _document(settings, database_url)
    paths = document["paths"]
    api = "/api/v1/realms/{realm}"

    def statuses(path: str, method: str) -> set[str]:
        responses = paths[path][method]["responses"]
        for status, response in responses.items():
            if status[0] in "45":
                assert list(response["content"]) == ["application/problem+json"], (path, method, status)
                assert response["content"]["application/problem+json"]["schema"] == {
                    "$ref": "#/components/schemas/Problem"
                }
        return set(responses)

    # A change with a body: unreadable, too large, not valid, not allowed, not there, in conflict.
    assert statuses(f"{api}/users", "post") == {"201", "400", "401", "403", "404", "409", "413", "422"}
    # A read by id: no body, nothing to conflict with; 304 for a current If-None-Match.
    assert statuses(f"{api}/users/{{user_id}}", "get") == {"200", "304", "401", "403", "404"}
    # A list: its query parameters can be wrong.
    assert statuses(f"{api}/workflow-runs", "get") == {"200", "304", "401", "403", "404", "422"}
    # A conditional change: 412 when If-Match does not match.
    assert statuses(f"{api}/users/{{user_id}}", "patch") == {
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "412",
        "413",
        "422",
    }
    # Validation changes nothing: never a conflict.
    assert "409" not in statuses(f"{api}/workflows/validate", "post")
    # The public contracts need no credential.
    assert statuses("/api/v1/contracts/workflows/{name}", "get") == {"200", "304", "404"}
    # A role that requires approval answers 202 with the pending approval.
    created = paths[f"{api}/role-assignments"]["post"]["responses"]
    assert created["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/RoleAssignment")
    assert created["202"]["content"]["application/json"]["schema"]["$ref"].endswith("/PendingRoleAssignment")
    # Every moment is a date-time, whichever answer carries it.
    untyped = [
        (name, member)
        for name, shape in document["components"]["schemas"].items()
        for member, value in (shape.get("properties") or {}).items()
        if member.endswith("_at") and "date-time" not in str(value)
    ]
    assert untyped == []
    problem = document["components"]["schemas"]["Problem"]
    assert set(problem["properties"]) == {
        "type",
        "title",
        "status",
        "code",
        "detail",
        "errors",
        "missing_permissions",
        "referenced_by",
    }
    assert problem["properties"]["errors"]["items"] == {"$ref": "#/components/schemas/ProblemIssue"}
    assert problem["properties"]["missing_permissions"]["items"] == {"$ref": "#/components/schemas/MissingPermission"}
    assert problem["properties"]["referenced_by"]["items"] == {"$ref": "#/components/schemas/WorkflowReference"}
    # A revision's definition is the contract's own schema, not any object.
    revision = document["components"]["schemas"]["WorkflowRevision"]
    assert revision["properties"]["definition"] == {"$ref": "#/components/schemas/WorkflowDefinition"}


def test_every_operation_says_what_it_does_and_who_may_call_it(settings: Settings, database_url: str) -> None:
    """A summary and a description (the handler's own words) and an explicit ``security`` on each operation."""
    document = _document(settings, database_url)
    schemes = set(document["components"]["securitySchemes"])
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            where = (method, path)
            assert operation.get("summary") and operation.get("operationId"), where
            said = operation.get("description") or ""
            assert said and not said.startswith("Permission:"), where  # more than the permission line
            assert "security" in operation, where  # [] for the public ones: said, not left out
            assert all(set(each) <= schemes for each in operation["security"]), where
    health = document["paths"]["/healthz"]["get"]
    assert health["security"] == [] and document["paths"]["/readyz"]["get"]["security"] == []
    token = document["paths"]["/api/v1/realms/{realm}/tokens"]["post"]
    assert token["description"].startswith("Mint a token for yourself")


def test_closed_sets_are_enums_of_the_engines_own_values(settings: Settings, database_url: str) -> None:
    """Each closed set in an answer or a filter is an ``enum`` with exactly the values the engine allows."""
    document = _document(settings, database_url)
    shapes = document["components"]["schemas"]

    def values(schema: dict[str, Any]) -> list[str]:
        return next(v["enum"] for v in [schema, *schema.get("oneOf", [])] if "enum" in v)

    members = {
        ("User", "status"): USER_STATUSES,
        ("OrganizationMember", "status"): USER_STATUSES,
        ("Organization", "state"): ORGANIZATION_STATES,
        ("UpdateOrganization", "state"): ORGANIZATION_STATES,
        ("Permission", "level"): LEVELS,
        ("Webhook", "state"): webhooks.STATES,
        ("UpdateWebhook", "state"): webhooks.SETTABLE_STATES,
        ("WebhookDelivery", "state"): deliveries.STATES,
        ("Workflow", "state"): WORKFLOW_STATES,
        ("WorkflowRevision", "status"): REVISION_STATUSES,
        ("RevisionSummary", "status"): REVISION_STATUSES,
        ("Notice", "state"): NOTICE_STATES,
        ("WorkflowDiagnostics", "health"): HEALTH_STATES,
    }
    for (name, member), expected in members.items():
        assert values(shapes[name]["properties"][member]) == list(expected), (name, member)
    filters = {
        ("listUsers", "status"): USER_STATUSES,
        ("listOrganizations", "state"): ORGANIZATION_STATES,
        ("listRoles", "boundary"): ROLE_BOUNDARIES,
        ("listWebhooks", "state"): webhooks.STATES,
        ("listWebhookDeliveries", "state"): deliveries.STATES,
        ("listWorkflows", "state"): WORKFLOW_STATES,
        ("listRunsNeedingAttention", "show"): ATTENTION_FILTERS,
    }
    operations = {
        operation["operationId"]: operation
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    for (operation_id, name), expected in filters.items():
        parameter = next(p for p in operations[operation_id]["parameters"] if p["name"] == name)
        assert values(parameter["schema"]) == list(expected), (operation_id, name)


async def test_a_filter_outside_its_enum_is_refused(client: Client, realm: RealmHandle) -> None:
    """What the document allows the server takes, and what it leaves out the server refuses (422 at the query)."""
    for path, name, allowed in (
        ("/users", "status", USER_STATUSES),
        ("/organizations", "state", ORGANIZATION_STATES),
        ("/roles", "boundary", ROLE_BOUNDARIES),
        ("/webhooks", "state", webhooks.STATES),
        ("/workflows", "state", WORKFLOW_STATES),
        ("/needs-attention", "show", ATTENTION_FILTERS),
    ):
        for value in allowed:
            taken = await client.get(f"{realm.api}{path}?{name}={value}", headers=realm.headers)
            assert taken.status_code == 200, (path, value, taken.text)
        refused = await client.get(f"{realm.api}{path}?{name}=other", headers=realm.headers)
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["errors"][0]["path"] == f"query:{name}", path


async def test_every_answer_is_sent_from_its_read_model(client: Client, realm: RealmHandle) -> None:
    """Each call below answers with its status: the engine's read model encodes as it is declared
    (a member missing or of the wrong type fails the encoding, not the client)."""
    api, headers = realm.api, realm.headers

    async def call(method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        response = await client.request(method, api + path, json=body, headers=headers)
        assert response.status_code == expect, (method, path, response.text)
        return response.json() if response.content else None

    user = await call("POST", "/users", {"email": "shape@example.com", "display_name": "Shape"}, 201)
    # An independent second person (the operator made them), deciding from a session with a second factor.
    approver, as_approver = await independent_admin(realm, "approver@example.com")
    await call("GET", "/users?limit=5")
    await call("GET", f"/users/{user['id']}")
    await call("PATCH", f"/users/{user['id']}", {"display_name": "Shape Two"})
    await call("POST", f"/users/{user['id']}/suspend")
    await call("POST", f"/users/{user['id']}/reactivate")
    sp = await call("POST", "/service-principals", {"name": "shape-bot"}, 201)
    await call("GET", "/service-principals")
    await call("GET", f"/service-principals/{sp['id']}")
    await call("POST", f"/service-principals/{sp['id']}/tokens", {"name": "shape"}, 201)
    await call("GET", f"/service-principals/{sp['id']}/tokens")
    await call("POST", "/sign-in-links", {"user_id": user["id"]}, 201)
    org = await call("POST", "/organizations", {"name": "Shapes"}, 201)
    await call("GET", "/organizations")
    await call("GET", f"/organizations/{org['id']}")
    await call("PATCH", f"/organizations/{org['id']}", {"name": "Shapes Inc"})
    await call("POST", f"/organizations/{org['id']}/members", {"user_id": user["id"]}, 201)
    await call("GET", f"/organizations/{org['id']}/members")
    await call("GET", "/permissions")
    role = await call(
        "POST", "/roles", {"name": "shape-reader", "permissions": ["realm.users.read"], "boundary": "realm"}, 201
    )
    await call("GET", "/roles")
    await call("PATCH", f"/roles/{role['id']}", {"description": "reads users"})
    group = await call("POST", f"/organizations/{org['id']}/groups", {"name": "Readers", "role_ids": [role["id"]]}, 201)
    await call("GET", f"/organizations/{org['id']}/groups")
    await call("GET", f"/organizations/{org['id']}/groups/{group['id']}")
    await call("PATCH", f"/organizations/{org['id']}/groups/{group['id']}", {"name": "Readers Two"})
    await call("POST", f"/organizations/{org['id']}/groups/{group['id']}/members", {"user_id": user["id"]}, 201)
    await call("GET", f"/organizations/{org['id']}/groups/{group['id']}/members")
    assignment = await call("POST", "/role-assignments", {"role_id": role["id"], "user_id": user["id"]}, 201)
    await call("GET", "/role-assignments")
    await call("GET", f"/role-assignments/{assignment['id']}")
    gated = await call(
        "POST",
        "/roles",
        {"name": "gated", "permissions": ["realm.users.read"], "boundary": "realm", "requires_approval": True},
        201,
    )
    pending = await call(
        "POST", "/role-assignments", {"role_id": gated["id"], "user_id": user["id"], "approver_id": approver.id}, 202
    )
    assert pending["status"] == "pending_approval"
    for path in ("/approvals?status=pending", f"/approvals/{pending['approval']['id']}"):
        assert (await client.get(api + path, headers=as_approver)).status_code == 200
    approved = await client.post(api + f"/approvals/{pending['approval']['id']}/approve", headers=as_approver)
    assert approved.status_code == 200, approved.text
    hook = await call("POST", "/webhooks", {"destination": "https://hooks.example.com/shapes"}, 201)
    await call("GET", "/webhooks")
    await call("GET", f"/webhooks/{hook['id']}")
    await call("PATCH", f"/webhooks/{hook['id']}", {"state": "paused"})
    await call("POST", f"/webhooks/{hook['id']}/rotate-secret")
    await call("GET", f"/webhooks/{hook['id']}/deliveries")
    await call("GET", "/templates/workflow_notice")
    await call("PUT", "/templates/workflow_notice", {"subject": "About {{workflow}}", "body": "In {{realm}}."})
    await call("GET", "/policy")
    await call("PATCH", "/policy", {"extensions": {"workflow_publish_approval": False}})

    first = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": role["id"], "scope": "realm"},
            {"id": "done", "type": "end"},
        ],
    }
    second = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}, {"type": "event", "event_types": ["user.created"]}],
        "steps": [
            {"id": "join", "type": "add_to_group", "group_id": group["id"]},
            {"id": "grant", "type": "assign_role", "role_id": role["id"], "scope": "realm", "expires_in": "720h"},
            {"id": "done", "type": "end"},
        ],
    }
    await call("POST", "/workflows/validate", {"definition": {"schema_version": 1, "steps": "no"}})
    workflow = await call("POST", "/workflows", {"name": "Shapes", "definition": first}, 201)
    await call("GET", "/workflows")
    await call("GET", f"/workflows/{workflow['id']}")
    await call("PATCH", f"/workflows/{workflow['id']}", {"description": "shapes"})
    await call("POST", f"/workflows/{workflow['id']}/revisions/1/publish", {})
    await call("POST", f"/workflows/{workflow['id']}/revisions", {"definition": second}, 201)
    await call("GET", f"/workflows/{workflow['id']}/revisions")
    await call("GET", f"/workflows/{workflow['id']}/revisions/2")
    diff = await call("GET", f"/workflows/{workflow['id']}/revisions/2/diff?against=1")
    assert diff["structured"]["steps"]["added"] and diff["structured"]["triggers"]["added"]
    run = await call("POST", f"/workflows/{workflow['id']}/runs", {"subject_id": approver.id}, 202)
    await drain(make_runner(realm))
    timeline = await call("GET", f"/workflow-runs/{run['id']}")
    assert timeline["attempts"], timeline
    await call("GET", "/workflow-runs?limit=5")
    await call("POST", f"/workflow-runs/{run['id']}/rerun", None, 202)
    again = await call("POST", f"/workflows/{workflow['id']}/runs", {"subject_id": user["id"]}, 202)
    await call("POST", f"/workflow-runs/{again['id']}/cancel", {"reason": "shapes"}, 202)
    await call("POST", "/workflow-runs/bulk", {"action": "cancel", "ids": [run["id"], again["id"]]})
    await call("POST", f"/workflows/{workflow['id']}/disable")
    await call("POST", f"/workflows/{workflow['id']}/enable")
    await call("POST", f"/workflows/{workflow['id']}/revisions/2/publish", {})
    await call("POST", f"/workflows/{workflow['id']}/rollback", {"revision": 1})
    await call("GET", "/notices")
    await call("GET", "/audit-events?limit=20")
    health = await client.get("/healthz")
    assert health.json() == {"status": "ok", "version": VERSION}


async def test_the_reference_page_names_each_answer_and_links_its_shape(client: Client) -> None:
    page = (await client.get("/schema")).text
    for shape in ("RunTimeline", "WorkflowRunPage", "RevisionDiff", "Problem", "ProblemIssue"):
        assert f'id="schema-{shape}"' in page, shape
    contract = (await client.get("/schema/openapi.json")).json()["paths"]["/api/v1/contracts/workflows/{name}"]
    assert list(contract["get"]["responses"]["200"]["content"]) == ["application/schema+json"]
