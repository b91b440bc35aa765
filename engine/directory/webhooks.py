"""Webhook subscriptions: where a realm's events and endpoint calls go, and the egress policy.

- A subscription's secret is shown once, when it is made or rotated, and stored encrypted with
  the operator key (purpose ``webhook-secret``). A rotated secret stays valid for 24 hours, so
  receivers can switch over: deliveries in that window carry a signature with each secret
  (:func:`signing_secrets`).
- Secrets are Standard Webhooks style: ``whsec_`` followed by 32 random bytes in base64.
- States: ``active`` (delivered), ``paused`` (held, retried later), ``disabled`` (refused) and
  ``deleted`` (soft: the row stays so runs and the audit log can still name it; it is hidden
  from lists unless asked for with ``state=deleted`` and can no longer be changed).
- Egress: a destination on a private network (loopback, RFC 1918, link-local, multicast,
  reserved, unspecified, and IPv4 addresses hidden in IPv6 forms) needs both the
  subscription's ``allow_private_network`` and the operator's ``COCKPIT_ALLOW_PRIVATE_EGRESS``.
  At creation only literal addresses (and ``localhost``) can be judged without DNS; at
  delivery :func:`check_destination` resolves the host and judges every address it gets.

Secrets never enter logs or audit details; audit details name the destination's host only,
because query strings sometimes carry credentials.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models
from engine.directory.audit import DELIVERABLE_EVENT_TYPES, Actor, record_audit
from engine.directory.models import WebhookSubscription
from engine.platform import crypto
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, Issue, NotFound, ValidationFailed, invalid
from engine.platform.ids import new_id
from engine.platform.pagination import Page, keyset_page

SECRET_PURPOSE = "webhook-secret"  # noqa: S105 (a key-derivation label, not a secret)
SECRET_PREFIX = "whsec_"  # noqa: S105
ROTATION_OVERLAP = timedelta(hours=24)
MAX_DESTINATION_LENGTH = 2000
STATES = ("active", "paused", "disabled", "deleted")
SETTABLE_STATES = ("active", "paused", "disabled")
AUDIT_CATEGORY = "configuration"

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_HOST_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")


# --- Egress policy --------------------------------------------------------------------------------


def classify_address(address: IpAddress) -> str | None:
    """Why this address is not on the public internet (``loopback``, ``private``, …), or None.

    IPv4 addresses carried inside IPv6 (``::ffff:10.0.0.1``, NAT64 ``64:ff9b::…``, 6to4
    ``2002:…``) are judged by the IPv4 address they reach.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded: ipaddress.IPv4Address | None = address.ipv4_mapped
        kind = "ipv4_mapped"
        if embedded is None and address in _NAT64:
            embedded, kind = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "nat64"
        if embedded is None and address.sixtofour is not None:
            embedded, kind = address.sixtofour, "6to4"
        if embedded is not None:
            inner = classify_address(embedded)
            return f"{kind}_{inner}" if inner else None
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link_local"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non_global"
    return None


