"""Calls to endpoints outside the product: signed, egress-checked at send time, at least once.

- :mod:`engine.endpoints.signing`: Standard Webhooks signatures (one per valid secret).
- :mod:`engine.endpoints.transport`: one signed POST to a subscription's destination, to the
  address the egress check approved, with the failure classification of seed 000.
- :mod:`engine.endpoints.calls`: the body and headers of a ``call_webhook`` step call.
- :mod:`engine.endpoints.deliveries`: outbox events delivered to subscriptions.
"""
