"""Standard Webhooks signatures, made by the ``standardwebhooks`` package.

A delivery is signed over ``"<webhook-id>.<webhook-timestamp>.<body>"`` with HMAC-SHA256 of the
subscription's secret (base64 after ``whsec_``). While a rotated secret is in its overlap window
the delivery carries one signature per secret, space-separated: ``v1,<new> v1,<previous>``, so a
receiver that still knows only the previous secret keeps accepting deliveries.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook


def signature_header(secrets: Sequence[str], webhook_id: str, timestamp: int, body: str) -> str:
    """The ``Webhook-Signature`` value for ``body`` under every secret given (newest first)."""
    moment = datetime.fromtimestamp(timestamp, UTC)
    return " ".join(Webhook(secret).sign(webhook_id, moment, body) for secret in secrets)
