"""Schedule triggers: slots, selectors and firing (seed 000 "Triggers" and "Execution").

A schedule trigger ``{"type": "schedule", "every": …, "select": …}`` of an active workflow's
published revision has slots at ``published_at + k × every`` (k = 0, 1, …): the first is due
the moment the revision is published, so the population is covered at once. A scheduler pass
fires, for each trigger, only the **latest** slot that has come (missed slots are never caught
up: the next slot covers the population again).

A slot fires once, whatever number of schedulers run: firing starts by inserting the slot's
row into ``workflow_schedule_firings`` (unique per workflow, trigger and slot) with
``ON CONFLICT DO NOTHING``; a second scheduler inserting the same slot waits for the first to
commit and then finds it taken. The runs carry the slot (ISO 8601, UTC) as trigger key, so the
runs' own unique index ``(workflow_id, trigger_type, trigger_key, subject_id)`` backs it up: a
subject gets one run per slot even when two schedule triggers of a workflow share a slot.

At most :data:`MAX_SUBJECTS` subjects per firing, oldest user id first; how many more the
selector matched is recorded on the firing and in the audit event ``workflow.schedule.fired``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import distinct_on, insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from engine.directory.audit import Actor, record_audit
from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.platform.ids import new_id
from engine.runs.models import ScheduleFiring
from engine.workflows.definitions.durations import parse_duration
from engine.workflows.models import Workflow, WorkflowRevision

log = logging.getLogger("cockpit.schedules")

MAX_SUBJECTS = 500
CATEGORY = "workflow"


# --- Slots ------------------------------------------------------------------------------------------


def current_slot(anchor: datetime, every_s: int, now: datetime) -> datetime | None:
    """The latest slot at or before ``now`` (None before the first)."""
    if now < anchor or every_s <= 0:
        return None
    k = int((now - anchor).total_seconds() // every_s)
    return anchor + timedelta(seconds=k * every_s)


def next_slot(anchor: datetime, every_s: int, now: datetime) -> datetime:
    """The first slot after ``now``."""
    slot = current_slot(anchor, every_s, now)
    return anchor if slot is None else slot + timedelta(seconds=every_s)


def slot_key(slot: datetime) -> str:
    """The trigger key of a slot's runs: the slot in UTC, to the microsecond."""
    return slot.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def trigger_selector(trigger: dict[str, Any]) -> dict[str, Any]:
    """A copy of the schedule trigger's ``select`` (who a firing runs for); empty when it names none."""
    chosen = trigger.get("select")
    return dict(chosen) if isinstance(chosen, dict) else {}


