"""What the JSON API promises at the HTTP level, for every route at once.

- **Idempotency keys** (IETF httpapi ``Idempotency-Key``): a ``POST`` with a key is reserved per
  principal and key before it runs; its answer is kept for 24 hours (its body encrypted at rest)
  and replayed for the same key and the same request (``Idempotent-Replayed: true``); the same key
  with another request answers 422 ``idempotency_key_reused``, and while the first is still being answered, 409
  ``idempotency_key_in_use``. The store is :mod:`engine.platform.idempotency`.
- **Entity tags**: every ``200`` answer to a ``GET`` carries a strong ``ETag`` (a hash of its
  body); ``If-None-Match`` answers 304. ``PATCH``, ``PUT`` and ``DELETE`` honour ``If-Match``: the
  current tag is read by a ``GET`` of the same path (with the caller's credential) while the
  request holds a lock on that path for its transaction, so of two writers holding the same tag
  one wins and the other gets 412 ``precondition_failed``.
- **Location** on every ``201`` and ``202``: the route declares where what it made lives
  (``opt={"location": "/users/{id}"}``, relative to the realm, filled from the answer's members
  and the path's parameters).

:func:`api_guard` (after :func:`cockpit.auth.realm_guard`, so the caller is known and allowed)
does what must happen before the handler; :func:`api_response_middleware` what must happen to
the answer.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

from litestar import Request, Response
from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.handlers.base import BaseRouteHandler
from litestar.types import ASGIApp, HTTPResponseStartEvent, Message, Receive, Scope, Send
from sqlalchemy import text

from cockpit.problems import ProblemError
from cockpit.state import context_of, request_db
from engine.platform import crypto, idempotency
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.db import driver_of
from engine.platform.errors import Conflict, Issue, ValidationFailed

log = logging.getLogger("cockpit.api")

API_PREFIX = "/api/"
REALM_PREFIX = "/api/v1/realms/"
KEY_HEADER = "idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_MAX_LENGTH = 255
# Answers that say "not now" rather than "this is the outcome": the key is given back, so the
# same request with the same key may try again.
NOT_KEPT = {409, 429}
# The headers of a kept answer that a replay repeats.
KEPT_HEADERS = {b"content-type", b"location"}
STATE_KEY = "idempotency_reservation"
CONDITIONAL_METHODS = {"PATCH", "PUT", "DELETE"}


class IdempotentReplay(Exception):
    """Raised by the guard for a key whose answer is kept: the exception handler sends it again."""

    def __init__(self, answer: idempotency.KeptAnswer) -> None:
        super().__init__("replay")
        self.answer = answer


def replay_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    assert isinstance(exc, IdempotentReplay)
    answer = exc.answer
    headers = {name: value for name, value in answer.headers if name.lower() != "content-type"}
    headers[REPLAYED_HEADER] = "true"
    media_type = next((v for n, v in answer.headers if n.lower() == "content-type"), "application/json")
    return Response(content=answer.body, status_code=answer.status, headers=headers, media_type=media_type)


@dataclass(frozen=True)
class _Reserved:
    principal_id: str
    key: str


def idempotency_key(raw: str) -> str:
    """The key of an ``Idempotency-Key`` header: a structured-field string (quotes optional).

    1–255 visible ASCII characters; anything else is 422 at ``header:Idempotency-Key``.
    """
    value = raw.strip()
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    problem = None
    if not value:
        problem = Issue("header:Idempotency-Key", "too_short", "must not be empty")
    elif len(value) > KEY_MAX_LENGTH:
        problem = Issue("header:Idempotency-Key", "too_long", f"must be at most {KEY_MAX_LENGTH} characters")
    elif any(not (0x21 <= ord(c) <= 0x7E) or c in '"\\' for c in value):
        problem = Issue("header:Idempotency-Key", "invalid", "must be visible ASCII characters without quotes")
    if problem is not None:
        raise ValidationFailed("The request is not valid.", issues=[problem])
    return value


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What makes two requests "the same": method, path and the body's JSON value (key order aside)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode() if body else b""
    except ValueError:
        canonical = body
    return hashlib.sha256(f"{method} {path}\n".encode() + canonical).hexdigest()


def entity_tag(body: bytes) -> str:
    """The strong entity tag of an answer's body (identity encoding)."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _tags(header: str) -> list[str]:
    return [t.strip() for t in header.split(",") if t.strip()]


