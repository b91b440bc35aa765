"""A real HTTP endpoint on 127.0.0.1 for tests and benches: records and verifies every request.

Each request is checked against the Standard Webhooks signature with every secret the test told
the receiver about (``secrets``), using the ``standardwebhooks`` package itself, and recorded
with the secrets that verified it. ``respond`` decides the answer (status, optional delay in
seconds, optional headers); ``on_request`` runs first (a test may kill a worker there). With
``tls`` (a server-side ``ssl.SSLContext``) it answers https, and records the server name (SNI)
each client asked for in ``server_names``. ``host`` is the address it listens on (a test of several
hosts gives the address of a bridge they all reach).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified_by: list[int]  # indexes into Receiver.secrets that verify the signature
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


Answer = int | tuple[int, float] | tuple[int, float, dict[str, str]]


@dataclass
class Receiver:
    secrets: list[str] = field(default_factory=list)
    respond: Callable[[Received], Answer] = lambda _r: 200
    on_request: Callable[[Received], None] | None = None
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    tls: ssl.SSLContext | None = None
    server_names: list[str | None] = field(default_factory=list)
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return self.url_for(self.host)

    def url_for(self, host: str) -> str:
        assert self.server is not None
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.server.server_address[1]}/hook"

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Received]:
        """Wait (on the condition, generously) until ``count`` requests arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.requests()
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"the receiver got {len(self.requests())} requests, expected {count}")

    async def arrived(self, count: int, within: float = 60.0) -> list[Received]:
        """:meth:`wait_for` for async tests: the event loop keeps running while it waits."""
        import asyncio

        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            got = self.requests()
            if len(got) >= count:
                return got
            await asyncio.sleep(0.02)
        raise AssertionError(f"the receiver got {len(self.requests())} requests, expected {count}")

    def _verify(self, body: bytes, headers: dict[str, str]) -> list[int]:
        ok = []
        for index, secret in enumerate(list(self.secrets)):
            try:
                Webhook(secret).verify(body, headers)
                ok.append(index)
            except (WebhookVerificationError, ValueError):
                continue
        return ok

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                item = Received(self.path, headers, body, receiver._verify(body, headers), time.monotonic())
                with receiver.lock:
                    receiver.received.append(item)
                if receiver.on_request is not None:
                    receiver.on_request(item)
                answer = receiver.respond(item)
                status, delay, extra = (answer, 0.0, {}) if isinstance(answer, int) else (*answer, {})[:3]
                if delay:
                    time.sleep(delay)
                payload = b"" if status in (204, 304) or status < 200 else b'{"ok":true}'
                try:
                    self.send_response(status)
                    for key, value in (extra or {}).items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the caller gave up (a timeout): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        class QuietServer(ThreadingHTTPServer):
            # A worker's batch can call many endpoints at once: a backlog of 5 (the default) would
            # drop connections a real server accepts.
            request_queue_size = 128

            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # a caller that hung up (a timeout, a killed worker) is part of the tests

        self.server = QuietServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        if self.tls is not None:

            def note_server_name(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
                with receiver.lock:
                    receiver.server_names.append(name)

            self.tls.sni_callback = note_server_name
            # The handshake happens on accept; a client that refuses the certificate ends it there.
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
