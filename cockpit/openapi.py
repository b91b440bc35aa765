"""The API reference states the real error answers: RFC 9457 problem details.

Litestar documents a generic 400 of its own; every JSON API operation instead answers its
errors as ``application/problem+json`` with a ``code`` (see ``cockpit/problems.py``). This
declares them in one place — the ``Problem`` schema and, on each operation, the statuses that
operation can answer, read from its route (credential, request body, parameters, whether it
changes anything) — so client generators and contract tests (schemathesis) see the truth.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, cast

from litestar import Litestar
from litestar.enums import ParamType
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.spec import (
    Components,
    OpenAPI,
    OpenAPIFormat,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)

from cockpit.api.http_semantics import CONDITIONAL_METHODS, KEY_MAX_LENGTH, REALM_PREFIX, REPLAYED_HEADER
from cockpit.auth import SESSION_COOKIE
from cockpit.openapi_definition import definition_components
from cockpit.problems import PROBLEM_CODES, PROBLEM_MEDIA_TYPE
from engine.directory import webhooks
from engine.directory.authz import LEVELS
from engine.directory.organizations import ORGANIZATION_STATES
from engine.directory.principals import USER_STATUSES
from engine.directory.roles import ROLE_BOUNDARIES
from engine.directory.tokens import AUDIENCES
from engine.endpoints import deliveries
from engine.platform.pagination import DEFAULT_LIMIT, MAX_LIMIT
from engine.runs.approval_models import APPROVAL_STATUSES, NOTICE_STATES
from engine.runs.attention import ATTENTION_FILTERS
from engine.runs.controls import BULK_ACTIONS
from engine.runs.diagnostics import HEALTH_STATES
from engine.runs.run_reads import STATE_GROUPS, TRIGGER_TYPES
from engine.runs.states import RUN_STATES
from engine.workflows.models import REVISION_STATUSES, WORKFLOW_STATES

ISSUE_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="One issue of the request: where it is, and what is wrong there.",
    required=["path", "code", "message"],
    properties={
        "path": Schema(
            type=OpenAPIType.STRING,
            description="A JSON pointer into the request body (`/members/0/email`; empty for the body "
            "as a whole), or `query:<name>` for a query parameter",
        ),
        "code": Schema(
            type=OpenAPIType.STRING,
            description="`required`, `unknown_member`, `wrong_type`, `invalid`, `invalid_email`, "
            "`invalid_id`, `too_short`, `too_long`, `malformed_json`, …",
        ),
        "message": Schema(type=OpenAPIType.STRING),
    },
    additional_properties=False,
)

MISSING_PERMISSION_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="A permission the caller lacks, and where: an organization, or the realm (`null`).",
    required=["permission", "organization_id"],
    properties={
        "permission": Schema(type=OpenAPIType.STRING, description="A permission or a wildcard, as roles name them"),
        "organization_id": Schema(one_of=[Schema(type=OpenAPIType.STRING), Schema(type=OpenAPIType.NULL)]),
    },
    additional_properties=False,
)

WORKFLOW_REFERENCE_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="A workflow whose published revision names the object.",
    required=["workflow_id", "name"],
    properties={
        "workflow_id": Schema(type=OpenAPIType.STRING),
        "name": Schema(type=OpenAPIType.STRING),
    },
    additional_properties=False,
)

PROBLEM_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="RFC 9457 problem details; `code` says what went wrong, `errors` where (every issue at once).",
    required=["type", "title", "status", "code", "detail"],
    properties={
        "type": Schema(type=OpenAPIType.STRING, description="`https://cockpit.invalid/problems/<code>`"),
        "title": Schema(type=OpenAPIType.STRING, description="The HTTP status phrase"),
        "status": Schema(type=OpenAPIType.INTEGER),
        "code": Schema(
            type=OpenAPIType.STRING,
            enum=list(PROBLEM_CODES),
            description="What went wrong, for a program to branch on (see the API guide)",
        ),
        "detail": Schema(type=OpenAPIType.STRING, description="A sentence for a person"),
        "errors": Schema(
            type=OpenAPIType.ARRAY,
            items=Reference(ref="#/components/schemas/ProblemIssue"),
            description="Present when the input has issues (422, and 400 `malformed_json`)",
        ),
        "missing_permissions": Schema(
            type=OpenAPIType.ARRAY,
            items=Reference(ref="#/components/schemas/MissingPermission"),
            description="With `grant_ceiling_exceeded` and `target_outranks_actor` (403): every permission the "
            "caller would need, in its scope",
        ),
        "referenced_by": Schema(
            type=OpenAPIType.ARRAY,
            items=Reference(ref="#/components/schemas/WorkflowReference"),
            description="With `referenced_by_workflows` (409): the workflows whose published revision names the object",
        ),
    },
    additional_properties=False,
)

PROBLEMS: dict[int, str] = {
    400: "The body is not JSON at all (`malformed_json`, with the parser's message)",
    401: "No valid credential (`unauthorized`)",
    403: "Not allowed: audience, permission, grant ceiling, or the target outranks the caller",
    404: "No such resource in this realm (another realm's, or a realm that does not exist, alike)",
    409: "Conflicts with the current state (`conflict` or a more precise code; `idempotency_key_in_use` "
    "while a request with the same `Idempotency-Key` is still being answered)",
    412: "`If-Match` does not match the resource's current `ETag` (`precondition_failed`): read it again",
    413: "The request body is too large",
    422: "The input is not valid (`validation_failed`): `errors` lists every issue with its path; "
    "`idempotency_key_reused` when the `Idempotency-Key` was used for another request",
}

ETAG_HEADER = OpenAPIHeader(
    schema=Schema(type=OpenAPIType.STRING),
    description="The strong entity tag of this representation: send it back in `If-Match` or `If-None-Match`",
)
IDEMPOTENCY_KEY = Parameter(
    name="Idempotency-Key",
    param_in=ParamType.HEADER,
    required=False,
    description="Makes the request safe to repeat: the first answer for this key is kept 24 hours for the "
    "caller and replayed (with `Idempotent-Replayed: true`); the same key with another request answers 422 "
    "`idempotency_key_reused`, and while the first is being answered, 409 `idempotency_key_in_use`.",
    schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=KEY_MAX_LENGTH, pattern="^[!#-\\[\\]-~]+$"),
)
IF_MATCH = Parameter(
    name="If-Match",
    param_in=ParamType.HEADER,
    required=False,
    description="Change only if the resource's current `ETag` is one of these (or `*`): else 412 "
    "`precondition_failed`, and nothing changes",
    schema=Schema(type=OpenAPIType.STRING),
)
IF_NONE_MATCH = Parameter(
    name="If-None-Match",
    param_in=ParamType.HEADER,
    required=False,
    description="Answer 304 with no body when the current `ETag` is one of these",
    schema=Schema(type=OpenAPIType.STRING),
)


SECURITY_SCHEMES = {
    "adminToken": SecurityScheme(
        type="http",
        scheme="bearer",
        description="An admin-audience API token (`pat_…`) of a user or service principal of the realm",
    ),
    "accountToken": SecurityScheme(
        type="http",
        scheme="bearer",
        description="Any API token of a user of the realm (account or admin audience)",
    ),
    "session": SecurityScheme(
        type="apiKey",
        name=SESSION_COOKIE,
        security_scheme_in="cookie",
        description="A browser session; unsafe requests carry its CSRF token in `X-CSRF-Token`, and "
        "administration routes need a session with a verified second factor",
    ),
    "metricsToken": SecurityScheme(
        type="http", scheme="bearer", description="`COCKPIT_METRICS_TOKEN`, when the operator set one"
    ),
}


# The closed sets of the answers and bodies, from the engine's own definitions: (schema, member).
MEMBER_ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    **{
        (name, "state"): RUN_STATES
        for name in ("WorkflowRun", "RunTimeline", "RunWithAttempts", "DueRun", "BulkFilter")
    },
    ("BulkFilter", "state_group"): tuple(STATE_GROUPS),
    ("BulkFilter", "trigger_type"): TRIGGER_TYPES,
    ("RunTrigger", "type"): TRIGGER_TYPES,
    ("BulkRequest", "action"): BULK_ACTIONS,
    ("BulkOutcome", "action"): BULK_ACTIONS,
    ("Role", "boundary"): ROLE_BOUNDARIES,
    ("CreateRole", "boundary"): ROLE_BOUNDARIES,
    ("ApiToken", "audience"): AUDIENCES,
    ("MintedToken", "audience"): AUDIENCES,
    ("CreateToken", "audience"): AUDIENCES,
    ("Approval", "status"): APPROVAL_STATUSES,
    **{(name, "status"): USER_STATUSES for name in ("User", "OrganizationMember", "GroupMember")},
    ("Organization", "state"): ORGANIZATION_STATES,
    ("UpdateOrganization", "state"): ORGANIZATION_STATES,
    ("Permission", "level"): LEVELS,
    ("Webhook", "state"): webhooks.STATES,
    ("WebhookWithSecret", "state"): webhooks.STATES,
    ("UpdateWebhook", "state"): webhooks.SETTABLE_STATES,
    ("WebhookDelivery", "state"): deliveries.STATES,
    ("Workflow", "state"): WORKFLOW_STATES,
    ("CreatedWorkflow", "state"): WORKFLOW_STATES,
    ("WorkflowRevision", "status"): REVISION_STATUSES,
    ("RevisionSummary", "status"): REVISION_STATUSES,
    ("Notice", "state"): NOTICE_STATES,
    ("WorkflowDiagnostics", "health"): HEALTH_STATES,
}
# The same sets where a list takes them as query parameters: (operation, parameter).
QUERY_ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("listWorkflowRuns", "state"): RUN_STATES,
    ("listWorkflowRuns", "state_group"): tuple(STATE_GROUPS),
    ("listWorkflowRuns", "trigger_type"): TRIGGER_TYPES,
    ("listApprovals", "status"): APPROVAL_STATUSES,
    ("listUsers", "status"): USER_STATUSES,
    ("listOrganizations", "state"): ORGANIZATION_STATES,
    ("listRoles", "boundary"): ROLE_BOUNDARIES,
    ("listWebhooks", "state"): webhooks.STATES,
    ("listWebhookDeliveries", "state"): deliveries.STATES,
    ("listWorkflows", "state"): WORKFLOW_STATES,
    ("listRunsNeedingAttention", "show"): ATTENTION_FILTERS,
}


def _with_enum(schema: Any, values: tuple[str, ...]) -> None:
    """Add ``enum`` to a string schema, or to the string branch of a nullable one."""
    if not isinstance(schema, Schema):
        return
    if schema.type == OpenAPIType.STRING:
        schema.enum = list(values)
    for branch in schema.one_of or []:
        _with_enum(branch, values)


def _as_date_time(schema: Any) -> None:
    if isinstance(schema, Schema):
        if schema.type == OpenAPIType.STRING and schema.format is None:
            schema.format = OpenAPIFormat.DATE_TIME
        for branch in schema.one_of or []:
            _as_date_time(branch)


def declare_date_times(schema: OpenAPI) -> None:
    """Every moment is a date-time: members named ``*_at`` (some answers carry them as text the
    engine wrote, RFC 3339 all the same) and the audit log's ``since`` and ``until``."""
    for shape in ((schema.components.schemas if schema.components else None) or {}).values():
        if isinstance(shape, Schema):
            for member, value in (shape.properties or {}).items():
                if member.endswith("_at"):
                    _as_date_time(value)
    for item in (schema.paths or {}).values():
        if item.get is not None and item.get.operation_id == "listAuditEvents":
            for parameter in item.get.parameters or []:
                if getattr(parameter, "name", None) in {"since", "until"}:
                    _as_date_time(getattr(parameter, "schema", None))


