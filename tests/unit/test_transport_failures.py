"""An endpoint call never raises for what the network does: a failure below HTTP is a transient
network error (the step is tried again), whatever layer reports it."""

from __future__ import annotations

import socket
from typing import Any

import httpx

from engine.endpoints import transport


class BrokenNetwork(httpx.AsyncBaseTransport):
    """A network stack that fails with the operating system's own error, unwrapped by httpx."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        raise self.error


def loopback(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
    return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port or 80))]


async def call_through(network: BrokenNetwork) -> transport.CallOutcome:
    async with httpx.AsyncClient(transport=network) as client:
        return await transport.post(
            client,
            "http://hooks.example.test/in",
            b"{}",
            {},
            timeout_s=2,
            allow_private_network=True,
            operator_allows_private=True,
            resolve=loopback,
        )


async def test_an_operating_system_error_is_a_transient_network_error() -> None:
    network = BrokenNetwork(ConnectionResetError(104, "Connection reset by peer"))
    outcome = await call_through(network)
    assert network.requests == 1
    assert (outcome.status_code, outcome.category, outcome.permanent) == (None, "network_error", False)
    assert outcome.message == "ConnectionResetError: [Errno 104] Connection reset by peer"
    assert not outcome.succeeded


async def test_an_error_httpx_reports_is_a_transient_network_error_too() -> None:
    outcome = await call_through(BrokenNetwork(httpx.ConnectError("refused")))
    assert (outcome.status_code, outcome.category, outcome.permanent) == (None, "network_error", False)
    assert outcome.message == "ConnectError: refused"
