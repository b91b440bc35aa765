"""Webhook pages: the realm's subscriptions, a create form, and per-row actions.

A new or rotated secret is shown once, on the page that answers the form; it is never stored
anywhere it could be shown again. Row actions post with htmx and swap the ``#webhooks``
component (list and secret box); without JavaScript they are plain forms answered with the
whole page. Permissions are those of the API: ``realm.webhooks.read|write``.
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, may, page, targets
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory import webhooks
from engine.directory.audit import DELIVERABLE_EVENT_TYPES
from engine.endpoints import deliveries
from engine.platform.errors import EngineError
from engine.workflows.references import refuse_if_referenced

COMPONENT_ID = "webhooks"
DELIVERIES_ID = "deliveries"
READ = {"permission": "realm.webhooks.read"}
WRITE = {"permission": "realm.webhooks.write"}
STATE_ACTIONS = {"pause": "paused", "resume": "active", "disable": "disabled"}


class WebhooksPages(Controller):
    path = "/realms/{realm:str}/webhooks"
    include_in_schema = False

    async def _render(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        state: str | None = None,
        cursor: str | None = None,
        status_code: int = 200,
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        allows = context_of(request.app).settings.allow_private_egress
        try:
            found = await webhooks.list_subscriptions(
                db_session, principal.realm.id, state=state or None, cursor=cursor
            )
            items, next_cursor, list_error = found.items, found.next_cursor, None
        except EngineError as exc:
            items, next_cursor = [], None
            list_error = "; ".join(i.message for i in exc.issues) or exc.detail
            status_code = max(status_code, exc.status)
        template = "pages/webhooks/list.html"
        if targets(request, COMPONENT_ID):
            # htmx swaps only 2xx answers: the component shows its own error message.
            template, status_code = "pages/webhooks/_component.html", 200
        return page(
            request,
            template,
            nav="webhooks",
            status_code=status_code,
            subscriptions=[webhooks.webhook_view(s, operator_allows_private=allows) for s in items],
            next_cursor=next_cursor,
            state=state or "",
            states=webhooks.STATES,
            list_error=list_error,
            event_types=DELIVERABLE_EVENT_TYPES,
            operator_allows_private=allows,
            can_write=may(principal, "realm.webhooks.write"),
            form=form or {"destination": "", "allow_private_network": False, "event_types": []},
            **context,
        )

    @get("/", operation_id="webhooksPage", opt=READ)
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        return await self._render(request, db_session, principal, state=state_filter, cursor=cursor)

    @post("/", operation_id="webhooksPageCreate", opt=WRITE, status_code=200)
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Template:
        form = await request.form()
        chosen = [str(v) for v in form.getall("event_types", [])]
        destination = str(form.get("destination") or "").strip()
        allow_private_network = bool(form.get("allow_private_network"))
        values = {"destination": destination, "allow_private_network": allow_private_network, "event_types": chosen}
        try:
            subscription, secret = await webhooks.create_subscription(
                db_session,
                principal.actor(request_id_of(request)),
                context_of(request.app).settings.secret_key,
                destination=destination,
                allow_private_network=allow_private_network,
                event_types=chosen or None,
            )
        except EngineError as exc:
            return await self._render(
                request,
                db_session,
                principal,
                status_code=exc.status,
                form=values,
                form_failed=True,
                **form_errors(exc),
            )
        revealed = {"id": subscription.id, "secret": secret, "what": "created", "destination": subscription.destination}
        return await self._render(request, db_session, principal, revealed=revealed)

    async def _render_deliveries(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        webhook_id: str,
        *,
        state: str | None = None,
        cursor: str | None = None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        subscription = await webhooks.get_subscription(db_session, principal.realm.id, webhook_id)
        try:
            found = await deliveries.list_deliveries(
                db_session, principal.realm.id, webhook_id, state=state or None, cursor=cursor
            )
            items, next_cursor, list_error = found.items, found.next_cursor, None
        except EngineError as exc:
            items, next_cursor = [], None
            list_error = "; ".join(i.message for i in exc.issues) or exc.detail
            status_code = max(status_code, exc.status)
        template = "pages/webhooks/deliveries.html"
        if targets(request, DELIVERIES_ID):
            template, status_code = "pages/webhooks/_deliveries.html", 200
        allows = context_of(request.app).settings.allow_private_egress
        return page(
            request,
            template,
            nav="webhooks",
            status_code=status_code,
            subscription=webhooks.webhook_view(subscription, operator_allows_private=allows),
            deliveries=[deliveries.delivery_view(d) for d in items],
            next_cursor=next_cursor,
            state=state or "",
            states=deliveries.STATES,
            list_error=list_error,
            can_write=may(principal, "realm.webhooks.write"),
            **context,
        )

    @get("/{webhook_id:str}/deliveries", operation_id="webhookDeliveriesPage", opt=READ)
    async def deliveries_page(
        self,
        request: AnyRequest,
        webhook_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        state_filter: Annotated[str | None, QueryParameter(name="state")] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        """The delivery log of one subscription: event, tries, state, last answer and latency."""
        return await self._render_deliveries(
            request, db_session, principal, webhook_id, state=state_filter, cursor=cursor
        )

    @post(
        "/{webhook_id:str}/deliveries/{delivery_id:str}/redeliver",
        operation_id="webhookDeliveryRedeliverPage",
        opt=WRITE,
        status_code=200,
    )
    async def redeliver_page(
        self,
        request: AnyRequest,
        webhook_id: FromPath[str],
        delivery_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Template:
        try:
            copy = await deliveries.redeliver(
                db_session, principal.actor(request_id_of(request)), webhook_id, delivery_id
            )
        except EngineError as exc:
            if exc.status == 404:
                raise
            return await self._render_deliveries(
                request, db_session, principal, webhook_id, status_code=exc.status, error=exc.detail
            )
        flash = f"Event {copy.event_type} queued again; it goes after the deliveries already waiting."
        return await self._render_deliveries(request, db_session, principal, webhook_id, flash=flash)

    @post("/{webhook_id:str}/{action:str}", operation_id="webhooksPageAction", opt=WRITE, status_code=200)
    async def action(
        self,
        request: AnyRequest,
        webhook_id: FromPath[str],
        action: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Template:
        """``rotate-secret``, ``pause``, ``resume``, ``disable`` or ``delete`` one subscription."""
        actor = principal.actor(request_id_of(request))
        try:
            if action == "rotate-secret":
                subscription, secret = await webhooks.rotate_secret(
                    db_session, actor, context_of(request.app).settings.secret_key, webhook_id
                )
                revealed = {
                    "id": subscription.id,
                    "secret": secret,
                    "what": "rotated",
                    "destination": subscription.destination,
                    "previous_expires_at": subscription.previous_secret_expires_at,
                }
                return await self._render(request, db_session, principal, revealed=revealed)
            if action == "delete":
                force = (await request.form()).get("force") == "true"
                await refuse_if_referenced(db_session, principal.realm.id, webhook_id, "subscription", force)
                await webhooks.delete_subscription(db_session, actor, webhook_id)
                flash = "Subscription deleted. Nothing more is sent to it."
            elif action in STATE_ACTIONS:
                subscription = await webhooks.update_subscription(
                    db_session, actor, webhook_id, state=STATE_ACTIONS[action]
                )
                flash = f"Subscription {subscription.state}."
            else:
                return await self._render(
                    request, db_session, principal, status_code=404, error=f"Unknown action {action!r}."
                )
        except EngineError as exc:
            if exc.status == 404:
                raise
            forceable = webhook_id if exc.code == "referenced_by_workflows" else None
            return await self._render(
                request, db_session, principal, status_code=exc.status, error=exc.detail, force_delete=forceable
            )
        return await self._render(request, db_session, principal, flash=flash)