def declare_enums(schema: OpenAPI) -> None:
    components = (schema.components.schemas if schema.components else None) or {}
    for (name, member), values in MEMBER_ENUMS.items():
        shape = components.get(name)
        if isinstance(shape, Schema) and shape.properties and member in shape.properties:
            _with_enum(shape.properties[member], values)
    for item in (schema.paths or {}).values():
        operation = item.get
        if operation is None:
            continue
        for parameter in operation.parameters or []:
            found = QUERY_ENUMS.get((operation.operation_id or "", getattr(parameter, "name", "")))
            if found is not None:
                _with_enum(getattr(parameter, "schema", None), found)


def summary_of(operation_id: str) -> str:
    """``listWorkflowRuns`` → "List workflow runs": the operation's name, as words."""
    words = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", operation_id)
    text = " ".join(w.lower() for w in words)
    return text[:1].upper() + text[1:]


def describe_operation(path: str, operation: Operation, opt: dict[str, Any]) -> None:
    """Summary, who may call it (security and permission), and the bounds of ``limit``."""
    if operation.operation_id:
        operation.summary = summary_of(operation.operation_id)
    if opt.get("public"):
        operation.security = []
    elif opt.get("audience") == "account":
        operation.security = [{"accountToken": []}, {"session": []}]
    elif path.startswith(REALM_PREFIX):
        operation.security = [{"adminToken": []}, {"session": []}]
    permission = opt.get("permission")
    if permission and "Permission:" not in (operation.description or ""):
        scope = " in the organization of the path" if opt.get("org_param") else ""
        note = f"Permission: `{permission}`{scope}."
        operation.description = f"{operation.description}\n\n{note}" if operation.description else note
    for parameter in operation.parameters or []:
        if getattr(parameter, "name", None) == "limit" and isinstance(parameter, Parameter):
            parameter.schema = Schema(
                type=OpenAPIType.INTEGER,
                minimum=1,
                maximum=MAX_LIMIT,
                default=DEFAULT_LIMIT,
                description=f"Items per page: 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})",
            )


