"""``call_webhook {subscription_id, compensate?, timeout_ms?}``: a signed call to an endpoint.

An external step: it cannot share a transaction with the call, so the runner records the
attempt ``started`` under the lease and commits, makes the call outside any transaction, and
records the outcome afterwards (engine/runs/endpoint_calls.py). This module decides what is sent and to
whom; :mod:`engine.endpoints.transport` sends it and classifies the answer.

The subscription's state is read when the attempt starts: paused retries
(``subscription_paused``, transient); disabled (``subscription_disabled``), deleted or missing
(``subscription_missing``) and a secret the operator key cannot read (``secret_unavailable``)
fail permanently. Compensation (``compensate: true``) calls the endpoint again with
``action: "compensate"``; it is not re-checked for authority.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from engine.directory.models import WebhookSubscription
from engine.directory.webhooks import signing_secrets
from engine.endpoints.calls import (
    COMPENSATION_TIMEOUT_MS,
    CallAction,
    EndpointSettings,
    PreparedCall,
    signed_request,
    step_call_body,
)
from engine.platform import crypto
from engine.runs.decisions import Effect, Refusal, SubscriptionFacts, decide, subscription_refusal
from engine.runs.models import StepAttempt
from engine.runs.states import COMP_IMPOSSIBLE, COMP_PENDING, STRATEGY_IMPOSSIBLE, STRATEGY_NOTIFY_ENDPOINT
from engine.runs.steps.base import EXTERNAL, Outcome, StepContext, StepFailure, StepType


async def _target(
    ctx: StepContext, subscription_id: str, settings: EndpointSettings, now: datetime
) -> tuple[WebhookSubscription, list[str]]:
    """The subscription and its signing secrets, refused by the rule the call's decision applies."""
    subscription = await ctx.session.get(WebhookSubscription, subscription_id)
    if subscription is not None and (subscription.realm_id != ctx.run.realm_id or subscription.state == "deleted"):
        subscription = None
    secrets: list[str] = []
    if subscription is not None and settings.operator_key:
        with contextlib.suppress(crypto.SecretUnavailable):
            secrets = signing_secrets(subscription, settings.operator_key, now)
    facts = (
        SubscriptionFacts(subscription.id, subscription.state, subscription.destination, bool(secrets))
        if subscription is not None
        else None
    )
    refusal = subscription_refusal(facts, subscription_id, bool(settings.operator_key))
    if refusal is not None:
        raise StepFailure(refusal.category, refusal.message, permanent=refusal.permanent)
    assert subscription is not None
    return subscription, secrets


class CallWebhook(StepType):
    name = "call_webhook"
    kind = EXTERNAL

    async def perform(self, ctx: StepContext) -> Outcome:  # the runner calls prepare, outside any transaction
        raise StepFailure("error", "call_webhook runs as an external step", permanent=False)

    async def decide_call(self, ctx: StepContext, settings: EndpointSettings) -> Effect:
        """The call's whole decision (the publisher's re-check, the subscription) before it is prepared."""
        ctx.snapshot = None  # a call reads its subscription now, with the operator key
        decision = decide(await self.snapshot(ctx, operator_key=settings.operator_key))
        if isinstance(decision, Refusal):
            raise StepFailure(decision.category, decision.message, permanent=decision.permanent)
        return decision

    @staticmethod
    def succeeded(ctx_step: dict[str, object], status_code: int | None, latency_ms: int) -> Outcome:
        compensate = bool(ctx_step.get("compensate"))
        return Outcome(
            result={"status_code": status_code, "latency_ms": latency_ms},
            strategy=STRATEGY_NOTIFY_ENDPOINT if compensate else STRATEGY_IMPOSSIBLE,
            compensation_state=COMP_PENDING if compensate else COMP_IMPOSSIBLE,
        )

    async def prepare(self, ctx: StepContext, attempt: StepAttempt, settings: EndpointSettings) -> PreparedCall:
        """The execute call of ``attempt`` (signed now; its Webhook-Id is the attempt id)."""
        subscription_id = str(ctx.step["subscription_id"])
        subscription, secrets = await _target(ctx, subscription_id, settings, ctx.now)
        limit = settings.timeout_ms
        if isinstance(ctx.step.get("timeout_ms"), int):
            limit = min(limit, int(ctx.step["timeout_ms"]))
        return self._call(ctx, attempt, subscription, secrets, "execute", attempt.number, attempt.id, limit)

    async def prepare_compensation(
        self, ctx: StepContext, attempt: StepAttempt, settings: EndpointSettings
    ) -> PreparedCall:
        """The compensation call: Webhook-Id ``<attempt id>c``, the try number, 5 s."""
        subscription_id = str(ctx.step["subscription_id"])
        subscription, secrets = await _target(ctx, subscription_id, settings, ctx.now)
        return self._call(
            ctx,
            attempt,
            subscription,
            secrets,
            "compensate",
            attempt.compensation_attempts,
            attempt.id + "c",
            COMPENSATION_TIMEOUT_MS,
        )

    def _call(
        self,
        ctx: StepContext,
        attempt: StepAttempt,
        subscription: WebhookSubscription,
        secrets: list[str],
        action: CallAction,
        number: int,
        webhook_id: str,
        timeout_ms: int,
    ) -> PreparedCall:
        key = attempt.idempotency_key + (".compensate" if action == "compensate" else "")
        body = step_call_body(
            action=action,
            realm_id=ctx.run.realm_id,
            organization_id=ctx.organization_id,
            workflow_id=ctx.run.workflow_id,
            revision=ctx.run.revision,
            run_id=ctx.run.id,
            step_id=attempt.step_id,
            attempt=number,
            idempotency_key=key,
            subject_id=ctx.run.subject_id,
            trigger_type=ctx.run.trigger_type,
            run_input=ctx.run.input or {},
            moment=ctx.now,
        )
        content, headers = signed_request(
            body, webhook_id=webhook_id, secrets=secrets, moment=ctx.now, idempotency_key=key
        )
        return PreparedCall(
            run_id=ctx.run.id,
            attempt_id=attempt.id,
            action=action,
            url=subscription.destination,
            body=content,
            headers=headers,
            timeout_s=timeout_ms / 1000,  # at least 100 ms: the schema and the configuration say so
            allow_private_network=subscription.allow_private_network,
        )
