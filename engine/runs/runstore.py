"""All SQL of the engine's run tables: claims, leases and transitions.

The step logic (engine/runs/runner.py) calls these verbs and never writes SQL itself. Every verb that
changes a run checks, in its WHERE clause, that this worker still holds the run's lease, so a
worker that lost its lease cannot commit anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, case, func, literal, or_, select, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncSession

from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_STARTED,
    ATTEMPT_SUCCEEDED,
    COMP_PENDING,
    COMPENSATING,
    FINISHED,
    FORWARD,
    RUNNING,
    TransitionRefused,
    allowed_from,
)

MAX_BATCH = 50
NOTIFY_CHANNEL = "cockpit_runs_due"


class LeaseLost(TransitionRefused):
    """This worker no longer holds the run's lease: nothing it does may commit."""


@dataclass(frozen=True)
class Claimed:
    run_id: str
    realm_id: str


# Each realm with due runs, found by skipping through ix_workflow_runs_realm_due (one index probe
# per realm, whatever the number of due runs); then, per realm, at most ``share`` claimable runs
# read in due order from the same index (LATERAL … LIMIT). Realms are visited round-robin,
# starting after the realm the previous pass ended with, and the first run of every realm comes
# before the second of any: a realm with only new runs is never starved by older backlogs. The
# outer query locks the chosen rows one by one through their primary key (a LATERAL subquery, so
# no plan — generic or custom — ever scans the table to join them), in claim order, skipping those
# another worker holds, re-checking each once locked, and stops at the batch. Only unfinished
# states are ever selected.
CLAIM_SQL = text(
    """
    WITH RECURSIVE realms(realm_id) AS (
        (SELECT realm_id FROM workflow_runs WHERE due_at IS NOT NULL ORDER BY realm_id LIMIT 1)
        UNION ALL
        SELECT (SELECT r.realm_id FROM workflow_runs r
                 WHERE r.due_at IS NOT NULL AND r.realm_id > realms.realm_id
                 ORDER BY r.realm_id LIMIT 1)
          FROM realms WHERE realms.realm_id IS NOT NULL
    ),
    visits AS (
        SELECT realm_id, row_number() OVER (ORDER BY realm_id <= :after, realm_id) AS turn
          FROM realms WHERE realm_id IS NOT NULL
    ),
    candidates AS (
        SELECT c.id, c.due_at, v.turn,
               row_number() OVER (PARTITION BY v.realm_id ORDER BY c.due_at, c.id) AS place
          FROM visits v
          CROSS JOIN LATERAL (
              SELECT r.id, r.due_at
                FROM workflow_runs r JOIN workflows w ON w.id = r.workflow_id
               WHERE r.realm_id = v.realm_id
                 AND r.due_at IS NOT NULL AND r.due_at <= :now
                 AND r.state IN ('pending', 'running', 'waiting', 'awaiting_approval', 'compensating')
                 AND (r.lease_owner IS NULL OR r.lease_expires_at <= :now)
                 AND (w.state <> 'disabled' OR r.state = 'compensating' OR r.cancel_requested_at IS NOT NULL)
               ORDER BY r.due_at
               LIMIT :share
          ) c
    )
    SELECT x.id, x.realm_id
      FROM (SELECT id, place, turn FROM candidates ORDER BY place, turn) k
      CROSS JOIN LATERAL (
          SELECT r.id, r.realm_id
            FROM workflow_runs r
           WHERE r.id = k.id
             AND r.due_at IS NOT NULL AND r.due_at <= :now
             AND r.state IN ('pending', 'running', 'waiting', 'awaiting_approval', 'compensating')
             AND (r.lease_owner IS NULL OR r.lease_expires_at <= :now)
             FOR UPDATE SKIP LOCKED
      ) x
     ORDER BY k.place, k.turn
     LIMIT :limit
    """
)