def declare_http_semantics(path: str, method: str, operation: Operation, opt: dict[str, Any]) -> None:
    """The headers of cockpit/api/http_semantics.py on an operation: keys, tags, conditions, Location."""
    responses = dict(operation.responses or {})
    parameters = list(operation.parameters or [])
    realm = path.startswith(REALM_PREFIX)
    if method == "get":
        _add(parameters, IF_NONE_MATCH)
        ok = responses.get("200")
        if isinstance(ok, OpenAPIResponse):
            ok.headers = {**(ok.headers or {}), "ETag": ETAG_HEADER}
        responses["304"] = OpenAPIResponse(
            description="Not modified: the `ETag` in `If-None-Match` is current", headers={"ETag": ETAG_HEADER}
        )
    elif method == "post" and realm and not opt.get("reads_only"):
        _add(parameters, IDEMPOTENCY_KEY)
        responses.setdefault("409", _problem(409))
        responses.setdefault("422", _problem(422))
    elif method.upper() in CONDITIONAL_METHODS and realm:
        _add(parameters, IF_MATCH)
        responses["412"] = _problem(412)
    for status, answer in responses.items():
        if status in {"201", "202"} and isinstance(answer, OpenAPIResponse) and opt.get("location"):
            answer.headers = {
                **(answer.headers or {}),
                "Location": OpenAPIHeader(
                    schema=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.URI_REFERENCE),
                    description="Where what this made (or acts on) lives",
                ),
            }
        keyed = method == "post" and realm and not opt.get("reads_only")
        if keyed and isinstance(answer, OpenAPIResponse) and status[0] in "24":
            answer.headers = {
                **(answer.headers or {}),
                REPLAYED_HEADER: OpenAPIHeader(
                    schema=Schema(type=OpenAPIType.STRING, enum=["true"]),
                    description="Present on a replay of the answer kept for the `Idempotency-Key`",
                ),
            }
    operation.parameters = parameters
    operation.responses = dict(sorted(responses.items()))


