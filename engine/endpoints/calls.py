"""What a ``call_webhook`` step sends (``step-call.v1.json``, contract version 1), and to whom.

The body carries identifiers only. Execute calls: ``Webhook-Id`` is the attempt id (new per
attempt), ``attempt`` the step attempt number, ``Idempotency-Key: <run_id>.<step_id>`` (the same
for every attempt), timeout ``min(timeout_ms, operator delivery timeout)``. Compensation calls:
``action: "compensate"``, ``Webhook-Id: <attempt id>c`` (the same for every try),
``Idempotency-Key: <key>.compensate``, ``attempt`` the compensation try, a fixed 5 s timeout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from engine.endpoints.signing import signature_header

CONTRACT_VERSION = 1
COMPENSATION_TIMEOUT_MS = 5_000
DEFAULT_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class EndpointSettings:
    """What the engine needs from the operator to call endpoints."""

    operator_key: str | None = None  # decrypts subscription secrets; None: every call secret_unavailable
    allow_private_egress: bool = False  # COCKPIT_ALLOW_PRIVATE_EGRESS
    timeout_ms: int = DEFAULT_TIMEOUT_MS  # COCKPIT_WEBHOOK_TIMEOUT_MS, the ceiling of every call
    ca_bundle: Path | None = None  # COCKPIT_WEBHOOK_CA_BUNDLE: more CAs trusted for https endpoints


# What a call asks of the endpoint: the step itself, or undoing it.
CallAction = Literal["execute", "compensate"]


@dataclass(frozen=True)
class PreparedCall:
    """A signed call, ready to send outside any transaction."""

    run_id: str
    attempt_id: str
    action: CallAction
    url: str
    body: bytes
    headers: dict[str, str]
    timeout_s: float
    allow_private_network: bool


def sent_at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def step_call_body(
    *,
    action: CallAction,
    realm_id: str,
    organization_id: str | None,
    workflow_id: str,
    revision: int,
    run_id: str,
    step_id: str,
    attempt: int,
    idempotency_key: str,
    subject_id: str,
    trigger_type: str,
    run_input: dict[str, Any],
    moment: datetime,
) -> dict[str, Any]:
    trigger: dict[str, Any] = {"type": trigger_type}
    if trigger_type == "event":
        trigger |= {"event_type": run_input.get("event_type"), "event_id": run_input.get("event_id")}
    return {
        "type": "workflow.step",
        "contract_version": CONTRACT_VERSION,
        "action": action,
        "realm_id": realm_id,
        "organization_id": organization_id,
        "workflow_id": workflow_id,
        "revision": revision,
        "run_id": run_id,
        "step_id": step_id,
        "attempt": attempt,
        "idempotency_key": idempotency_key,
        "subject": {"type": "user", "id": subject_id},
        "trigger": trigger,
        "sent_at": sent_at(moment),
    }


def signed_request(
    body: dict[str, Any], *, webhook_id: str, secrets: list[str], moment: datetime, idempotency_key: str | None
) -> tuple[bytes, dict[str, str]]:
    """The exact bytes and the headers (Standard Webhooks) of one call or delivery."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    timestamp = int(moment.timestamp())
    headers = {
        "Content-Type": "application/json",
        "Webhook-Id": webhook_id,
        "Webhook-Timestamp": str(timestamp),
        "Webhook-Signature": signature_header(secrets, webhook_id, timestamp, text),
    }
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return text.encode(), headers