async def claim_due_runs(
    session: AsyncSession,
    worker_id: str,
    *,
    now: datetime,
    lease: timedelta,
    batch_size: int,
    tenant_share: int,
    after_realm: str | None = None,
) -> list[Claimed]:
    """Lease up to ``min(batch_size, 50)`` due runs, at most ``tenant_share`` of one realm.

    Realms are visited round-robin from the one after ``after_realm`` (pass the realm of the last
    run the previous claim returned). Runs of a disabled workflow are skipped unless compensating
    or cancelled (those only remove access). ``FOR UPDATE SKIP LOCKED`` lets any number of
    workers claim at once. The cost depends on the number of realms with due runs and on the
    batch, never on the number of due runs.
    """
    limit = max(1, min(batch_size, MAX_BATCH))
    share = max(1, min(tenant_share, limit))
    rows = await session.execute(CLAIM_SQL, {"now": now, "share": share, "limit": limit, "after": after_realm or ""})
    chosen = [Claimed(run_id, realm_id) for run_id, realm_id in rows]
    if chosen:
        await session.execute(
            update(WorkflowRun)
            .where(WorkflowRun.id.in_([c.run_id for c in chosen]))  # type: ignore[attr-defined]
            .values(lease_owner=worker_id, lease_expires_at=now + lease)
        )
    return chosen


def share_filled(claimed: Sequence[Claimed], tenant_share: int) -> bool:
    """Whether some realm got its whole share in this claim: it may have more due runs."""
    counts: dict[str, int] = {}
    for item in claimed:
        counts[item.realm_id] = counts.get(item.realm_id, 0) + 1
    return any(count >= max(1, tenant_share) for count in counts.values())


async def lock_leased_run(
    session: AsyncSession, run_id: str, worker_id: str, *, now: datetime, lease: timedelta
) -> WorkflowRun:
    """Lock the run for one transition and renew the lease; :class:`LeaseLost` when it is not ours."""
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run_id,
            WorkflowRun.lease_owner == worker_id,
            WorkflowRun.lease_expires_at > now,  # type: ignore[operator]
        )
        .values(lease_expires_at=now + lease)
        .returning(WorkflowRun.id)
    )
    if result.scalar_one_or_none() is None:
        raise LeaseLost(f"worker {worker_id} no longer holds the lease of {run_id}")
    run = (
        await session.execute(
            select(WorkflowRun).where(WorkflowRun.id == run_id).execution_options(populate_existing=True)
        )
    ).scalar_one()
    return run


async def release_lease(session: AsyncSession, run_id: str, worker_id: str) -> None:
    await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.id == run_id, WorkflowRun.lease_owner == worker_id)
        .values(lease_owner=None, lease_expires_at=None)
    )


async def release_all_leases(session: AsyncSession, worker_id: str) -> int:
    """Hand back every lease this worker holds (at shutdown), so others continue at once."""
    result = await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.lease_owner == worker_id)
        .values(lease_owner=None, lease_expires_at=None)
        .returning(WorkflowRun.id)
    )
    return len(result.scalars().all())


async def move_run(
    session: AsyncSession,
    run: WorkflowRun,
    target: str,
    *,
    worker_id: str,
    due_at: datetime | None,
    now: datetime,
    **values: Any,
) -> None:
    """Advance the run to ``target`` (allowed states only, lease held), with its next due time."""
    values |= {"state": target, "due_at": due_at, "updated_at": now}
    if target in FINISHED:
        values |= {"finished_at": now, "due_at": None, "lease_owner": None, "lease_expires_at": None}
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run.id,
            WorkflowRun.state.in_(allowed_from(target)),  # type: ignore[attr-defined]
            WorkflowRun.lease_owner == worker_id,
        )
        .values(**values)
        .returning(WorkflowRun.id)
    )
    if result.scalar_one_or_none() is None:
        raise TransitionRefused(f"run {run.id} cannot move from {run.state} to {target}")
    for key, value in values.items():
        setattr(run, key, value)


async def set_due(session: AsyncSession, run: WorkflowRun, *, worker_id: str, due_at: datetime, now: datetime) -> None:
    """A later due time without a state change (a retry or a compensation waiting), lease held."""
    result = await session.execute(
        update(WorkflowRun)
        .where(WorkflowRun.id == run.id, WorkflowRun.lease_owner == worker_id)
        .values(due_at=due_at, updated_at=now)
        .returning(WorkflowRun.id)
    )
    if result.scalar_one_or_none() is None:
        raise TransitionRefused(f"run {run.id} is not held by {worker_id}")
    run.due_at = due_at
    run.updated_at = now


async def attempts_of_step(session: AsyncSession, run_id: str, step_id: str) -> list[StepAttempt]:
    rows = await session.execute(
        select(StepAttempt)
        .where(StepAttempt.run_id == run_id, StepAttempt.step_id == step_id)
        .order_by(StepAttempt.number)  # type: ignore[arg-type]
    )
    return list(rows.scalars())