def _add(parameters: list[Any], parameter: Parameter) -> None:
    if not any(getattr(p, "name", None) == parameter.name for p in parameters):
        parameters.append(parameter)


def _problem(status: int) -> OpenAPIResponse:
    return OpenAPIResponse(
        description=PROBLEMS[status],
        content={PROBLEM_MEDIA_TYPE: OpenAPIMediaType(schema=Reference(ref="#/components/schemas/Problem"))},
    )


def problem_statuses(path: str, method: str, operation: Operation, opt: dict[str, Any]) -> list[int]:
    """The problem statuses an API operation can answer, from what its route declares.

    - every operation may name something that is not there: 404 (a realm that does not exist,
      or an object of another realm);
    - one that needs a credential (all but the public contracts): 401 and 403;
    - one with a request body: 400 (not JSON), 413 (too large) and 422 (not valid);
    - one with query parameters or an integer in its path: 422 (``query:<name>``);
    - one that changes something: 409.
    """
    statuses = {404}
    if not opt.get("public"):
        statuses |= {401, 403}
    body = isinstance(operation.request_body, RequestBody)
    if body:
        statuses |= {400, 413, 422}
    for parameter in operation.parameters or []:
        location = getattr(parameter, "param_in", None)
        if location is not None and getattr(location, "value", location) == "query":
            statuses.add(422)
    if "{n}" in path:
        statuses.add(422)
    if method != "get" and not opt.get("reads_only"):
        statuses.add(409)
    return sorted(statuses)


