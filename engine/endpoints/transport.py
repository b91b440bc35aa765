"""One signed POST to an endpoint, checked against the egress policy at send time.

The destination's host is resolved and every address it answers with is judged
(:func:`engine.webhooks.check_destination`); the connection then goes to the address that was
judged — the URL's host is replaced by it, while the ``Host`` header and the TLS server name
(SNI, and so the certificate check) keep the original name — so a second DNS answer
(rebinding) cannot move the call somewhere else. Certificates are checked against the public
roots (certifi) and, when the operator names one (``COCKPIT_WEBHOOK_CA_BUNDLE``), the CAs of a
PEM bundle, for endpoints behind a private CA. Redirects are never followed, proxies from
the environment are ignored, at most 64 KiB of the answer is read and its body is ignored.

Failure classification (seed 000 "Execution and idempotency", "Step call contract"): 2xx is
done; 410 is ``gone`` and any other 4xx except 408 and 429 is ``http_<status>``, both
permanent; 3xx, 5xx, 408 and 429 (``http_<status>``), ``timeout``, ``network_error`` and
``egress_denied`` are transient; a destination that is not a usable URL is
``invalid_destination`` (permanent: only changing the subscription helps).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

import httpx

from engine.directory.webhooks import Resolver, check_destination_async

MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "LifecycleCockpit-Workflows/1"


@dataclass(frozen=True)
class CallOutcome:
    """What one try achieved: ``category`` is None when the endpoint answered 2xx."""

    status_code: int | None
    category: str | None
    permanent: bool
    message: str
    latency_ms: int

    @property
    def succeeded(self) -> bool:
        return self.category is None


class StatusClass(NamedTuple):
    """What an HTTP status says of a call (seed 000)."""

    category: str | None  # the error category; None for a 2xx
    permanent: bool  # a try again cannot succeed


def classify_status(status: int) -> StatusClass:
    """(error category or None, permanent) for an HTTP status (seed 000)."""
    if 200 <= status < 300:
        return StatusClass(None, permanent=False)
    if status == 410:
        return StatusClass("gone", permanent=True)
    if 400 <= status < 500 and status not in (408, 429):
        return StatusClass(f"http_{status}", permanent=True)
    return StatusClass(f"http_{status}", permanent=False)


def tls_context(ca_bundle: str | Path | None = None) -> ssl.SSLContext:
    """Certificates verified, host names checked: the public roots, plus ``ca_bundle``'s CAs."""
    context = httpx.create_ssl_context(verify=True, trust_env=False)  # certifi's roots
    if ca_bundle is not None:
        context.load_verify_locations(cafile=str(ca_bundle))
    return context


def new_client(ca_bundle: str | Path | None = None) -> httpx.AsyncClient:
    """A client for endpoint calls: no redirects, no proxies or .netrc from the environment; https
    endpoints verified against the public roots and ``ca_bundle`` (``COCKPIT_WEBHOOK_CA_BUNDLE``)."""
    return httpx.AsyncClient(
        follow_redirects=False, trust_env=False, timeout=httpx.Timeout(30.0), verify=tls_context(ca_bundle)
    )


def pinned_url(url: str, address: str) -> str:
    """``url`` with its host replaced by ``address`` (the port, path and query stay)."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


async def post(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout_s: float,
    allow_private_network: bool,
    operator_allows_private: bool,
    resolve: Resolver = socket.getaddrinfo,
) -> CallOutcome:
    """POST ``body`` once; never raises for anything the endpoint or the network does.

    ``resolve`` answers like :func:`socket.getaddrinfo` (tests make a name resolve to loopback).
    """
    started = time.monotonic()

    def outcome(status: int | None, category: str | None, permanent: bool, message: str) -> CallOutcome:
        return CallOutcome(status, category, permanent, message[:2000], int((time.monotonic() - started) * 1000))

    decision = await check_destination_async(url, allow_private_network, operator_allows_private, resolve=resolve)
    if not decision.permitted:
        code = decision.code or "egress_denied"
        return outcome(None, code, code == "invalid_destination", decision.reason or code)
    parts = urlsplit(url)
    host = parts.hostname or ""
    request_headers = dict(headers)
    request_headers["Host"] = parts.netloc
    request_headers["User-Agent"] = USER_AGENT
    if parts.scheme == "https":
        # The pool keys connections by address, not by TLS server name: a kept-alive connection
        # verified for one name must never carry a call for another name at the same address.
        request_headers["Connection"] = "close"
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    try:
        async with asyncio.timeout(timeout_s):
            response = await _send_to_first_reachable(
                client, url, decision.addresses, body, request_headers, extensions, timeout_s
            )
            try:
                read = 0
                async for chunk in response.aiter_raw():
                    read += len(chunk)
                    if read >= MAX_RESPONSE_BYTES:
                        break
            finally:
                await response.aclose()
    except (TimeoutError, httpx.TimeoutException):
        return outcome(None, "timeout", False, f"No answer within {timeout_s:g} s.")
    except httpx.HTTPError as exc:
        return outcome(None, "network_error", False, f"{type(exc).__name__}: {exc}" or "network error")
    except OSError as exc:
        return outcome(None, "network_error", False, f"{type(exc).__name__}: {exc}")
    category, permanent = classify_status(response.status_code)
    message = f"HTTP {response.status_code}"
    if 300 <= response.status_code < 400:
        message += " (redirects are not followed)"
    return outcome(response.status_code, category, permanent, message)


async def _send_to_first_reachable(
    client: httpx.AsyncClient,
    url: str,
    addresses: list[str],
    body: bytes,
    headers: dict[str, str],
    extensions: dict[str, str],
    timeout_s: float,
) -> httpx.Response:
    """Send to the judged addresses in the resolver's order; the next one only when a connection
    could not be made (a name answering ``::1`` and ``127.0.0.1`` where only one listens)."""
    for index, address in enumerate(addresses):
        request = client.build_request(
            "POST",
            pinned_url(url, address),
            content=body,
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            extensions=extensions,
        )
        try:
            return await client.send(request, stream=True, follow_redirects=False)
        except httpx.ConnectError:
            if index == len(addresses) - 1:
                raise
    raise httpx.ConnectError("no address to connect to")
