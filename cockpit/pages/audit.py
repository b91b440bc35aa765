"""The audit log page: filters, newest first, one page at a time, details on demand.

The filter form asks htmx for the table alone (``HX-Target: audit-table``); without
JavaScript it is a plain GET form. Each row opens (``<details>``) to show its details.

Actor and subject are filtered by what a person knows: an id, an email, or a name (a user's
display name, a role, group, organization, workflow or service principal). A name that matches
nothing says so instead of showing an empty log; the objects it matched are listed. Every id the
page shows (actor, subject, and ids inside the details) carries its name, from one lookup.
"""

from __future__ import annotations

import json

from litestar import Controller, get
from litestar.params import FromQuery
from litestar.response import Template

from cockpit.auth import CurrentPrincipal
from cockpit.names import ids_in, resolve_names
from cockpit.pages.common import page, targets
from cockpit.state import AnyRequest, DbSession
from engine.directory import audit_log, read_models
from engine.platform.errors import EngineError
from engine.runs.name_lookup import NamedObject, match_names

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
        realm_id = principal.realm.id
        actor = _text(actor_id, 254)
        subject = _text(subject_id, 254)
        unmatched: list[str] = []
        matched: dict[str, list[NamedObject]] = {}
        ids: dict[str, tuple[str, ...] | None] = {"actor": None, "subject": None}
        for label, value in (("actor", actor), ("subject", subject)):
            if value is None:
                continue
            found = await match_names(db_session, realm_id, value)
            if found:
                matched[label] = found
                ids[label] = tuple(f.id for f in found)
            elif (
                value.split("_", 1)[0] in ("usr", "spn", "org", "rol", "grp", "whk", "wfl", "wrn") and "@" not in value
            ):
                ids[label] = (value,)  # an id no longer in the directory still filters its events
            else:
                unmatched.append(label)
                ids[label] = ()
        filters = audit_log.AuditFilters(
            type=_text(type),
            category=_text(category, 30),
            since=_text(since, 40),
            until=_text(until, 40),
            actor_ids=ids["actor"],
            subject_ids=ids["subject"],
        )
        params = filters.as_params() | {k: v for k, v in (("actor_id", actor), ("subject_id", subject)) if v}
        status_code = 200
        events: list[read_models.AuditEvent] = []
        next_cursor = list_error = None
        try:
            found_page = await audit_log.list_audit_events(db_session, realm_id, filters, cursor=cursor)
            events = [audit_log.audit_event_view(e) for e in found_page.items]
            next_cursor = found_page.next_cursor
        except EngineError as exc:
            list_error = "; ".join(f"{i.path.removeprefix('query:')}: {i.message}" for i in exc.issues) or exc.detail
            status_code = exc.status
        shown: list[str | None] = []
        for e in events:
            shown += [e.actor.id, e.subject.id, *ids_in(e.details)]
        names = await resolve_names(db_session, realm_id, shown, slug=principal.realm.slug)
        targeted = targets(request, TABLE_ID)
        return page(
            request,
            "pages/audit/_table.html" if targeted else "pages/audit/list.html",
            nav="audit",
            status_code=200 if targeted else status_code,
            events=events,
            next_cursor=next_cursor,
            list_error=list_error,
            filters=filters,
            actor=actor or "",
            subject=subject or "",
            matched=matched,
            unmatched=unmatched,
            params=params,
            names=names,
            categories=audit_log.KNOWN_CATEGORIES,
            pretty=lambda details: json.dumps(details, indent=2, sort_keys=True, default=str),
        )
