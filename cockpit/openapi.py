"""The API reference states the real error answers: RFC 9457 problem details.

Litestar documents a generic 400 of its own; every JSON API operation instead answers its
errors as ``application/problem+json`` with a ``code`` (see ``cockpit/problems.py``). This
declares them — the ``Problem`` schema and, on each operation, the statuses it can answer — so
clients and contract tests (schemathesis) can check them.
"""

from __future__ import annotations

from litestar.openapi.spec import Components, OpenAPI, OpenAPIMediaType, OpenAPIResponse, OpenAPIType, Reference, Schema

from cockpit.problems import PROBLEM_MEDIA_TYPE

PROBLEM_SCHEMA = Schema(
    type=OpenAPIType.OBJECT,
    description="RFC 9457 problem details; `code` says what went wrong, `errors` where.",
    required=["type", "title", "status", "code", "detail"],
    properties={
        "type": Schema(type=OpenAPIType.STRING),
        "title": Schema(type=OpenAPIType.STRING),
        "status": Schema(type=OpenAPIType.INTEGER),
        "code": Schema(type=OpenAPIType.STRING),
        "detail": Schema(type=OpenAPIType.STRING),
        "errors": Schema(
            type=OpenAPIType.ARRAY,
            items=Schema(
                type=OpenAPIType.OBJECT,
                required=["path", "code", "message"],
                properties={
                    "path": Schema(type=OpenAPIType.STRING, description="JSON pointer, or query:<name>"),
                    "code": Schema(type=OpenAPIType.STRING),
                    "message": Schema(type=OpenAPIType.STRING),
                },
            ),
        ),
    },
)

API_ERRORS: dict[str, str] = {
    "400": "The request cannot be read (problem details)",
    "401": "No valid credential (problem details, code `unauthorized`)",
    "403": "Not allowed: audience, permission, grant ceiling or the target outranks the caller (problem details)",
    "404": "No such resource in this realm, or another realm's (problem details)",
    "405": "Method not allowed (problem details)",
    "409": "Conflicts with the current state (problem details)",
    "413": "The request body is too large (problem details)",
    "415": "Unsupported media type (problem details)",
    "422": "The input is not valid; `errors` lists each issue with its path (problem details)",
    "429": "Too many requests (problem details)",
}


def _problem(description: str) -> OpenAPIResponse:
    return OpenAPIResponse(
        description=description,
        content={PROBLEM_MEDIA_TYPE: OpenAPIMediaType(schema=Reference(ref="#/components/schemas/Problem"))},
    )


def declare_problem_responses(schema: OpenAPI) -> None:
    """Add the problem-details answers to every operation (idempotent)."""
    if schema.components is None:
        schema.components = Components()
    if schema.components.schemas is None:
        schema.components.schemas = {}
    schema.components.schemas["Problem"] = PROBLEM_SCHEMA
    for path, item in (schema.paths or {}).items():
        errors = API_ERRORS if path.startswith("/api/") else {}
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if operation is None:
                continue
            responses = dict(operation.responses or {})
            for status, description in errors.items():
                responses[status] = _problem(description)
            operation.responses = responses
    ready = (schema.paths or {}).get("/readyz")
    if ready is not None and ready.get is not None:
        responses = dict(ready.get.responses or {})
        responses["503"] = OpenAPIResponse(
            description="Not ready: the same document as 200, with the failing checks",
            content={"application/json": OpenAPIMediaType(schema=Schema(type=OpenAPIType.OBJECT))},
        )
        ready.get.responses = responses
