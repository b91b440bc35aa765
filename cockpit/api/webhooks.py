"""Webhook subscriptions (SPEC §5): the secret is in the answer to a create or a rotation only.

``DELETE`` is soft: the subscription's state becomes ``deleted``. ``GET /webhooks/{id}`` still
shows it (runs and the audit log name it); the list hides deleted subscriptions unless asked
with ``?state=deleted``; a deleted subscription cannot be changed or rotated (409).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, delete, get, patch, post
from litestar import get as read_route  # the controller's own ``get`` handler shadows the decorator
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory import read_models, webhooks
from engine.endpoints import deliveries
from engine.endpoints import read_models as endpoint_models
from engine.workflows.references import refuse_if_referenced


class CreateWebhook(Body):
    destination: str
    allow_private_network: bool = False
    event_types: list[str] | None = None


class UpdateWebhook(Body):
    state: str | None = None
    allow_private_network: bool | None = None
    event_types: list[str] | msgspec.UnsetType | None = msgspec.UNSET
    destination: str | None = None


def _operator_allows_private(request: AnyRequest) -> bool:
    return context_of(request.app).settings.allow_private_egress


class WebhooksController(Controller):
    path = REALM_BASE + "/webhooks"
    tags = ["directory"]

    @post("/", operation_id="createWebhook", opt={"permission": "realm.webhooks.write", "location": "/webhooks/{id}"})
    async def create(
        self, request: AnyRequest, data: JSONBody[CreateWebhook], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.WebhookWithSecret:
        """Subscribe a destination; the answer carries ``secret``, shown this once."""
        subscription, secret = await webhooks.create_subscription(
            db_session,
            principal.actor(request_id_of(request)),
            context_of(request.app).settings.secret_key,
            destination=data.destination,
            allow_private_network=data.allow_private_network,
            event_types=data.event_types,
        )
        return webhooks.webhook_with_secret_view(
            subscription, secret, operator_allows_private=_operator_allows_private(request)
        )

    @get("/", operation_id="listWebhooks", opt={"permission": "realm.webhooks.read"})
    async def list(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.WebhookPage:
        """Subscriptions oldest first; deleted ones only with ``?state=deleted``."""
        page = await webhooks.list_subscriptions(
            db_session, principal.realm.id, state=state_filter, cursor=cursor, limit=limit
        )
        allows = _operator_allows_private(request)
        return read_models.WebhookPage(
            items=[webhooks.webhook_view(s, operator_allows_private=allows) for s in page.items],
            next_cursor=page.next_cursor,
        )

    @get("/{webhook_id:str}", operation_id="getWebhook", opt={"permission": "realm.webhooks.read"})
    async def get(
        self, request: AnyRequest, webhook_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Webhook:
        """One webhook subscription (never its secret)."""
        subscription = await webhooks.get_subscription(db_session, principal.realm.id, webhook_id)
        return webhooks.webhook_view(subscription, operator_allows_private=_operator_allows_private(request))

    @patch("/{webhook_id:str}", operation_id="updateWebhook", opt={"permission": "realm.webhooks.write"})
    async def update(
        self,
        request: AnyRequest,
        webhook_id: FromPath[str],
        data: JSONBody[UpdateWebhook],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.Webhook:
        """Change the state (active, paused, disabled), destination, flag or event types
        (``event_types: null`` means every directory event type)."""
        changes: dict[str, Any] = {}
        if data.event_types is not msgspec.UNSET:
            changes["event_types"] = data.event_types
        subscription = await webhooks.update_subscription(
            db_session,
            principal.actor(request_id_of(request)),
            webhook_id,
            state=data.state,
            allow_private_network=data.allow_private_network,
            destination=data.destination,
            **changes,
        )
        return webhooks.webhook_view(subscription, operator_allows_private=_operator_allows_private(request))

    @delete("/{webhook_id:str}", operation_id="deleteWebhook", opt={"permission": "realm.webhooks.write"})
    async def remove(
        self,
        request: AnyRequest,
        webhook_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        force: FromQuery[bool] = False,
    ) -> None:
        """Soft delete (state ``deleted``); deleting again answers 204 and changes nothing.

        409 ``referenced_by_workflows`` while a published workflow calls it, unless ``force=true``.
        """
        await refuse_if_referenced(db_session, principal.realm.id, webhook_id, "subscription", force)
        await webhooks.delete_subscription(db_session, principal.actor(request_id_of(request)), webhook_id)

    @post(
        "/{webhook_id:str}/rotate-secret",
        operation_id="rotateWebhookSecret",
        status_code=200,
        opt={"permission": "realm.webhooks.write"},
    )
    async def rotate(
        self, request: AnyRequest, webhook_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.WebhookWithSecret:
        """A new secret, shown this once; the previous one still signs until
        ``previous_secret_expires_at`` (24 h)."""
        subscription, secret = await webhooks.rotate_secret(
            db_session,
            principal.actor(request_id_of(request)),
            context_of(request.app).settings.secret_key,
            webhook_id,
        )
        return webhooks.webhook_with_secret_view(
            subscription, secret, operator_allows_private=_operator_allows_private(request)
        )

    @read_route(
        "/{webhook_id:str}/deliveries",
        operation_id="listWebhookDeliveries",
        opt={"permission": "realm.webhooks.read"},
    )
    async def deliveries(
        self,
        webhook_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> endpoint_models.WebhookDeliveryPage:
        """The subscription's delivery log, newest first: event, tries, state, last answer and latency."""
        page = await deliveries.list_deliveries(
            db_session, principal.realm.id, webhook_id, state=state_filter, cursor=cursor, limit=limit
        )
        return endpoint_models.WebhookDeliveryPage(
            items=[deliveries.delivery_view(d) for d in page.items], next_cursor=page.next_cursor
        )

    @post(
        "/{webhook_id:str}/deliveries/{delivery_id:str}/redeliver",
        operation_id="redeliverWebhookDelivery",
        status_code=202,
        opt={"permission": "realm.webhooks.write", "location": "/webhooks/{webhook_id}/deliveries/{id}"},
    )
    async def redeliver(
        self,
        request: AnyRequest,
        webhook_id: FromPath[str],
        delivery_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> endpoint_models.WebhookDelivery:
        """Send the delivery's event again, as a new delivery queued behind the subscription's others
        (409 while the subscription is disabled or deleted)."""
        copy = await deliveries.redeliver(db_session, principal.actor(request_id_of(request)), webhook_id, delivery_id)
        return deliveries.delivery_view(copy)