def schedule_triggers(definition: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The schedule triggers of a definition with their index in ``triggers``."""
    triggers = definition.get("triggers")
    if not isinstance(triggers, list):
        return []
    return [(i, t) for i, t in enumerate(triggers) if isinstance(t, dict) and t.get("type") == "schedule"]


# --- Selectors --------------------------------------------------------------------------------------

# Each selector query returns (user_id, organization_id) once per user of the realm, ordered by
# user id, with the organization the run acts in (the selector's, or the oldest assignment's).
_ROLE_HOLDERS = """
SELECT DISTINCT ON (a.user_id) a.user_id, a.organization_id
  FROM role_assignments a JOIN users u ON u.id = a.user_id AND u.realm_id = a.realm_id
 WHERE a.realm_id = :realm AND a.role_id = :role AND a.user_id IS NOT NULL
   AND a.created_at <= :granted_before
   AND (a.expires_at IS NULL OR a.expires_at > :now)
 ORDER BY a.user_id, a.created_at, a.id
"""

_ORGANIZATION_MEMBERS = """
SELECT m.user_id, m.organization_id
  FROM memberships m JOIN organizations o ON o.id = m.organization_id AND o.realm_id = m.realm_id
 WHERE m.realm_id = :realm AND m.organization_id = :organization
 ORDER BY m.user_id
"""

_GROUP_MEMBERS = """
WITH RECURSIVE tree AS (
    SELECT g.id, g.organization_id FROM groups g WHERE g.realm_id = :realm AND g.id = :group
    UNION
    SELECT c.id, c.organization_id FROM groups c JOIN tree t ON c.parent_id = t.id WHERE c.realm_id = :realm
)
SELECT DISTINCT ON (gm.user_id) gm.user_id, t.organization_id
  FROM group_members gm JOIN tree t ON t.id = gm.group_id
 WHERE gm.realm_id = :realm
 ORDER BY gm.user_id
"""


@dataclass(frozen=True)
class Selection:
    subjects: list[tuple[str, str | None]]  # (user id, organization id), at most the limit
    total: int  # how many the selector matched

    @property
    def truncated(self) -> int:
        return self.total - len(self.subjects)


async def select_subjects(
    session: AsyncSession, realm_id: str, selector: dict[str, Any], now: datetime, *, limit: int = MAX_SUBJECTS
) -> Selection:
    """Resolve a selector to at most ``limit`` users (ordered by id) and the number it matched."""
    kind = selector.get("type")
    params: dict[str, Any] = {"realm": realm_id, "now": now}
    if kind == "role_holders":
        sql = _ROLE_HOLDERS
        params["role"] = selector.get("role_id")
        params["granted_before"] = now - timedelta(seconds=parse_duration(str(selector.get("granted_before"))))
    elif kind == "organization_members":
        sql = _ORGANIZATION_MEMBERS
        params["organization"] = selector.get("organization_id")
    elif kind == "group_members":
        sql = _GROUP_MEMBERS
        params["group"] = selector.get("group_id")
    else:  # validation refuses any other selector; a stored one that is not known selects nobody
        return Selection([], 0)
    params["limit"] = limit
    rows = (
        await session.execute(
            text(
                f"SELECT s.user_id, s.organization_id, count(*) OVER () FROM ({sql}) s ORDER BY s.user_id LIMIT :limit"
            ),
            params,
        )
    ).all()
    total = int(rows[0][2]) if rows else 0
    return Selection([(str(u), o) for u, o, _ in rows], total)


# --- Firing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Firing:
    workflow_id: str
    trigger_index: int
    slot: datetime
    started: int
    selected: int
    truncated: int


async def _due_schedules(session: AsyncSession) -> list[tuple[Workflow, WorkflowRevision]]:
    """Active workflows whose published revision has a schedule trigger."""
    from sqlalchemy import select

    rows = await session.execute(
        select(Workflow, WorkflowRevision)
        .join(
            WorkflowRevision,
            (col(WorkflowRevision.workflow_id) == col(Workflow.id))
            & (col(WorkflowRevision.number) == col(Workflow.published_revision)),
        )
        .where(
            col(Workflow.state) == "active",
            col(WorkflowRevision.definition)["triggers"].contains([{"type": "schedule"}]),
        )
        .order_by(col(Workflow.id))
    )
    return [(w, r) for w, r in rows.all()]


async def fire_slot(
    session: AsyncSession,
    workflow: Workflow,
    revision: WorkflowRevision,
    trigger_index: int,
    trigger: dict[str, Any],
    slot: datetime,
    now: datetime,
) -> Firing | None:
    """Fire one slot of one trigger in the caller's transaction; None when it has fired already."""
    from engine.runs.service import StartRequest, start_runs

    claimed = await session.execute(
        insert(ScheduleFiring)
        .values(
            id=new_id("wsf"),
            realm_id=workflow.realm_id,
            workflow_id=workflow.id,
            trigger_index=trigger_index,
            revision=revision.number,
            slot_at=slot,
            fired_at=now,
            selected=0,
            started=0,
            truncated=0,
        )
        .on_conflict_do_nothing()
        .returning(col(ScheduleFiring.id))
    )
    firing_id = claimed.scalar_one_or_none()
    if firing_id is None:
        return None
    selection = await select_subjects(session, workflow.realm_id, trigger_selector(trigger), now)
    key = slot_key(slot)
    started = len(
        await start_runs(
            session,
            [
                StartRequest(
                    workflow=workflow,
                    revision=revision,
                    subject_id=subject_id,
                    organization_id=organization_id,
                    trigger_type="schedule",
                    trigger_key=key,
                    input={
                        "slot": key,
                        "trigger_index": trigger_index,
                        "subject_id": subject_id,
                        "organization_id": organization_id,
                    },
                    input_version=int(revision.definition.get("schema_version", 1)),
                    publisher_id=revision.published_by or workflow.created_by or "",
                    correlation_id=firing_id,
                )
                for subject_id, organization_id in selection.subjects
            ],
        )
    )
    await session.execute(
        text("UPDATE workflow_schedule_firings SET selected = :s, started = :n, truncated = :t WHERE id = :id"),
        {"s": selection.total, "n": started, "t": selection.truncated, "id": firing_id},
    )
    await record_audit(
        session,
        Actor.system(workflow.realm_id, request_id=firing_id),
        "workflow.schedule.fired",
        category=CATEGORY,
        subject_type="workflow",
        subject_id=workflow.id,
        details={
            "workflow_id": workflow.id,
            "revision": revision.number,
            "trigger_index": trigger_index,
            "slot": key,
            "count": started,
            "selected": selection.total,
            "truncated": selection.truncated,
        },
    )
    return Firing(workflow.id, trigger_index, slot, started, selection.total, selection.truncated)


async def schedule_pass(sessions: async_sessionmaker[AsyncSession], clock: Clock | None = None) -> list[Firing]:
    """Fire the due slot of every schedule trigger, one transaction per slot (what ``workflows.schedule`` runs)."""
    now = (clock or SYSTEM_CLOCK).now()
    async with sessions() as session:
        found = await _due_schedules(session)
    fired: list[Firing] = []
    for workflow, revision in found:
        anchor = revision.published_at
        if anchor is None:
            continue
        for index, trigger in schedule_triggers(revision.definition):
            try:
                every_s = parse_duration(str(trigger.get("every")))
            except ValueError:
                continue
            slot = current_slot(anchor, every_s, now)
            if slot is None:
                continue
            try:
                async with sessions() as session, session.begin():
                    firing = await fire_slot(session, workflow, revision, index, trigger, slot, now)
            except Exception:
                log.warning("schedule firing failed", extra={"workflow_id": workflow.id}, exc_info=True)
                continue
            if firing is not None:
                fired.append(firing)
                log.info(
                    "schedule fired",
                    extra={
                        "workflow_id": workflow.id,
                        "slot": slot_key(slot),
                        "count": firing.started,
                        "truncated": firing.truncated,
                    },
                )
    return fired


# --- Reading ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleStatus:
    trigger_index: int
    every: str
    selector: dict[str, Any]
    next_slot: datetime | None
    last_firing: ScheduleFiring | None
    due_now: bool = False  # the slot has come and the next scheduler pass (within a minute) fires it


async def schedule_status(
    session: AsyncSession, workflow: Workflow, revision: WorkflowRevision | None, now: datetime
) -> list[ScheduleStatus]:
    """Each schedule trigger of the published revision: its next slot (None unless active) and last firing."""
    if revision is None:
        return []
    triggers = schedule_triggers(revision.definition)
    if not triggers:
        return []
    from sqlalchemy import select

    rows = await session.execute(
        select(ScheduleFiring)
        .where(col(ScheduleFiring.workflow_id) == workflow.id)
        .ext(distinct_on(col(ScheduleFiring.trigger_index)))
        .order_by(col(ScheduleFiring.trigger_index), col(ScheduleFiring.slot_at).desc())
    )
    last = {f.trigger_index: f for f in rows.scalars()}
    out = []
    for index, trigger in triggers:
        upcoming = None
        due = False
        if workflow.state == "active" and revision.published_at is not None:
            try:
                every_s = parse_duration(str(trigger.get("every")))
            except ValueError:
                every_s = 0
            if every_s:
                current = current_slot(revision.published_at, every_s, now)
                fired = last.get(index)
                if current is not None and (fired is None or fired.slot_at < current):
                    upcoming, due = current, True  # the next scheduler pass fires it
                else:
                    upcoming = next_slot(revision.published_at, every_s, now)
        out.append(
            ScheduleStatus(index, str(trigger.get("every")), trigger_selector(trigger), upcoming, last.get(index), due)
        )
    return out


async def selector_names(session: AsyncSession, realm_id: str, selectors: list[dict[str, Any]]) -> dict[str, str]:
    """The names of the roles, organizations and groups the selectors name, in one query."""
    ids = sorted(
        {
            str(v)
            for sel in selectors
            for k, v in sel.items()
            if k in ("role_id", "organization_id", "group_id") and isinstance(v, str)
        }
    )
    if not ids:
        return {}
    rows = await session.execute(
        text(
            "SELECT id, name FROM roles WHERE realm_id = :realm AND id = ANY(:ids)"
            " UNION ALL SELECT id, name FROM organizations WHERE realm_id = :realm AND id = ANY(:ids)"
            " UNION ALL SELECT id, name FROM groups WHERE realm_id = :realm AND id = ANY(:ids)"
        ),
        {"realm": realm_id, "ids": ids},
    )
    return {str(i): str(n) for i, n in rows.all()}
