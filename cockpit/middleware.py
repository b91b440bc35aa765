"""Request id and access log: every request gets an id (or keeps a sane one it was given)."""

from __future__ import annotations

import logging
import re
import secrets
import time

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from engine.logs import request_id_var

log = logging.getLogger("cockpit.access")
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{8,100}$")


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        given = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                given = value.decode("latin-1")
                break
        request_id = given if _SANE_ID.match(given) else "req_" + secrets.token_hex(8)
        token = request_id_var.set(request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers  # type: ignore[typeddict-unknown-key]
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            log.info(
                "request",
                extra={
                    "request_id": request_id,
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
            request_id_var.reset(token)

    return middleware