def literal_address(host: str) -> IpAddress | None:
    """The address a host name spells without DNS (``10.0.0.1``, ``::1``, ``127.1``, ``0x7f.1``)."""
    host = host.strip("[]").rstrip(".")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if re.fullmatch(r"(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}", host, re.I):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def literal_private_reason(host: str) -> str | None:
    """Why a host is private on its face (a literal address or ``localhost``), or None."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    address = literal_address(name)
    return classify_address(address) if address is not None else None


@dataclass(frozen=True)
class EgressDecision:
    """May we connect? ``code`` is the error category when not; ``addresses`` are the ones to use."""

    permitted: bool
    code: str | None = None
    reason: str | None = None
    addresses: list[str] = field(default_factory=list)


Resolver = Callable[..., Sequence[tuple[Any, ...]]]


def check_destination(
    url: str,
    allow_private_network: bool,
    operator_allows_private: bool,
    *,
    resolve: Resolver = socket.getaddrinfo,
) -> EgressDecision:
    """Resolve the destination's host and judge every address it answers with.

    Every address must be allowed (a name answering with one public and one private address is
    refused: the connection could go to either). Callers should connect to ``addresses`` rather
    than resolve again, so a second answer cannot differ from the one judged. This blocks on
    DNS; async callers use :func:`check_destination_async`.
    """
    problem = destination_problem(url)
    if problem is not None:
        return EgressDecision(False, "invalid_destination", problem)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    private_ok = allow_private_network and operator_allows_private
    literal = literal_address(host)
    if literal is not None:
        candidates: list[IpAddress] = [literal]
    else:
        try:
            answers = resolve(host, port, 0, socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            return EgressDecision(False, "network_error", f"The host name does not resolve: {exc}")
        candidates = []
        for answer in answers:
            raw = str(answer[4][0]).split("%", 1)[0]
            try:
                candidates.append(ipaddress.ip_address(raw))
            except ValueError:
                continue
        if not candidates:
            return EgressDecision(False, "network_error", "The host name has no address.")
    for address in candidates:
        why = classify_address(address)
        if why is not None and not private_ok:
            return EgressDecision(
                False,
                "egress_denied",
                f"{address} is a {why.replace('_', ' ')} address; private destinations need the "
                "subscription's allow_private_network and the operator's private egress setting.",
            )
    return EgressDecision(True, addresses=[str(a) for a in dict.fromkeys(candidates)])


async def check_destination_async(
    url: str,
    allow_private_network: bool,
    operator_allows_private: bool,
    *,
    resolve: Resolver = socket.getaddrinfo,
) -> EgressDecision:
    """:func:`check_destination` without blocking the event loop (DNS runs in a thread).

    A literal address needs no DNS, so it is judged here directly.
    """
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    if host and literal_address(host) is not None:
        return check_destination(url, allow_private_network, operator_allows_private)
    return await asyncio.to_thread(
        check_destination, url, allow_private_network, operator_allows_private, resolve=resolve
    )


def destination_problem(url: str) -> str | None:
    """What is wrong with a destination URL as such, or None."""
    if not url or len(url) > MAX_DESTINATION_LENGTH:
        return f"must be a URL of at most {MAX_DESTINATION_LENGTH} characters"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "must be an absolute http:// or https:// URL"
    if parts.scheme not in {"http", "https"} or not parts.netloc or not parts.hostname:
        return "must be an absolute http:// or https:// URL"
    if parts.username is not None or parts.password is not None:
        return "must not contain a user name or password; the signature authenticates deliveries"
    if port == 0:
        return "must not use port 0"
    host = parts.hostname.rstrip(".")
    if literal_address(host) is None and not all(_HOST_LABEL.match(label) for label in host.split(".")):
        return "must name a valid host"
    return None


def destination_issues(path: str, url: str, allow_private_network: bool) -> list[Issue]:
    """Creation-time checks: the URL's shape, and a private literal host without the flag."""
    problem = destination_problem(url)
    if problem is not None:
        return [Issue(path, "invalid_url", problem)]
    host = urlsplit(url).hostname or ""
    why = literal_private_reason(host)
    if why is not None and not allow_private_network:
        return [
            Issue(
                path,
                "egress_denied",
                f"{host} is a {why.replace('_', ' ')} address: set allow_private_network to deliver there "
                "(the operator must also allow private egress)",
            )
        ]
    return []


def event_types_issues(path: str, event_types: list[str] | None) -> list[Issue]:
    if event_types is None:
        return []
    issues: list[Issue] = []
    if not event_types:
        issues.append(Issue(path, "too_short", "name at least one event type, or leave it out for all of them"))
    seen: set[str] = set()
    for index, event_type in enumerate(event_types):
        if event_type not in DELIVERABLE_EVENT_TYPES:
            issues.append(
                Issue(f"{path}/{index}", "unknown_event_type", "must be one of " + ", ".join(DELIVERABLE_EVENT_TYPES))
            )
        elif event_type in seen:
            issues.append(Issue(f"{path}/{index}", "duplicate", "is listed twice"))
        seen.add(event_type)
    return issues


def egress_permitted(subscription: WebhookSubscription, operator_allows_private: bool) -> bool:
    """Would delivery be allowed, judging what is knowable without DNS?"""
    host = urlsplit(subscription.destination).hostname or ""
    if literal_private_reason(host) is None:
        return True
    return subscription.allow_private_network and operator_allows_private


# --- Secrets --------------------------------------------------------------------------------------


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(32)).decode()


