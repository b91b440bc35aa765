"""Request id and access log: every request gets an id of its own, made here.

The request id goes on every audit event and, through them, becomes the correlation id of the
outbox events a request causes; loop protection reads those. It is therefore always made by us
(``req_<hex>``), never taken from the caller: a caller's ``X-Request-ID`` could otherwise pose as
a run id (``wrn_…``) and steer loop protection. A sane caller's id is kept for the logs only, as
``client_request_id``.

One-time tokens that travel in a path (an approval request's decision link) are replaced by
``[redacted]`` in every logged path (:func:`loggable_path`): a log is no place for a key.
"""

from __future__ import annotations

import logging
import re
import secrets
import time

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from engine.platform.logs import client_request_id_var, request_id_var

log = logging.getLogger("cockpit.access")
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{8,100}$")
# Path segments that are one-time secrets: what follows /approval-links/.
_PATH_TOKENS = re.compile(r"(/approval-links/)[^/]+")
REDACTED = "[redacted]"


def loggable_path(path: str | None) -> str | None:
    """The path as logs may show it: one-time tokens in it redacted."""
    return _PATH_TOKENS.sub(r"\g<1>" + REDACTED, path) if path else path


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        given = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                given = value.decode("latin-1")
                break
        client_request_id = given if _SANE_ID.match(given) else None
        request_id = "req_" + secrets.token_hex(8)
        token = request_id_var.set(request_id)
        client_token = client_request_id_var.set(client_request_id)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["client_request_id"] = client_request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            extra = {
                "request_id": request_id,
                "method": scope.get("method"),
                "path": loggable_path(scope.get("path")),
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            }
            if client_request_id:
                extra["client_request_id"] = client_request_id
            log.info("request", extra=extra)
            request_id_var.reset(token)
            client_request_id_var.reset(client_token)

    return middleware