async def record_attempt(session: AsyncSession, attempt: StepAttempt) -> StepAttempt:
    """Insert a finished attempt. The database refuses a second succeeded attempt of one step."""
    session.add(attempt)
    await session.flush()
    return attempt


async def lock_attempt(session: AsyncSession, attempt_id: str) -> StepAttempt | None:
    """An attempt, locked and read afresh (its endpoint call's outcome is about to be recorded)."""
    rows = await session.execute(
        select(StepAttempt)
        .where(StepAttempt.id == attempt_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return rows.scalar_one_or_none()


async def interrupt_started_attempts(session: AsyncSession, run_id: str, now: datetime) -> int:
    """Close every attempt of the run still ``started`` (a call whose outcome was never recorded)."""
    result = await session.execute(
        update(StepAttempt)
        .where(StepAttempt.run_id == run_id, StepAttempt.state == ATTEMPT_STARTED)  # type: ignore[arg-type]
        .values(
            state=ATTEMPT_FAILED,
            error_category="interrupted",
            error_message="The worker stopped between the endpoint call and its outcome.",
            finished_at=now,
        )
        .returning(StepAttempt.id)
    )
    return len(result.scalars().all())


async def next_compensation(session: AsyncSession, run_id: str) -> StepAttempt | None:
    """The newest succeeded attempt whose compensation is still pending (one at a time)."""
    rows = await session.execute(
        select(StepAttempt)
        .where(
            StepAttempt.run_id == run_id,
            StepAttempt.state == ATTEMPT_SUCCEEDED,
            StepAttempt.compensation_state == COMP_PENDING,
        )
        .order_by(StepAttempt.step_index.desc(), StepAttempt.number.desc())  # type: ignore[attr-defined]
        .limit(1)
        .with_for_update()
    )
    return rows.scalar_one_or_none()


async def compensation_summary(session: AsyncSession, run_id: str) -> dict[str, int]:
    rows = await session.execute(
        select(StepAttempt.compensation_state, func.count())
        .where(StepAttempt.run_id == run_id, StepAttempt.state == ATTEMPT_SUCCEEDED)
        .group_by(StepAttempt.compensation_state)
    )
    return {str(state): int(count) for state, count in rows}


async def request_cancel(
    session: AsyncSession, run_id: str, realm_id: str, *, by: str, reason: str | None, now: datetime
) -> WorkflowRun | None:
    """Mark the run for cancellation and make it due; None when it cannot be cancelled (409)."""
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run_id,
            WorkflowRun.realm_id == realm_id,
            WorkflowRun.state.in_(sorted(FORWARD)),  # type: ignore[attr-defined]
            WorkflowRun.cancel_requested_at.is_(None),  # type: ignore[union-attr]
        )
        .values(
            cancel_requested_at=now,
            cancel_requested_by=by,
            cancel_reason=reason,
            due_at=now,
            updated_at=now,
            # A run paused by a disabled workflow is due now: the kept due time no longer applies.
            context=WorkflowRun.context.op("-", return_type=JSONB)(literal("paused_due_at", String())),  # type: ignore[attr-defined]
        )
        .returning(WorkflowRun)
    )
    return result.scalar_one_or_none()


async def retry_now(session: AsyncSession, run_id: str, realm_id: str, *, now: datetime) -> WorkflowRun | None:
    """Make a run that waits for a retry (of a step or a compensation) due now; None when nothing waits (409).

    Waiting for a retry: running or compensating, after a failure, with a later due time, and held
    by no worker (a run being advanced right now is not waiting for anything).
    """
    result = await session.execute(
        update(WorkflowRun)
        .where(
            WorkflowRun.id == run_id,
            WorkflowRun.realm_id == realm_id,
            WorkflowRun.state.in_([RUNNING, COMPENSATING]),  # type: ignore[attr-defined]
            WorkflowRun.error_category.is_not(None),  # type: ignore[union-attr]
            WorkflowRun.due_at > now,  # type: ignore[operator]
            or_(WorkflowRun.lease_owner.is_(None), WorkflowRun.lease_expires_at <= now),  # type: ignore[union-attr, operator]
        )
        .values(due_at=now, updated_at=now)
        .returning(WorkflowRun)
    )
    return result.scalar_one_or_none()


async def notify_due(session: AsyncSession) -> None:
    """Wake the workers when this transaction commits (LISTEN/NOTIFY; the 1 s pass is the safety net)."""
    await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})


__all__ = [
    "COMPENSATING",
    "Claimed",
    "LeaseLost",
]


