"""https endpoints through the pinned address: the connection goes to the address the egress check
judged, while TLS still asks for, and verifies the certificate against, the endpoint's NAME.

A real TLS receiver on 127.0.0.1 with a certificate from a throwaway CA for ``hooks.test``; the
name resolves to 127.0.0.1 through the transport's resolver (no DNS), both private-egress
switches are on (the receiver is loopback), and the CA is trusted the way an operator trusts it:
``COCKPIT_WEBHOOK_CA_BUNDLE`` read by the settings.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.endpoints import transport
from engine.endpoints.transport import CallOutcome
from engine.platform.config import ConfigError, load_settings
from testing.receiver import Receiver
from testing.tls import ThrowawayCA

NAME = "hooks.test"


def loopback_for(*names: str) -> Any:
    """A resolver answering 127.0.0.1 for ``names`` (and nothing else), as getaddrinfo would."""
    asked: list[str] = []

    def resolve(host: str, port: int, *_args: Any) -> list[tuple[Any, ...]]:
        asked.append(host)
        if host not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]

    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


@pytest.fixture
def ca(tmp_path: Path) -> ThrowawayCA:
    return ThrowawayCA.create(tmp_path / "ca")


def tls_receiver(ca: ThrowawayCA, *names: str) -> Iterator[Receiver]:
    receiver = Receiver(tls=ca.server_context(*names)).start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture
def receiver(ca: ThrowawayCA) -> Iterator[Receiver]:
    yield from tls_receiver(ca, NAME)


@pytest.fixture
def impostor(ca: ThrowawayCA) -> Iterator[Receiver]:
    """Listens on the same kind of address with a valid certificate, but for another name."""
    yield from tls_receiver(ca, "other.test")


@pytest.fixture
def ca_bundle(ca: ThrowawayCA, monkeypatch: pytest.MonkeyPatch) -> Path | None:
    """The operator's setting, read the way the worker reads it."""
    monkeypatch.setenv("COCKPIT_WEBHOOK_CA_BUNDLE", str(ca.bundle))
    return load_settings().deliveries.ca_bundle


async def send(url: str, ca_bundle: Path | None, resolve: Any) -> CallOutcome:
    async with transport.new_client(ca_bundle) as client:
        return await transport.post(
            client,
            url,
            b'{"hello":"world"}',
            {"Content-Type": "application/json"},
            timeout_s=30.0,
            allow_private_network=True,
            operator_allows_private=True,
            resolve=resolve,
        )


async def test_https_goes_to_the_checked_address_and_verifies_the_certificate_for_the_name(
    receiver: Receiver, ca_bundle: Path | None
) -> None:
    resolve = loopback_for(NAME)
    url = receiver.url_for(NAME)
    outcome = await send(url, ca_bundle, resolve)
    assert outcome.succeeded and outcome.status_code == 200, outcome
    assert resolve.asked == [NAME], "the name is resolved once, by the egress check"
    [got] = receiver.requests()
    assert got.json == {"hello": "world"}
    assert got.header("Host") == url.split("/")[2]  # hooks.test:<port>, not the address
    assert receiver.server_names == [NAME], "TLS asked for the name (SNI), not for 127.0.0.1"


async def test_a_certificate_for_another_name_fails_as_a_network_error(
    impostor: Receiver, ca_bundle: Path | None
) -> None:
    outcome = await send(impostor.url_for(NAME), ca_bundle, loopback_for(NAME))
    assert (outcome.category, outcome.permanent, outcome.status_code) == ("network_error", False, None)
    assert "certificate" in outcome.message.lower() and NAME in outcome.message, outcome.message
    assert impostor.requests() == [], "nothing is sent over a connection whose certificate failed"
    assert impostor.server_names == [NAME]


async def test_a_certificate_from_a_ca_nobody_trusts_fails_without_the_bundle(receiver: Receiver) -> None:
    outcome = await send(receiver.url_for(NAME), None, loopback_for(NAME))
    assert (outcome.category, outcome.permanent) == ("network_error", False)
    assert "certificate" in outcome.message.lower(), outcome.message
    assert receiver.requests() == []


async def test_https_to_an_address_is_checked_against_that_address(receiver: Receiver, ca_bundle: Path | None) -> None:
    """A destination given as an address: the certificate (issued for the name) does not match it."""
    outcome = await send(receiver.url, ca_bundle, loopback_for())
    assert outcome.category == "network_error", outcome
    assert receiver.requests() == []


def test_the_ca_bundle_setting_names_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COCKPIT_WEBHOOK_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match="COCKPIT_WEBHOOK_CA_BUNDLE"):
        load_settings()
    monkeypatch.delenv("COCKPIT_WEBHOOK_CA_BUNDLE")
    assert load_settings().deliveries.ca_bundle is None


async def test_a_connection_verified_for_one_name_never_carries_a_call_for_another(
    receiver: Receiver, ca_bundle: Path | None
) -> None:
    """Two names at one address (a shared host): the second call gets its own handshake, so a
    certificate that does not name it fails even though the first call's connection was good."""
    resolve = loopback_for(NAME, "shared.test")
    async with transport.new_client(ca_bundle) as client:

        async def call(name: str) -> CallOutcome:
            return await transport.post(
                client,
                receiver.url_for(name),
                b"{}",
                {"Content-Type": "application/json"},
                timeout_s=30.0,
                allow_private_network=True,
                operator_allows_private=True,
                resolve=resolve,
            )

        first = await call(NAME)
        second = await call("shared.test")
        again = await call(NAME)
    assert first.succeeded and again.succeeded, (first, again)
    assert second.category == "network_error" and "shared.test" in second.message, second
    assert [r.header("Host").split(":")[0] for r in receiver.requests()] == [NAME, NAME]  # type: ignore[union-attr]
    assert receiver.server_names == [NAME, "shared.test", NAME]
