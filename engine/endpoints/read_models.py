"""The endpoints' read models: a webhook subscription's deliveries, as the API answers them and the
pages show them (built by ``delivery_view`` in ``deliveries.py``)."""

from __future__ import annotations

from datetime import datetime

from engine.platform.read_models import Shape


class WebhookDelivery(Shape):
    id: str
    subscription_id: str
    event_id: str
    event_type: str
    state: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_latency_ms: int | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    redelivery_of: str | None
    created_at: datetime
    finished_at: datetime | None


class WebhookDeliveryPage(Shape):
    items: list[WebhookDelivery]
    next_cursor: str | None