# --- The fast path of internal steps (engine/runs/fastpath.py) -------------------------------------------
#
# Written for asyncpg directly (no ORM between the runner and the wire): ``:name`` parameters are
# turned into ``$n`` once, by :func:`positional`. A transition of an internal step that can only
# succeed is then two statements — the lock below (shared by every run of a group commit) and one
# data-modifying statement that makes the effect, records the attempt and the audit events, and
# advances the run — and the commit.

_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")


@dataclass(frozen=True)
class Positional:
    """A statement with ``$n`` placeholders and the names they stand for, in order."""

    sql: str
    names: tuple[str, ...]

    def args(self, values: dict[str, Any]) -> list[Any]:
        return [values[name] for name in self.names]


def positional(sql: str) -> Positional:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return Positional(_PARAMETER.sub(number, sql), tuple(names))


# Lock every listed run this worker still holds, for this transaction (a run missing from the result
# was lost: its lease expired or another worker holds it); read with it what a transition needs: its
# workflow's state, its publisher's status and authorization epochs, and the attempts of its current
# step (a step's index names it within the pinned revision). A row lock writes no new version of the
# row: the lease is renewed by the advance itself (``FAST_TRANSITIONS``), and a run the fast path
# leaves to the ordinary transition is renewed there.
LOCK_FOR_TRANSITION = positional(
    """
    SELECT r.id, r.realm_id, r.workflow_id, r.revision_id, r.subject_id, r.organization_id, r.input_version,
              r.publisher_id, r.state, r.step_index, r.due_at, r.cancel_requested_at,
              (SELECT w.state FROM workflows w WHERE w.id = r.workflow_id) AS workflow_state,
              (SELECT u.status FROM users u WHERE u.id = r.publisher_id) AS publisher_status,
              (SELECT u.authz_epoch FROM users u WHERE u.id = r.publisher_id) AS publisher_epoch,
              (SELECT u.authz_epoch FROM users u WHERE u.id = r.subject_id) AS subject_epoch,
              (SELECT m.authz_epoch FROM realms m WHERE m.id = r.realm_id) AS realm_epoch,
              (SELECT count(*) FROM step_attempts a
                WHERE a.run_id = r.id AND a.step_index = r.step_index) AS attempts,
              (SELECT count(*) FROM step_attempts a
                WHERE a.run_id = r.id AND a.step_index = r.step_index AND a.state = 'succeeded') AS succeeded
      FROM workflow_runs r
     WHERE r.id = ANY(:run_ids::text[]) AND r.lease_owner = :worker_id AND r.lease_expires_at > :now
       FOR NO KEY UPDATE OF r
    """
)

# A pinned revision: immutable once written, so cached by id for the life of the process.
REVISION_BY_ID = positional("SELECT number, hash, definition::text FROM workflow_revisions WHERE id = :revision_id")

# A role as the grant ceiling sees it (cached while the realm's authorization epoch stays put).
ROLE_BY_ID = positional(
    "SELECT realm_id, name, permissions, boundary, requires_approval FROM roles WHERE id = :role_id"
)

# A group, and every role its membership gives — its own and its ancestors' (cached like roles).
GROUP_WITH_ROLES = positional(
    """
    WITH RECURSIVE chain AS (
        SELECT id, parent_id FROM groups WHERE id = :group_id
        UNION
        SELECT g.id, g.parent_id FROM groups g JOIN chain c ON g.id = c.parent_id
    )
    SELECT g.realm_id, g.organization_id, g.name,
           (SELECT coalesce(json_agg(json_build_array(r.name, r.permissions, r.boundary)), '[]')::text
              FROM roles r
             WHERE r.id IN (SELECT gr.role_id FROM chain c JOIN group_roles gr ON gr.group_id = c.id)) AS roles
      FROM groups g
     WHERE g.id = :group_id
    """
)

