"""The audit log (SPEC §5): newest first, keyset-paginated, filtered."""

from __future__ import annotations

from litestar import Controller, get
from litestar.params import FromQuery

from cockpit.api.common import REALM_BASE
from cockpit.auth import CurrentPrincipal
from cockpit.state import DbSession
from engine.directory import audit_log, read_models


class AuditEventsController(Controller):
    path = REALM_BASE + "/audit-events"
    tags = ["audit"]

    @get("/", operation_id="listAuditEvents", opt={"permission": "realm.audit.read"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        type: FromQuery[str | None] = None,
        category: FromQuery[str | None] = None,
        actor_id: FromQuery[str | None] = None,
        subject_id: FromQuery[str | None] = None,
        since: FromQuery[str | None] = None,
        until: FromQuery[str | None] = None,
        correlation_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.AuditEventPage:
        """``type`` is exact or a prefix ending with ``*``; ``since`` (inclusive) and ``until``
        (exclusive) are ISO 8601 timestamps; ``correlation_id``: everything one request or one run caused."""
        filters = audit_log.AuditFilters(
            type=type,
            category=category,
            actor_id=actor_id,
            subject_id=subject_id,
            since=since,
            until=until,
            correlation_id=correlation_id,
        )
        page = await audit_log.list_audit_events(db_session, principal.realm.id, filters, cursor=cursor, limit=limit)
        return read_models.AuditEventPage(
            items=[audit_log.audit_event_view(e) for e in page.items], next_cursor=page.next_cursor
        )