def signing_secrets(subscription: WebhookSubscription, operator_key: str, now: datetime | None = None) -> list[str]:
    """The secrets deliveries are signed with: the current one, then the previous one while its
    overlap window lasts. Raises :class:`engine.platform.crypto.SecretUnavailable` when the current
    secret cannot be decrypted (the operator key changed); a previous secret that cannot be
    read is left out.
    """
    moment = now or SYSTEM_CLOCK.now()
    secrets = [crypto.decrypt(operator_key, SECRET_PURPOSE, subscription.secret_enc)]
    expires = subscription.previous_secret_expires_at
    if subscription.previous_secret_enc and expires is not None and expires > moment:
        try:
            secrets.append(crypto.decrypt(operator_key, SECRET_PURPOSE, subscription.previous_secret_enc))
        except crypto.SecretUnavailable:
            pass
    return secrets


# --- Subscriptions --------------------------------------------------------------------------------


def webhook_view(
    subscription: WebhookSubscription, *, operator_allows_private: bool, now: datetime | None = None
) -> read_models.Webhook:
    """The subscription as the API shows it: never a secret, encrypted or not."""
    moment = now or SYSTEM_CLOCK.now()
    expires = subscription.previous_secret_expires_at
    return read_models.Webhook(
        id=subscription.id,
        destination=subscription.destination,
        state=subscription.state,
        allow_private_network=subscription.allow_private_network,
        event_types=list(subscription.event_types) if subscription.event_types is not None else None,
        egress_permitted=egress_permitted(subscription, operator_allows_private),
        previous_secret_expires_at=expires if expires is not None and expires > moment else None,
        created_at=subscription.created_at,
        updated_at=subscription.updated_at,
    )


def webhook_with_secret_view(
    subscription: WebhookSubscription, secret: str, *, operator_allows_private: bool
) -> read_models.WebhookWithSecret:
    """The answer to a create or a rotation: the subscription with its signing secret, this once."""
    view = webhook_view(subscription, operator_allows_private=operator_allows_private)
    return read_models.WebhookWithSecret(**msgspec.structs.asdict(view), secret=secret)


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


async def create_subscription(
    session: AsyncSession,
    actor: Actor,
    operator_key: str,
    *,
    destination: str,
    allow_private_network: bool = False,
    event_types: list[str] | None = None,
) -> tuple[WebhookSubscription, str]:
    """A new active subscription; returns it and its secret (the only time the secret is seen)."""
    issues = destination_issues("/destination", destination, allow_private_network)
    issues += event_types_issues("/event_types", event_types)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    secret = new_secret()
    subscription = WebhookSubscription(
        id=new_id("whk"),
        realm_id=actor.realm_id,
        destination=destination,
        secret_enc=crypto.encrypt(operator_key, SECRET_PURPOSE, secret),
        allow_private_network=allow_private_network,
        event_types=event_types,
    )
    session.add(subscription)
    await session.flush()
    await record_audit(
        session,
        actor,
        "webhook.created",
        category=AUDIT_CATEGORY,
        subject_type="webhook",
        subject_id=subscription.id,
        details={
            "destination_host": _host(destination),
            "allow_private_network": allow_private_network,
            "event_types": event_types,
        },
    )
    return subscription, secret


async def get_subscription(session: AsyncSession, realm_id: str, webhook_id: str) -> WebhookSubscription:
    """A subscription of the realm, deleted ones included (their history stays readable)."""
    subscription = await session.get(WebhookSubscription, webhook_id)
    if subscription is None or subscription.realm_id != realm_id:
        raise NotFound("No such webhook subscription.")
    return subscription


async def _changeable(session: AsyncSession, realm_id: str, webhook_id: str) -> WebhookSubscription:
    subscription = await session.get(WebhookSubscription, webhook_id, with_for_update=True)
    if subscription is None or subscription.realm_id != realm_id:
        raise NotFound("No such webhook subscription.")
    if subscription.state == "deleted":
        raise Conflict("The webhook subscription is deleted; create a new one.")
    return subscription