def _handlers(app: Litestar) -> Iterator[HTTPRouteHandler]:
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if isinstance(handler, HTTPRouteHandler):
                yield handler


def declare_definition(schema: OpenAPI) -> None:
    """A revision's ``definition`` as ``WorkflowDefinition``, the contract's own schema
    (cockpit/openapi_definition.py). Request bodies keep taking any JSON: the server checks it
    against the same contract and reports every issue at once."""
    assert schema.components is not None and schema.components.schemas is not None
    components = schema.components.schemas
    for name, shape in definition_components().items():
        components[name] = cast(Schema, shape)  # plain JSON Schema, serialized as it is
    revision = components.get("WorkflowRevision")
    if isinstance(revision, Schema) and revision.properties and "definition" in revision.properties:
        revision.properties["definition"] = Reference(ref="#/components/schemas/WorkflowDefinition")


def declare_problem_responses(app: Litestar) -> OpenAPI:
    """Add ``Problem`` and, to every API operation, the problem answers it can give (idempotent)."""
    schema = app.openapi_schema
    if schema.components is None:
        schema.components = Components()
    if schema.components.schemas is None:
        schema.components.schemas = {}
    schema.components.schemas["Problem"] = PROBLEM_SCHEMA
    schema.components.schemas["ProblemIssue"] = ISSUE_SCHEMA
    schema.components.schemas["MissingPermission"] = MISSING_PERMISSION_SCHEMA
    schema.components.schemas["WorkflowReference"] = WORKFLOW_REFERENCE_SCHEMA
    declare_definition(schema)
    schema.components.security_schemes = {**(schema.components.security_schemes or {}), **SECURITY_SCHEMES}
    opts = {h.operation_id: dict(h.opt) for h in _handlers(app) if isinstance(h.operation_id, str)}
    for path, item in (schema.paths or {}).items():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if operation is None:
                continue
            if not path.startswith("/api/"):  # health and metrics: who may call them, and their name
                describe_operation(path, operation, opts.get(operation.operation_id or "", {}))
                continue
            responses = {k: v for k, v in (operation.responses or {}).items() if not _litestar_default_error(k, v)}
            for status in problem_statuses(path, method, operation, opts.get(operation.operation_id or "", {})):
                responses[str(status)] = _problem(status)
            operation.responses = responses
            declare_http_semantics(path, method, operation, opts.get(operation.operation_id or "", {}))
            describe_operation(path, operation, opts.get(operation.operation_id or "", {}))
    declare_enums(schema)
    declare_date_times(schema)
    metrics = (schema.paths or {}).get("/metrics")
    if metrics is not None and metrics.get is not None:
        metrics.get.security = [{"metricsToken": []}, {}]
        metrics.get.responses = {
            **(metrics.get.responses or {}),
            "401": OpenAPIResponse(
                description="`COCKPIT_METRICS_TOKEN` is set and the request did not present it (`unauthorized`)",
                content={PROBLEM_MEDIA_TYPE: OpenAPIMediaType(schema=Reference(ref="#/components/schemas/Problem"))},
            ),
        }
    ready = (schema.paths or {}).get("/readyz")
    if ready is not None and ready.get is not None:
        responses = dict(ready.get.responses or {})
        responses["503"] = OpenAPIResponse(
            description="Not ready: the same document as 200, with the failing checks",
            content={"application/json": OpenAPIMediaType(schema=Reference(ref="#/components/schemas/Readiness"))},
        )
        ready.get.responses = responses
    return schema


def _litestar_default_error(status: str, response: Any) -> bool:
    """Litestar's own 400 ``ValidationException`` answer, which the API never gives in that shape."""
    if status != "400" or not isinstance(response, OpenAPIResponse):
        return False
    return PROBLEM_MEDIA_TYPE not in (response.content or {})
