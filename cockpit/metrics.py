"""``/metrics`` (Prometheus text format) and the request metrics of the web server.

Requests are counted and timed by **route template** (``/api/v1/realms/{realm:str}/users``),
never by the path itself, so labels carry no slug, id or name of a realm; a request that matched
no route is ``route="unmatched"``. The endpoint is open unless ``COCKPIT_METRICS_TOKEN`` is set;
then it wants ``Authorization: Bearer <token>`` (compared in constant time).
"""

from __future__ import annotations

import time

from litestar import Controller, Response, get
from litestar.datastructures import State
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram

from cockpit.state import AnyRequest, context_of
from engine.platform import crypto
from engine.platform.errors import Unauthorized
from engine.runs.metrics import database_gauges, exposition

HTTP_REQUESTS = Counter(
    "cockpit_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ["method", "route", "status"],
)
HTTP_LATENCY = Histogram(
    "cockpit_http_request_duration_seconds",
    "Time to answer an HTTP request, by method, route template and status.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def metrics_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive, capture)
        finally:
            route = scope.get("path_template") or "unmatched"
            labels = (str(scope.get("method", "")), str(route), str(status))
            HTTP_REQUESTS.labels(*labels).inc()
            HTTP_LATENCY.labels(*labels).observe(time.perf_counter() - started)

    return middleware


class MetricsController(Controller):
    tags = ["health"]

    @get(
        "/metrics",
        operation_id="metrics",
        opt={"public": True},
        media_type=CONTENT_TYPE_LATEST,
    )
    async def metrics(self, request: AnyRequest, state: State) -> Response[bytes]:
        """Prometheus metrics (text format); a bearer token when the operator set ``COCKPIT_METRICS_TOKEN``
        (401 without it)."""
        ctx = context_of(state)
        expected = ctx.settings.metrics_token
        if expected:
            scheme, _, presented = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not crypto.constant_time_equal(presented.strip(), expected):
                raise Unauthorized("The metrics need the bearer token set in COCKPIT_METRICS_TOKEN.")
        async with (ctx.read_sessions or ctx.sessions)() as session:
            families = await database_gauges(session)
        return Response(exposition(families), media_type=CONTENT_TYPE_LATEST)