async def list_subscriptions(
    session: AsyncSession,
    realm_id: str,
    *,
    state: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[WebhookSubscription]:
    """Oldest first; deleted subscriptions only when ``state == "deleted"``."""
    query = select(WebhookSubscription).where(col(WebhookSubscription.realm_id) == realm_id)
    if state:
        if state not in STATES:
            raise invalid("query:state", "state is one of " + ", ".join(STATES))
        query = query.where(col(WebhookSubscription.state) == state)
    else:
        query = query.where(col(WebhookSubscription.state) != "deleted")
    return await keyset_page(session, query, col(WebhookSubscription.id), cursor=cursor, limit=limit)


async def rotate_secret(
    session: AsyncSession, actor: Actor, operator_key: str, webhook_id: str, *, now: datetime | None = None
) -> tuple[WebhookSubscription, str]:
    """A fresh secret; the one it replaces keeps signing for :data:`ROTATION_OVERLAP`.

    Rotating again inside the window replaces the previous secret: only the two newest count.
    """
    subscription = await _changeable(session, actor.realm_id, webhook_id)
    moment = now or SYSTEM_CLOCK.now()
    secret = new_secret()
    subscription.previous_secret_enc = subscription.secret_enc
    subscription.previous_secret_expires_at = moment + ROTATION_OVERLAP
    subscription.secret_enc = crypto.encrypt(operator_key, SECRET_PURPOSE, secret)
    subscription.updated_at = moment
    await session.flush()
    await record_audit(
        session,
        actor,
        "webhook.secret_rotated",
        category=AUDIT_CATEGORY,
        subject_type="webhook",
        subject_id=subscription.id,
        details={"previous_secret_expires_at": subscription.previous_secret_expires_at.isoformat()},
    )
    return subscription, secret


class _Unchanged(enum.Enum):
    """A member the caller did not give (``None`` means something for ``event_types``)."""

    UNCHANGED = "unchanged"


UNCHANGED = _Unchanged.UNCHANGED


async def update_subscription(
    session: AsyncSession,
    actor: Actor,
    webhook_id: str,
    *,
    state: str | None = None,
    allow_private_network: bool | None = None,
    event_types: list[str] | _Unchanged | None = UNCHANGED,
    destination: str | None = None,
) -> WebhookSubscription:
    """Change what is given; ``event_types=None`` means every event type again."""
    subscription = await _changeable(session, actor.realm_id, webhook_id)
    issues: list[Issue] = []
    if state is not None and state not in SETTABLE_STATES:
        issues.append(Issue("/state", "invalid", "state is one of " + ", ".join(SETTABLE_STATES)))
    if not isinstance(event_types, _Unchanged):
        issues += event_types_issues("/event_types", event_types)
    new_allow = subscription.allow_private_network if allow_private_network is None else allow_private_network
    new_destination = subscription.destination if destination is None else destination
    found = destination_issues("/destination", new_destination, new_allow)
    if found and destination is None:
        # The destination stands; it is the flag being turned off that makes it unreachable.
        found = [Issue("/allow_private_network", i.code, i.message) for i in found]
    issues += found
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    changed: list[str] = []
    details: dict[str, Any] = {}
    if state is not None and state != subscription.state:
        details["state"] = {"from": subscription.state, "to": state}
        subscription.state = state
        changed.append("state")
    if new_allow != subscription.allow_private_network:
        subscription.allow_private_network = new_allow
        details["allow_private_network"] = new_allow
        changed.append("allow_private_network")
    if not isinstance(event_types, _Unchanged) and event_types != subscription.event_types:
        subscription.event_types = event_types
        details["event_types"] = event_types
        changed.append("event_types")
    if new_destination != subscription.destination:
        details["destination_host"] = {"from": _host(subscription.destination), "to": _host(new_destination)}
        subscription.destination = new_destination
        changed.append("destination")
    if changed:
        subscription.updated_at = SYSTEM_CLOCK.now()
        await session.flush()
        await record_audit(
            session,
            actor,
            "webhook.updated",
            category=AUDIT_CATEGORY,
            subject_type="webhook",
            subject_id=subscription.id,
            details={"changed": changed, **details},
        )
    return subscription


async def delete_subscription(session: AsyncSession, actor: Actor, webhook_id: str) -> None:
    """Soft delete: the state becomes ``deleted`` and stays so. Deleting again changes nothing.

    The callers first refuse a subscription a published workflow calls (``workflows.refuse_if_referenced``).
    """
    subscription = await session.get(WebhookSubscription, webhook_id, with_for_update=True)
    if subscription is None or subscription.realm_id != actor.realm_id:
        raise NotFound("No such webhook subscription.")
    if subscription.state == "deleted":
        return
    previous = subscription.state
    subscription.state = "deleted"
    subscription.updated_at = SYSTEM_CLOCK.now()
    await session.flush()
    await record_audit(
        session,
        actor,
        "webhook.deleted",
        category=AUDIT_CATEGORY,
        subject_type="webhook",
        subject_id=subscription.id,
        details={"state": {"from": previous, "to": "deleted"}},
    )
