"""Signing against the published Standard Webhooks test vector, and the answer classification."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from engine.endpoints.calls import signed_request
from engine.endpoints.signing import signature_header
from engine.endpoints.transport import classify_status, pinned_url

# The test vector published with the standardwebhooks libraries.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TIMESTAMP = 1614265330
VECTOR_BODY = '{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_signer_matches_the_published_vector() -> None:
    assert signature_header([VECTOR_SECRET], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY) == VECTOR_SIGNATURE


def test_two_secrets_give_two_space_separated_signatures_newest_first() -> None:
    other = "whsec_" + base64.b64encode(b"k" * 32).decode()
    header = signature_header([other, VECTOR_SECRET], VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY)
    first, second = header.split(" ")
    assert second == VECTOR_SIGNATURE
    key = base64.b64decode(other.removeprefix("whsec_"))
    expected = hmac.new(key, f"{VECTOR_ID}.{VECTOR_TIMESTAMP}.{VECTOR_BODY}".encode(), hashlib.sha256).digest()
    assert first == "v1," + base64.b64encode(expected).decode()


def test_the_signed_bytes_are_the_bytes_sent() -> None:
    moment = datetime.fromtimestamp(VECTOR_TIMESTAMP, UTC)
    body, headers = signed_request(
        {"b": 1, "a": "é"}, webhook_id=VECTOR_ID, secrets=[VECTOR_SECRET], moment=moment, idempotency_key="k"
    )
    assert json.loads(body) == {"b": 1, "a": "é"}
    assert headers["Webhook-Signature"] == signature_header([VECTOR_SECRET], VECTOR_ID, VECTOR_TIMESTAMP, body.decode())
    assert headers["Webhook-Timestamp"] == str(VECTOR_TIMESTAMP) and headers["Idempotency-Key"] == "k"


@pytest.mark.parametrize(
    ("status", "category", "permanent"),
    [
        (199, "http_199", False),
        (200, None, False),
        (204, None, False),
        (299, None, False),
        (300, "http_300", False),
        (301, "http_301", False),
        (400, "http_400", True),
        (401, "http_401", True),
        (408, "http_408", False),
        (410, "gone", True),
        (429, "http_429", False),
        (499, "http_499", True),
        (500, "http_500", False),
        (504, "http_504", False),
    ],
)
def test_classification_table(status: int, category: str | None, permanent: bool) -> None:
    assert classify_status(status) == (category, permanent)


def test_pinned_urls_keep_port_path_and_query() -> None:
    assert pinned_url("https://hooks.example.com:8443/in?x=1", "93.184.216.34") == "https://93.184.216.34:8443/in?x=1"
    assert pinned_url("http://hooks.example.com", "2606:4700::1") == "http://[2606:4700::1]/"