# The transitions of a group commit, every run at once, in one statement. Each run is one row of the
# input (``moves``, unnested from one array per column) and names its effect: ``assign_role``,
# ``add_to_group``, ``remove_from_group`` or ``none`` (``end``, and any step without an effect of its
# own). ``applicable`` keeps the runs whose effect can be made as the database stands; a run it drops writes nothing at
# all, and the runner takes its step the ordinary way, which reports why. The runs of one group are
# independent (no run's subject is another run's publisher or subject), so one snapshot serves all.
# For the runs kept, together: the advance (under the lease, from the state each was read in), the
# succeeded attempt — refused by uq_step_attempts_succeeded if the step already has one, which fails
# the whole group — the audit events of the effect, the step and the run, and the effect.
#
# A run that goes on keeps its due time (it stays due, since the same moment) and has its lease
# renewed: unless its state changes too, no indexed column changes, and the advance is a HOT update
# that adds nothing to the run's indexes.
#
# The effects' conditions: ``assign_role`` — the subject is a user of the realm, the organization
# (when the grant names one) is the realm's, and the subject does not hold the role in that scope
# yet (an expired grant does not count); ``add_to_group`` — the subject is a user of the realm and a
# member of the group's organization, and not in the group yet; ``remove_from_group`` — the subject
# is in the group. The grant ceiling and the publisher's
# authority were checked before, in Python.
FAST_TRANSITIONS = positional(
    """
    WITH moves AS (
        SELECT *
          FROM unnest(:run_ids::text[], :realm_ids::text[], :subject_ids::text[], :publisher_ids::text[],
                      :from_states::text[], :targets::text[], :step_indexes::int[], :finished::boolean[],
                      :lease_expires_ats::timestamptz[], :moved_ats::timestamptz[], :wall_nows::timestamptz[],
                      :attempt_ids::text[], :step_ids::text[], :step_types::text[], :numbers::int[],
                      :idempotency_keys::text[], :inputs::jsonb[], :input_versions::text[], :results::jsonb[],
                      :max_attempts::int[], :backoffs_ms::int[], :strategies::text[], :compensation_states::text[],
                      :started_ats::timestamptz[], :effects::text[], :role_ids::text[], :organization_ids::text[],
                      :assignment_ids::text[], :expires_ats::timestamptz[], :group_ids::text[])
               AS m(run_id, realm_id, subject_id, publisher_id, from_state, target, step_index, finished,
                    lease_expires_at, moved_at, wall_now, attempt_id, step_id, step_type, number, idempotency_key,
                    input, input_version, result, max_attempts, backoff_ms, strategy, compensation_state,
                    started_at, effect, role_id, organization_id, assignment_id, expires_at, group_id)
    ),
    -- Every condition is a scalar probe of a key, never EXISTS: the planner may turn a correlated
    -- EXISTS into a hash of the whole table, built at every execution (users, memberships, group
    -- members), and with a cached plan made while the tables were small it does.
    applicable AS (
        SELECT m.*
          FROM moves m
         WHERE CASE m.effect
               WHEN 'assign_role' THEN
                    coalesce((SELECT u.realm_id FROM users u WHERE u.id = m.subject_id) = m.realm_id, false)
                    AND (m.organization_id IS NULL OR coalesce(
                         (SELECT o.realm_id FROM organizations o WHERE o.id = m.organization_id) = m.realm_id, false))
                    AND (SELECT 1 FROM role_assignments ra
                          WHERE ra.realm_id = m.realm_id AND ra.role_id = m.role_id AND ra.user_id = m.subject_id
                            AND ra.organization_id IS NOT DISTINCT FROM m.organization_id
                            AND (ra.expires_at IS NULL OR ra.expires_at > m.wall_now)
                          LIMIT 1) IS NULL
               WHEN 'remove_from_group' THEN
                    (SELECT 1 FROM group_members gm
                      WHERE gm.group_id = m.group_id AND gm.user_id = m.subject_id AND gm.realm_id = m.realm_id
                      LIMIT 1) IS NOT NULL
               WHEN 'add_to_group' THEN
                    coalesce((SELECT u.realm_id FROM users u WHERE u.id = m.subject_id) = m.realm_id, false)
                    AND (SELECT 1 FROM memberships ms
                          WHERE ms.organization_id = m.organization_id AND ms.user_id = m.subject_id
                          LIMIT 1) IS NOT NULL
                    AND (SELECT 1 FROM group_members gm
                          WHERE gm.group_id = m.group_id AND gm.user_id = m.subject_id
                          LIMIT 1) IS NULL
               ELSE true
               END
    ),
    advanced AS (
        UPDATE workflow_runs r
           SET state = a.target, step_index = a.step_index + 1, updated_at = a.moved_at,
               due_at = CASE WHEN a.finished THEN NULL ELSE r.due_at END,
               finished_at = CASE WHEN a.finished THEN a.moved_at ELSE r.finished_at END,
               lease_owner = CASE WHEN a.finished THEN NULL ELSE r.lease_owner END,
               lease_expires_at = CASE WHEN a.finished THEN NULL ELSE a.lease_expires_at END
          FROM applicable a
         WHERE r.id = ANY(:run_ids::text[])  -- the group's runs, by key, whatever the join's plan
           AND r.id = a.run_id AND r.state = a.from_state AND r.step_index = a.step_index
           AND r.lease_owner = :worker_id
        RETURNING r.id
    ),
    made AS (
        SELECT a.* FROM applicable a JOIN advanced v ON v.id = a.run_id
    ),
    attempted AS (
        INSERT INTO step_attempts (id, run_id, realm_id, step_id, step_index, step_type, number, idempotency_key,
                                   state, input, input_version, result, max_attempts, backoff_ms,
                                   compensation_strategy, compensation_state, compensation_attempts,
                                   started_at, finished_at)
        SELECT attempt_id, run_id, realm_id, step_id, step_index, step_type, number, idempotency_key,
               'succeeded', input, input_version, result, max_attempts, backoff_ms,
               strategy, compensation_state, 0, started_at, moved_at
          FROM made
    ),
    audited AS (
        INSERT INTO audit_events (id, realm_id, occurred_at, actor_type, actor_id, category, type, subject_type,
                                  subject_id, request_id, correlation_id, details)
        SELECT e.id, m.realm_id, m.wall_now, 'user', m.publisher_id, e.category, e.type, e.subject_type,
               e.subject_id, m.run_id, m.run_id, e.details
          FROM unnest(:audit_run_ids::text[], :audit_ids::text[], :audit_categories::text[], :audit_types::text[],
                      :audit_subject_types::text[], :audit_subject_ids::text[], :audit_details::jsonb[])
               AS e(run_id, id, category, type, subject_type, subject_id, details)
          JOIN made m ON m.run_id = e.run_id
    ),
    granted AS (
        INSERT INTO role_assignments (id, realm_id, role_id, user_id, organization_id, expires_at, granted_by,
                                      source_run_id, created_at)
        SELECT assignment_id, realm_id, role_id, subject_id, organization_id, expires_at, publisher_id,
               run_id, wall_now
          FROM made
         WHERE effect = 'assign_role'
    ),
    joined AS (
        INSERT INTO group_members (group_id, user_id, realm_id, added_by, source_run_id, created_at)
        SELECT group_id, subject_id, realm_id, publisher_id, run_id, wall_now
          FROM made
         WHERE effect = 'add_to_group'
    ),
    left_group AS (
        DELETE FROM group_members gm
         USING made m
         WHERE m.effect = 'remove_from_group' AND gm.group_id = m.group_id AND gm.user_id = m.subject_id
    ),
    -- The outcome event of each run that finished (engine/runs/outcome_events.py), and the
    -- dispatcher woken at commit when there is one.
    outboxed AS (
        INSERT INTO outbox_events (id, realm_id, type, event_version, subject_id, organization_id, payload,
                                   correlation_id, created_at)
        SELECT o.id, m.realm_id, o.type, 1, o.subject_id, o.organization_id, o.payload, m.run_id, m.wall_now
          FROM unnest(:outbox_run_ids::text[], :outbox_ids::text[], :outbox_types::text[],
                      :outbox_subject_ids::text[], :outbox_organization_ids::text[], :outbox_payloads::jsonb[])
               AS o(run_id, id, type, subject_id, organization_id, payload)
          JOIN made m ON m.run_id = o.run_id
        RETURNING 1
    )
    SELECT id FROM advanced
     WHERE (SELECT count(pg_notify('cockpit_outbox', '')) FROM (SELECT 1 FROM outboxed LIMIT 1) AS woken) >= 0
    """
)


async def release_leases(
    session: AsyncSession, run_ids: Sequence[str], worker_id: str, *, due_again_at: datetime | None = None
) -> None:
    """Hand back the leases of several runs at once (the end of a group-committed pass).

    ``due_again_at``: runs still due that made their 25 transitions go to the back of their realm's
    queue — due from then, behind the runs that became due meanwhile — instead of keeping the due
    time their internal steps kept (``FAST_TRANSITIONS``).
    """
    if run_ids:
        values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
        if due_again_at is not None:
            values["due_at"] = case(
                (WorkflowRun.due_at < due_again_at, due_again_at),  # type: ignore[operator]
                else_=WorkflowRun.due_at,
            )
        await session.execute(
            update(WorkflowRun)
            .where(WorkflowRun.id.in_(list(run_ids)), WorkflowRun.lease_owner == worker_id)  # type: ignore[attr-defined]
            .values(**values)
        )
