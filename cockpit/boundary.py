"""What every HTTP response and request passes at the edge of the app.

- **Client address**: the peer's address is the client, unless the peer is a reverse proxy
  the operator named in ``COCKPIT_TRUSTED_PROXIES``; then the client is the right-most
  address of ``X-Forwarded-For`` that is not itself a trusted proxy. With no proxies named
  (the default) ``X-Forwarded-For`` is ignored, so nobody spoofs their way past the
  per-address sign-in throttle.
- **Security headers** on every response: a Content-Security-Policy with no inline script
  and ``frame-ancestors 'none'``, ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: same-origin``, and ``Cache-Control: no-store`` on everything but static
  files (pages and API answers show tokens, secrets and personal data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from ipaddress import IPv4Network, IPv6Network, ip_address

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]
STATIC_PREFIX = "/static/"


def _trusted(address: str, proxies: Sequence[IPv4Network | IPv6Network]) -> bool:
    try:
        parsed = ip_address(address.strip())
    except ValueError:
        return False
    return any(parsed in network for network in proxies)


def forwarded_client(peer: str, forwarded_for: str | None, proxies: Sequence[IPv4Network | IPv6Network]) -> str:
    """The client's address: the peer, or what trusted proxies say they received it from."""
    if not proxies or not forwarded_for or not _trusted(peer, proxies):
        return peer
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ip_address(hop))
            except ValueError:
                return peer  # garbage from an untrusted hop: keep what we know
    return hops[0] if hops else peer


def boundary_middleware_factory(proxies: Sequence[IPv4Network | IPv6Network]) -> Callable[[ASGIApp], ASGIApp]:
    """The middleware for ``create_app``, bound to the operator's trusted proxies."""

    def boundary_middleware(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            client = scope.get("client")
            if proxies and client:
                forwarded = None
                for name, value in scope.get("headers", []):
                    if name == b"x-forwarded-for":
                        forwarded = (
                            value.decode("latin-1") if forwarded is None else f"{forwarded},{value.decode('latin-1')}"
                        )
                real = forwarded_client(client[0], forwarded, proxies)
                if real != client[0]:
                    scope["client"] = (real, 0)
            static = str(scope.get("path", "")).startswith(STATIC_PREFIX)

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start":
                    headers = list(message.get("headers", []))
                    present = {name.lower() for name, _ in headers}
                    headers += [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                    if not static:
                        headers = [(n, v) for n, v in headers if n.lower() not in {b"cache-control", b"expires"}]
                        headers.append((b"cache-control", b"no-store"))
                    message["headers"] = headers
                await send(message)

            await app(scope, receive, send_with_headers)

        return middleware

    return boundary_middleware
