"""``/schema``: the API reference, rendered on the server from the OpenAPI document.

No CDN, no web fonts, no script: the page is plain HTML styled by the cockpit's own stylesheet, so
it works offline and under the Content-Security-Policy (``script-src 'self'``). The machine-
readable document stays at ``/schema/openapi.json`` (and ``.yaml``) for client generators.
"""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar import Request
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin, YamlRenderPlugin

from engine.platform.config import RESOURCE_ROOT

METHODS = ("get", "post", "put", "patch", "delete")

_env = Environment(
    loader=FileSystemLoader(RESOURCE_ROOT / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def schema_name(schema: dict[str, Any] | None) -> str:
    """A short type: ``User``, ``array of Run``, ``string (email)``, ``object``."""
    if not schema:
        return "—"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "oneOf" in schema or "anyOf" in schema:
        return " | ".join(schema_name(s) for s in schema.get("oneOf") or schema.get("anyOf") or [])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = " | ".join(str(k) for k in kind)
    if kind == "array":
        return f"array of {schema_name(schema.get('items'))}"
    if schema.get("format"):
        return f"{kind} ({schema['format']})"
    if schema.get("enum"):
        return f"{kind}: " + ", ".join(str(v) for v in schema["enum"])
    return str(kind)


def operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operation, grouped by its first tag (or its path's resource), in path order."""
    out: list[dict[str, Any]] = []
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if not operation:
                continue
            body = (operation.get("requestBody") or {}).get("content", {})
            responses = []
            for status, response in sorted((operation.get("responses") or {}).items()):
                content: dict[str, dict[str, Any]] = response.get("content") or {}
                first: tuple[str | None, dict[str, Any]] = next(iter(content.items()), (None, {}))
                media, spec = first
                responses.append(
                    {
                        "status": status,
                        "description": response.get("description", ""),
                        "media": media,
                        "type": schema_name(spec.get("schema")) if media else "—",
                    }
                )
            bodies: list[dict[str, Any]] = list(body.values())
            out.append(
                {
                    "id": operation.get("operationId") or f"{method}-{path}",
                    "method": method.upper(),
                    "path": path,
                    "summary": operation.get("summary") or "",
                    "description": operation.get("description") or "",
                    "group": path.removeprefix("/api/v1/realms/{realm}").strip("/").split("/")[0] or "realm",
                    "parameters": [
                        {
                            "name": p.get("name"),
                            "in": p.get("in"),
                            "required": p.get("required", False),
                            "type": schema_name(p.get("schema")),
                            "description": p.get("description") or "",
                        }
                        for p in operation.get("parameters") or []
                    ],
                    "body": schema_name(bodies[0].get("schema")) if bodies else None,
                    "responses": responses,
                }
            )
    return out


class ReferenceRenderPlugin(OpenAPIRenderPlugin):
    """The human-readable reference at ``/schema``."""

    def __init__(self, path: str = "/") -> None:
        super().__init__(path=path)

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        ops = operations(openapi_schema)
        groups: dict[str, list[dict[str, Any]]] = {}
        for op in ops:
            groups.setdefault(op["group"], []).append(op)
        schemas = openapi_schema.get("components", {}).get("schemas", {})
        html = _env.get_template("pages/reference.html").render(
            info=openapi_schema.get("info", {}),
            groups=groups,
            schemas={name: json.dumps(spec, indent=2, sort_keys=True) for name, spec in sorted(schemas.items())},
            json_url=self.get_openapi_json_route(request),
            product_name="Lifecycle Cockpit",
        )
        return html.encode()


def render_plugins() -> list[OpenAPIRenderPlugin]:
    return [ReferenceRenderPlugin("/"), JsonRenderPlugin(), YamlRenderPlugin()]