def if_match_holds(header: str, current: str | None) -> bool:
    """RFC 9110 §13.1.1: ``*`` holds when there is a current representation; otherwise a strong match."""
    if current is None:
        return False
    tags = _tags(header)
    return "*" in tags or current in [t for t in tags if not t.startswith("W/")]


def if_none_match_holds(header: str, current: str) -> bool:
    """RFC 9110 §13.1.2 (weak comparison): true means "changed" — answer in full."""
    tags = _tags(header)
    if "*" in tags:
        return False
    return current.removeprefix("W/") not in [t.removeprefix("W/") for t in tags]


async def api_guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Before the handler: reserve an idempotency key, or check ``If-Match``.

    A ``POST`` that only reads (``reads_only``: a validation) changes nothing when repeated and
    takes no key.
    """
    path = connection.scope.get("path", "")
    if not path.startswith(REALM_PREFIX):
        return
    method = connection.scope.get("method")
    if method == "POST" and not handler.opt.get("reads_only") and connection.headers.get(KEY_HEADER) is not None:
        await _reserve_key(connection)
    elif method in CONDITIONAL_METHODS and connection.headers.get("if-match") is not None:
        await _check_if_match(connection)


async def _reserve_key(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    key = idempotency_key(connection.headers[KEY_HEADER])
    principal = connection.scope.get("state", {}).get("principal")
    if principal is None:
        return
    body = await Request(connection.scope, connection.receive).body()
    print_ = fingerprint("POST", connection.scope["path"], body)
    conn = await request_db(connection).driver()
    found = await idempotency.reserve(conn, principal.id, key, print_, SYSTEM_CLOCK.now())
    if found.outcome == "reserved":
        connection.scope["state"][STATE_KEY] = _Reserved(principal.id, key)
        return
    if found.outcome == "done":
        assert found.answer is not None
        sealed = found.answer
        body = _unseal(context_of(connection.app).settings.secret_key, principal.id, key, sealed.body)
        raise IdempotentReplay(idempotency.KeptAnswer(sealed.status, sealed.headers, body))
    if found.outcome == "mismatch":
        raise ValidationFailed(
            "This Idempotency-Key was used for another request; use a new key for a new request.",
            issues=[Issue("header:Idempotency-Key", "reused", "was used with another request")],
            code="idempotency_key_reused",
        )
    raise Conflict(
        "A request with this Idempotency-Key is still being answered; retry when it is done.",
        code="idempotency_key_in_use",
    )


async def _check_if_match(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """Hold the path for this request's transaction, then compare ``If-Match`` with the current tag."""
    session = await request_db(connection).session()
    path = connection.scope["path"]
    await session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": "if-match " + path})
    status, current = await _current_tag(connection)
    if status == 404:
        return  # nothing there: the request answers its own 404 (RFC 9110 §13.2.1)
    if not if_match_holds(connection.headers["if-match"], current if status == 200 else None):
        raise ProblemError(
            412,
            "precondition_failed",
            "The resource has changed since you read it (If-Match does not match its ETag); read it again.",
        )


class CurrentTag(NamedTuple):
    """The answer to a ``GET`` of the same path: its status and its ``ETag``."""

    status: int
    tag: str | None


async def _current_tag(connection: ASGIConnection[Any, Any, Any, Any]) -> CurrentTag:
    """The status and ``ETag`` of a ``GET`` of the same path, asked with the caller's credential."""
    scope = connection.scope
    wanted = {b"authorization", b"cookie", b"host"}
    sub: dict[str, Any] = {
        "type": "http",
        "asgi": scope.get("asgi", {"version": "3.0"}),
        "http_version": scope.get("http_version", "1.1"),
        "method": "GET",
        "scheme": scope.get("scheme", "http"),
        "path": scope["path"],
        "raw_path": scope["path"].encode(),
        "root_path": scope.get("root_path", ""),
        "query_string": b"",
        "headers": [(n, v) for n, v in scope.get("headers", []) if n in wanted],
        "client": scope.get("client"),
        "server": scope.get("server"),
        "state": {},
    }
    status = 0
    tag: str | None = None

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, tag
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", []):
                if name.lower() == b"etag":
                    tag = value.decode("latin-1")

    await connection.app(sub, receive, send)  # type: ignore[arg-type]  # a raw ASGI scope, not yet routed
    return CurrentTag(status, tag)


