"""Reading the audit log: newest first, keyset-paginated, filtered.

Ids sort by creation time, so "newest first" is "id descending" and the cursor is the last id
seen; both indexes on ``(realm_id, id)`` and ``(realm_id, type, id)`` serve it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models
from engine.directory.models import AuditEvent
from engine.platform.errors import Issue, ValidationFailed
from engine.platform.pagination import Page, keyset_page

KNOWN_CATEGORIES = ("authentication", "authorization", "configuration", "directory", "security", "workflow")


@dataclass(frozen=True)
class AuditFilters:
    type: str | None = None
    category: str | None = None
    actor_id: str | None = None
    subject_id: str | None = None
    since: str | None = None
    until: str | None = None
    correlation_id: str | None = None
    # What a name or an email matched (set by callers that resolve them): any of these ids.
    actor_ids: tuple[str, ...] | None = None
    subject_ids: tuple[str, ...] | None = None

    def as_params(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v and isinstance(v, str)}


def parse_timestamp(value: str) -> datetime:
    """An ISO 8601 date or date-time; without a zone it is UTC."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    moment = datetime.fromisoformat(text)
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    try:
        # The database stores UTC: a time its offset pushes outside years 1-9999 cannot be stored.
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("outside the years 1 to 9999 in UTC") from exc


def _escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def audit_event_view(event: AuditEvent) -> read_models.AuditEvent:
    return read_models.AuditEvent(
        id=event.id,
        occurred_at=event.occurred_at,
        actor=read_models.AuditParty(type=event.actor_type, id=event.actor_id),
        category=event.category,
        type=event.type,
        subject=read_models.AuditParty(type=event.subject_type, id=event.subject_id),
        request_id=event.request_id,
        correlation_id=event.correlation_id,
        details=event.details or {},
    )


async def list_audit_events(
    session: AsyncSession,
    realm_id: str,
    filters: AuditFilters,
    *,
    cursor: str | None = None,
    limit: int | None = None,
) -> Page[AuditEvent]:
    """One page of the realm's audit events matching ``filters``.

    ``type`` is exact, or a prefix when it ends with ``*`` (``webhook.*``); ``since`` is
    inclusive and ``until`` exclusive. Every bad filter is reported at once (``query:<name>``).
    """
    issues: list[Issue] = []
    since = until = None
    for name in ("since", "until"):
        raw = getattr(filters, name)
        if not raw:
            continue
        try:
            parsed = parse_timestamp(raw)
        except ValueError:
            issues.append(Issue(f"query:{name}", "invalid_timestamp", "must be an ISO 8601 date or date-time"))
            continue
        if name == "since":
            since = parsed
        else:
            until = parsed
    if since and until and until <= since:
        issues.append(Issue("query:until", "out_of_range", "must be later than since"))
    if filters.type is not None and (not filters.type.strip("*").strip() or len(filters.type) > 100):
        issues.append(Issue("query:type", "invalid", "must be an event type, or a prefix ending with *"))
    if issues:
        raise ValidationFailed("The filters are not valid.", issues=issues)

    query = select(AuditEvent).where(col(AuditEvent.realm_id) == realm_id)
    if filters.type:
        if filters.type.endswith("*"):
            prefix = _escape_like(filters.type.rstrip("*"))
            query = query.where(col(AuditEvent.type).like(prefix + "%", escape="\\"))
        else:
            query = query.where(col(AuditEvent.type) == filters.type)
    if filters.category:
        query = query.where(col(AuditEvent.category) == filters.category)
    if filters.actor_id:
        query = query.where(col(AuditEvent.actor_id) == filters.actor_id)
    if filters.subject_id:
        query = query.where(col(AuditEvent.subject_id) == filters.subject_id)
    if filters.correlation_id:
        query = query.where(col(AuditEvent.correlation_id) == filters.correlation_id)
    if filters.actor_ids is not None:
        query = query.where(col(AuditEvent.actor_id).in_(filters.actor_ids))
    if filters.subject_ids is not None:
        query = query.where(col(AuditEvent.subject_id).in_(filters.subject_ids))
    if since is not None:
        query = query.where(col(AuditEvent.occurred_at) >= since)
    if until is not None:
        query = query.where(col(AuditEvent.occurred_at) < until)
    return await keyset_page(session, query, col(AuditEvent.id), cursor=cursor, limit=limit, descending=True)
