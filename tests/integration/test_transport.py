"""One POST through ``engine.endpoints.transport.post`` against a real receiver on 127.0.0.1: what
each outcome says (category, permanence, message, latency) and the headers the endpoint sees."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from engine.endpoints import transport
from engine.endpoints.transport import CallOutcome
from testing.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver().start()
    try:
        yield made
    finally:
        made.stop()


async def post(url: str, *, private: bool = True, timeout_s: float = 10.0) -> CallOutcome:
    async with transport.new_client() as client:
        return await transport.post(
            client,
            url,
            b"{}",
            {"Content-Type": "application/json"},
            timeout_s=timeout_s,
            allow_private_network=private,
            operator_allows_private=private,
        )


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on (taken, then given back)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (200, "HTTP 200"),
        (299, "HTTP 299"),
        (300, "HTTP 300 (redirects are not followed)"),
        (399, "HTTP 399 (redirects are not followed)"),
        (400, "HTTP 400"),
        (503, "HTTP 503"),
    ],
)
async def test_each_answer_says_its_status_and_a_redirect_that_it_is_not_followed(
    receiver: Receiver, status: int, message: str
) -> None:
    receiver.respond = lambda _r: status
    outcome = await post(receiver.url)
    assert (outcome.status_code, outcome.message) == (status, message)
    assert outcome.succeeded is (status < 300)


async def test_the_latency_is_the_calls_time_in_milliseconds(receiver: Receiver) -> None:
    receiver.respond = lambda _r: (200, 0.3)
    outcome = await post(receiver.url)
    assert outcome.succeeded
    assert 300 <= outcome.latency_ms < 30_000, outcome.latency_ms


async def test_the_endpoint_sees_the_urls_host_and_port_and_the_user_agent(receiver: Receiver) -> None:
    outcome = await post(receiver.url)
    assert outcome.succeeded, outcome
    [got] = receiver.requests()
    assert got.header("Host") == receiver.url.split("/")[2]
    assert got.header("User-Agent") == "LifecycleCockpit-Workflows/1"
    assert got.header("Connection") != "close"  # plain http keeps its connection


async def test_a_refused_destination_says_why_and_only_an_unusable_url_is_permanent(receiver: Receiver) -> None:
    denied = await post(receiver.url, private=False)
    assert (denied.status_code, denied.category, denied.permanent) == (None, "egress_denied", False)
    assert "127.0.0.1" in denied.message and denied.message != "egress_denied", denied.message
    unusable = await post("http://exa mple.com/hook")
    assert (unusable.status_code, unusable.category, unusable.permanent) == (None, "invalid_destination", True)
    assert unusable.message != "invalid_destination", unusable.message
    assert receiver.requests() == []


async def test_nobody_listening_is_a_transient_network_error_naming_the_real_cause() -> None:
    outcome = await post(f"http://127.0.0.1:{closed_port()}/hook")
    assert (outcome.status_code, outcome.category, outcome.permanent) == (None, "network_error", False)
    assert outcome.message.startswith("ConnectError: ") and "no address to connect to" not in outcome.message


async def test_no_answer_in_time_is_a_transient_timeout(receiver: Receiver) -> None:
    receiver.respond = lambda _r: (200, 3.0)
    outcome = await post(receiver.url, timeout_s=0.5)
    assert (outcome.status_code, outcome.category, outcome.permanent) == (None, "timeout", False)
    assert outcome.message == "No answer within 0.5 s."
    assert 500 <= outcome.latency_ms < 3000, outcome.latency_ms