def _location(scope: Scope, status: int, body: bytes) -> str | None:
    handler = scope.get("route_handler")
    declared = handler.opt.get("location") if handler is not None else None
    if isinstance(declared, dict):
        declared = declared.get(status)
    if not declared:
        return None
    try:
        members = json.loads(body)
    except ValueError:
        return None
    params = dict(scope.get("path_params", {}))
    realm = params.get("realm")
    try:
        tail = declared.format_map({**params, **members}) if isinstance(members, dict) else None
    except (KeyError, IndexError, TypeError):
        return None
    return f"{REALM_PREFIX}{realm}{tail}" if tail else None


def api_response_middleware(app: ASGIApp) -> ASGIApp:
    """After the handler: ``ETag``/304 on reads, ``Location`` on 201/202, the idempotent answer kept."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or not scope.get("path", "").startswith(API_PREFIX):
            await app(scope, receive, send)
            return
        start: HTTPResponseStartEvent | None = None
        chunks: list[bytes] = []
        settled = False

        async def finish(start: HTTPResponseStartEvent, body: bytes) -> None:
            nonlocal settled
            status: int = start["status"]
            headers = list(start.get("headers", []))
            encoded = any(n.lower() == b"content-encoding" and v.lower() == b"gzip" for n, v in headers)
            plain = gzip.decompress(body) if encoded and body else body
            method = scope.get("method")
            if method == "GET" and status == 200:
                tag = entity_tag(plain)
                headers.append((b"etag", tag.encode()))
                wanted = _header(scope, b"if-none-match")
                if wanted is not None and not if_none_match_holds(wanted, tag):
                    status, body = 304, b""
                    dropped = {b"content-type", b"content-length", b"content-encoding"}
                    headers = [(n, v) for n, v in headers if n.lower() not in dropped]
            if status in (201, 202) and not any(n.lower() == b"location" for n, _ in headers):
                location = _location(scope, status, plain)
                if location is not None:
                    headers.append((b"location", location.encode()))
            reserved = scope.get("state", {}).get(STATE_KEY)
            if isinstance(reserved, _Reserved):
                settled = True
                kept = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in headers if n.lower() in KEPT_HEADERS]
                await _settle(scope, reserved, idempotency.KeptAnswer(status, kept, plain))
            answer: HTTPResponseStartEvent = {**start, "status": status, "headers": headers}
            await send(answer)
            await send({"type": "http.response.body", "body": body, "more_body": False})

        async def buffered(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await finish(start, b"".join(chunks))
                return
            await send(message)

        try:
            await app(scope, receive, buffered)
        finally:
            reserved = scope.get("state", {}).get(STATE_KEY)
            if isinstance(reserved, _Reserved) and not settled:
                await _settle(scope, reserved, None)

    return middleware


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def _purpose(principal_id: str, key: str) -> str:
    return f"idempotency:{principal_id}:{key}"


def _seal(operator_key: str, principal_id: str, key: str, body: bytes) -> bytes:
    """A kept body is encrypted at rest: it may hold a secret shown once (a minted token, a webhook secret)."""
    plain = base64.b64encode(body).decode()
    return crypto.encrypt(operator_key, _purpose(principal_id, key), plain).encode()


def _unseal(operator_key: str, principal_id: str, key: str, sealed: bytes) -> bytes:
    return base64.b64decode(crypto.decrypt(operator_key, _purpose(principal_id, key), sealed.decode()))


async def _settle(scope: Scope, reserved: _Reserved, answer: idempotency.KeptAnswer | None) -> None:
    """Keep the answer of a reserved key, or give the key back (no answer, a 5xx, a "not now")."""
    ctx = context_of(scope["app"])
    engine = ctx.read_engine or ctx.db
    try:
        async with engine.connect() as connection:
            conn = driver_of(await connection.get_raw_connection())
            if answer is not None and answer.status < 500 and answer.status not in NOT_KEPT:
                sealed = _seal(ctx.settings.secret_key, reserved.principal_id, reserved.key, answer.body)
                kept = idempotency.KeptAnswer(answer.status, answer.headers, sealed)
                await idempotency.keep(conn, reserved.principal_id, reserved.key, kept, SYSTEM_CLOCK.now())
            else:
                await idempotency.release(conn, reserved.principal_id, reserved.key)
    except Exception:
        # The answer goes out regardless; a key left in flight is taken over after a while.
        log.warning("idempotency key not settled", exc_info=True)
