"""The audit log page: filters, newest first, one page at a time, details on demand.

The filter form asks htmx for the table alone (``HX-Target: audit-table``); without
JavaScript it is a plain GET form. Each row opens (``<details>``) to show its details.
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Controller, get
from litestar.params import FromQuery
from litestar.response import Template

from cockpit.auth import CurrentPrincipal
from cockpit.pages.common import page
from cockpit.state import AnyRequest, DbSession
from engine.directory import audit_log
from engine.platform.errors import EngineError

TABLE_ID = "audit-table"


def _text(value: str | None, limit: int = 100) -> str | None:
    value = (value or "").strip()
    return value[:limit] or None


class AuditPages(Controller):
    path = "/realms/{realm:str}/audit"
    include_in_schema = False

    @get("/", operation_id="auditPage", opt={"permission": "realm.audit.read"})
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        type: FromQuery[str | None] = None,
        category: FromQuery[str | None] = None,
        actor_id: FromQuery[str | None] = None,
        subject_id: FromQuery[str | None] = None,
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        filters = audit_log.AuditFilters(
            type=_text(type),
            category=_text(category, 30),
            actor_id=_text(actor_id, 40),
            subject_id=_text(subject_id, 40),
            since=_text(since, 40),
            until=_text(until, 40),
        )
        status_code = 200
        events: list[dict[str, Any]] = []
        next_cursor = list_error = None
        try:
            found = await audit_log.list_audit_events(db_session, principal.realm.id, filters, cursor=cursor)
            events = [audit_log.audit_event_view(e) for e in found.items]
            next_cursor = found.next_cursor
        except EngineError as exc:
            list_error = "; ".join(f"{i.path.removeprefix('query:')}: {i.message}" for i in exc.issues) or exc.detail
            status_code = exc.status
        targeted = request.headers.get("hx-request") == "true" and request.headers.get("hx-target") == TABLE_ID
        return page(
            request,
            "pages/audit/_table.html" if targeted else "pages/audit/list.html",
            nav="audit",
            status_code=200 if targeted else status_code,
            events=events,
            next_cursor=next_cursor,
            list_error=list_error,
            filters=filters,
            params=filters.as_params(),
            categories=audit_log.KNOWN_CATEGORIES,
            pretty=lambda details: json.dumps(details, indent=2, sort_keys=True, default=str),
        )
