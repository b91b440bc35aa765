"""The fast path of internal steps: one statement for the transitions of a whole group commit.

The ordinary transition (engine/runs/runner.py) reads the run, its revision, its attempts and its
publisher's authority through the ORM and makes the effect through the domain functions: some
twenty round trips. Most transitions of internal steps can only succeed, and for them this module
does the same work for a group of runs in two statements on the raw asyncpg connection — the lock
of every run of the group (``runstore.LOCK_FOR_TRANSITION``, a row lock under the lease) and one
data-modifying statement for all of them (``runstore.FAST_TRANSITIONS``: each run's effect, its
succeeded attempt and audit events, and its advance, which renews the lease) — with what never
changes, or changes rarely, kept in memory:

- a revision is immutable once written: cached by id;
- the publisher's authority, and the roles and groups the grant ceiling reads, are cached with
  the authorization epochs they were read at (``realms.authz_epoch``, ``users.authz_epoch``,
  moved by triggers on every change to roles, groups, assignments, memberships and user status).
  The lock reads the current epochs in the effect's own transaction: when either moved, the full
  authority query runs again, in that transaction. An authority also expires with its earliest
  expiring grant.

Each step is decided by the same function as the ordinary transition and the preview
(engine/runs/decisions.py, ``decide``), on a snapshot built from these caches (``_snapshot``):
what the batched statement checks as it writes — the subject is a user of the realm, the grant or
the group's place is not held yet (or, to leave a group, is held), the subject is a member of the
group's organization — is taken as fine there, and the statement re-checks it. The fast path never
records a failure. Whenever the decision refuses, or something is not plainly fine — a
cancellation, a disabled workflow, a step already applied, a step type without a fast form, an
inactive publisher, a role that needs approval (its approver is read the ordinary way), a missing
subject, or a run the statement finds it cannot make — it writes nothing and returns ``None``, and
the runner takes the step the ordinary way, which records the refusal exactly as it always has.
Cache entries read inside a transaction become visible to later transactions only once it commits.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.directory.admins import ADMIN_ROLE
from engine.directory.authz import AUTHORITY_SQL, Authority, Grant
from engine.platform.ids import new_id
from engine.runs import runstore
from engine.runs.decisions import (
    Effect,
    GroupFacts,
    Refusal,
    RoleFacts,
    Snapshot,
    SubjectFacts,
    decide,
    run_succeeded_entry,
    step_succeeded_entry,
)
from engine.runs.outcome_events import run_outcome_entry
from engine.runs.retry import Clock, policy_for
from engine.runs.states import (
    ATTEMPT_SUCCEEDED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    step_move_allowed,
)
from engine.runs.steps import STEP_TYPES
from engine.runs.steps.assign_role import AssignRole
from engine.runs.steps.groups import AddToGroup, RemoveFromGroup
from engine.runs.steps.simple import End
from engine.workflows.definitions.canonical import input_version

# The step types with a fast form, and the ``perform`` each mirrors: when a type's ``perform`` is
# another one (replaced in a test, say), the fast form steps aside and the step runs as written.
MIRRORED: dict[str, Any] = {
    "assign_role": AssignRole.perform,
    "add_to_group": AddToGroup.perform,
    "remove_from_group": RemoveFromGroup.perform,
    "end": End.perform,
}
FAST_STEP_TYPES = frozenset(MIRRORED)
CACHE_LIMIT = 10_000  # entries per cache; a full cache starts again empty
_AUTHORITY = runstore.positional(AUTHORITY_SQL)


@dataclass(frozen=True)
class Revision:
    number: int
    hash: str
    definition: dict[str, Any]


@dataclass(frozen=True)
class CachedRole:
    epoch: int  # the realm's authorization epoch it was read at
    realm_id: str
    name: str
    permissions: tuple[str, ...]
    boundary: str
    requires_approval: bool


@dataclass(frozen=True)
class CachedGroup:
    epoch: int
    realm_id: str
    organization_id: str
    name: str
    roles: tuple[tuple[str, tuple[str, ...], str], ...]  # (name, permissions, boundary), ancestors' included


@dataclass(frozen=True)
class CachedAuthority:
    realm_epoch: int
    user_epoch: int
    read_at: datetime  # the run clock's time it was read at
    valid_until: datetime | None  # its earliest expiring grant
    authority: Authority


def _json(value: Any) -> str:
    """A ``jsonb`` parameter's text: the server parses it, so its spacing is not kept."""
    return json.dumps(value)


class Staged:
    """Cache entries read in one transaction: visible to it at once, to others once it commits.

    A worker may run several passes at once, each in its own transaction: each has its own.
    """

    def __init__(self) -> None:
        self.entries: list[tuple[dict[Any, Any], Any, Any]] = []

    def remember(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        self.entries.append((cache, key, value))

    def recall(self, cache: dict[Any, Any], key: Any) -> Any:
        for staged_cache, staged_key, value in reversed(self.entries):
            if staged_cache is cache and staged_key == key:
                return value
        return cache.get(key)

    def committed(self) -> None:
        for cache, key, value in self.entries:
            if len(cache) >= CACHE_LIMIT:
                cache.clear()
            cache[key] = value
        self.entries.clear()


class FastPath:
    """One per runner: its caches and the fast form of a transition."""

    def __init__(self, worker_id: str, clock: Clock, lease: timedelta) -> None:
        self.worker_id = worker_id
        self.clock = clock
        self.lease = lease  # a run that goes on is held this long from its advance
        self.moved = 0  # transitions made and committed here, in this runner's life
        self.revisions: dict[str, Revision] = {}
        self.roles: dict[str, CachedRole] = {}
        self.groups: dict[str, CachedGroup] = {}
        self.authorities: dict[tuple[str, str], CachedAuthority] = {}

    # --- reads --------------------------------------------------------------------------------

    async def lock(self, conn: Any, run_ids: list[str], *, now: datetime) -> dict[str, Any]:
        """Lock the runs this worker still holds; what each transition needs, by run id."""
        values = {"run_ids": run_ids, "worker_id": self.worker_id, "now": now}
        rows = await conn.fetch(runstore.LOCK_FOR_TRANSITION.sql, *runstore.LOCK_FOR_TRANSITION.args(values))
        return {row["id"]: row for row in rows}

    async def _revision(self, conn: Any, revision_id: str) -> Revision | None:
        revision = self.revisions.get(revision_id)
        if revision is None:
            q = runstore.REVISION_BY_ID
            row = await conn.fetchrow(q.sql, *q.args({"revision_id": revision_id}))
            if row is None:
                return None
            revision = Revision(row["number"], row["hash"], json.loads(row["definition"]))
            if len(self.revisions) >= CACHE_LIMIT:
                self.revisions.clear()
            self.revisions[revision_id] = revision  # immutable and committed: no need to wait
        return revision

    async def _authority(self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime) -> Authority:
        """The accountable publisher's authority."""
        return await self._user_authority(
            conn, staged, run["realm_id"], run["publisher_id"], run["realm_epoch"], run["publisher_epoch"], now
        )

    async def _user_authority(
        self, conn: Any, staged: Staged, realm_id: str, user_id: str, realm_epoch: int, user_epoch: int, now: datetime
    ) -> Authority:
        """A user's authority, cached while the realm's and the user's authorization epochs stay put."""
        key = (realm_id, user_id)
        cached: CachedAuthority | None = staged.recall(self.authorities, key)
        if (
            cached is not None
            and cached.realm_epoch == realm_epoch
            and cached.user_epoch == user_epoch
            and cached.read_at <= now
            and (cached.valid_until is None or now < cached.valid_until)
        ):
            return cached.authority
        rows = await conn.fetch(_AUTHORITY.sql, *_AUTHORITY.args({"realm": realm_id, "pid": user_id, "now": now}))
        authority = Authority(
            principal_type="user",
            principal_id=user_id,
            grants=[Grant(frozenset(row[0] or ()), row[1]) for row in rows],
        )
        expiries = [row[2] for row in rows if row[2] is not None]
        staged.remember(
            self.authorities,
            key,
            CachedAuthority(realm_epoch, user_epoch, now, min(expiries, default=None), authority),
        )
        return authority

    async def _role(self, conn: Any, staged: Staged, role_id: Any, epoch: int) -> CachedRole | None:
        if not isinstance(role_id, str):
            return None
        cached: CachedRole | None = staged.recall(self.roles, role_id)
        if cached is not None and cached.epoch == epoch:
            return cached
        q = runstore.ROLE_BY_ID
        row = await conn.fetchrow(q.sql, *q.args({"role_id": role_id}))
        if row is None:
            return None
        permissions = tuple(row["permissions"] or ())
        role = CachedRole(epoch, row["realm_id"], row["name"], permissions, row["boundary"], row["requires_approval"])
        staged.remember(self.roles, role_id, role)
        return role

    async def _group(self, conn: Any, staged: Staged, group_id: Any, epoch: int) -> CachedGroup | None:
        if not isinstance(group_id, str):
            return None
        cached: CachedGroup | None = staged.recall(self.groups, group_id)
        if cached is not None and cached.epoch == epoch:
            return cached
        q = runstore.GROUP_WITH_ROLES
        row = await conn.fetchrow(q.sql, *q.args({"group_id": group_id}))
        if row is None:
            return None
        roles = tuple((name, tuple(perms or ()), boundary) for name, perms, boundary in json.loads(row["roles"]))
        group = CachedGroup(epoch, row["realm_id"], row["organization_id"], row["name"], roles)
        staged.remember(self.groups, group_id, group)
        return group

    # --- one transition -----------------------------------------------------------------------

    async def transition(
        self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime, publishers: Collection[str]
    ) -> Move | None:
        """The run's next internal step, ready to be made with the group's others (``apply``); None when
        it cannot be made here and the step must be taken the ordinary way.

        ``publishers`` are the accountable publishers of every run in this transaction, and every
        subject of more than one of its runs: a run whose subject is one of them changes an authority
        another run of the transaction reads, and goes the ordinary way.
        """
        if run["state"] not in (PENDING, RUNNING) or run["cancel_requested_at"] is not None:
            return None
        if run["due_at"] is None or run["due_at"] > now or run["workflow_state"] == "disabled":
            return None
        if run["succeeded"] or run["publisher_status"] != "active" or run["subject_id"] in publishers:
            return None
        revision = await self._revision(conn, run["revision_id"])
        if revision is None:
            return None
        steps: list[dict[str, Any]] = revision.definition["steps"]
        index: int = run["step_index"]
        if index >= len(steps):
            return None
        step = steps[index]
        step_type = STEP_TYPES.get(step.get("type", ""))
        if step_type is None or MIRRORED.get(step_type.name) is not type(step_type).perform:
            return None
        authority = await self._authority(conn, staged, run, now)
        organization_id = step.get("organization_id") or run["organization_id"]
        snapshot = await self._snapshot(conn, staged, run, step, organization_id, authority, now)
        if snapshot is None:
            return None
        decision = decide(snapshot)
        if isinstance(decision, Refusal):
            return None  # the ordinary way records it
        return self._move(run, revision, step, index, organization_id, decision, now)

    async def _snapshot(
        self,
        conn: Any,
        staged: Staged,
        run: Mapping[str, Any],
        step: dict[str, Any],
        organization_id: str | None,
        authority: Authority,
        now: datetime,
    ) -> Snapshot | None:
        """The step's snapshot from the caches (None: the step goes the ordinary way).

        What the batched statement checks as it writes (``runstore.FAST_TRANSITIONS``: the subject
        is a user of the realm, the organization is the realm's, the grant or the group's place is
        not held yet — or, to leave a group, is held — the subject is a member of the group's
        organization) is taken as fine here;
        a run the statement finds otherwise writes nothing and is decided the ordinary way.
        """
        kind = step["type"]
        facts: dict[str, Any] = {}
        if kind == "assign_role":
            role = await self._role(conn, staged, step.get("role_id"), run["realm_epoch"])
            if role is not None and role.realm_id == run["realm_id"]:
                if role.requires_approval:
                    return None  # its approver is read the ordinary way
                facts["role"] = RoleFacts(
                    step["role_id"], role.name, role.permissions, role.boundary, role.requires_approval
                )
            facts["fresh_id"] = new_id("ras")
        elif kind in ("add_to_group", "remove_from_group"):
            group = await self._group(conn, staged, step.get("group_id"), run["realm_epoch"])
            if group is not None and group.realm_id == run["realm_id"]:
                if kind == "remove_from_group" and any(name == ADMIN_ROLE for name, _, _ in group.roles):
                    return None  # it may take the realm's last administrator away: the ordinary way checks
                facts["group"] = GroupFacts(step["group_id"], group.name, group.organization_id, group.roles)
                facts["is_member"] = True
                facts["in_group"] = kind == "remove_from_group"
        if kind in ("assign_role", "add_to_group", "remove_from_group"):
            if run["subject_epoch"] is None:
                return None  # not a user: refused the ordinary way
            facts["subject"] = SubjectFacts("", "active")
            facts["subject_authority"] = await self._user_authority(
                conn, staged, run["realm_id"], run["subject_id"], run["realm_epoch"], run["subject_epoch"], now
            )
        return Snapshot(
            run_id=run["id"],
            realm_id=run["realm_id"],
            subject_id=run["subject_id"],
            publisher_id=run["publisher_id"],
            step=step,
            organization_id=organization_id,
            now=now,
            wall_now=datetime.now(UTC),
            authority=authority,
            publisher_active=run["publisher_status"] == "active",
            **facts,
        )

    def _move(
        self,
        run: Mapping[str, Any],
        revision: Revision,
        step: dict[str, Any],
        index: int,
        organization_id: str | None,
        effect: Effect,
        now: datetime,
    ) -> Move | None:
        steps = revision.definition["steps"]  # a valid definition always has them
        step_type = STEP_TYPES[step["type"]]
        policy = policy_for(revision.definition, step)
        number = int(run["attempts"]) + 1
        finished = effect.ends_run or index + 1 >= len(steps)
        idempotency_key = f"{run['id']}.{step['id']}"
        audit = [*effect.audit, step_succeeded_entry(run["id"], step["id"], number, idempotency_key)]
        if finished:
            audit.append(run_succeeded_entry(run["id"]))
        target = SUCCEEDED if finished else RUNNING
        if not step_move_allowed(run["state"], target):
            return None  # never written: the ordinary way refuses it by name
        moved_at = self.clock.now()
        row = {
            "run_ids": run["id"],
            "realm_ids": run["realm_id"],
            "subject_ids": run["subject_id"],
            "publisher_ids": run["publisher_id"],
            "from_states": run["state"],
            "targets": target,
            "step_indexes": index,
            "finished": finished,
            "lease_expires_ats": now + self.lease,
            "moved_ats": moved_at,
            "wall_nows": datetime.now(UTC),
            "attempt_ids": new_id("wsa"),
            "step_ids": step["id"],
            "step_types": step_type.name,
            "numbers": number,
            "idempotency_keys": idempotency_key,
            "inputs": _json({"step": step, "subject_id": run["subject_id"], "organization_id": organization_id}),
            "input_versions": input_version(revision.number, revision.hash, run["input_version"]),
            "results": _json(effect.result),
            # Every step type with a fast form is retried (only approvals and waits are not).
            "max_attempts": policy.max_attempts,
            "backoffs_ms": policy.backoff_ms,
            "strategies": effect.strategy,
            "compensation_states": effect.compensation_state,
            "started_ats": now,
            "effects": effect.kind,
            "role_ids": effect.values.get("role_id"),
            "organization_ids": effect.values.get("organization_id"),
            "assignment_ids": effect.values.get("assignment_id"),
            "expires_ats": effect.values.get("expires_at"),
            "group_ids": effect.values.get("group_id"),
        }
        events = [(new_id("aud"), e.category, e.type, e.subject_type, e.subject_id, _json(e.details)) for e in audit]
        return Move(run["id"], finished, row, events, _outcome_event(run, revision.number, target) if finished else [])

    async def apply(self, conn: Any, moves: list[Move]) -> set[str]:
        """Make the moves of a group in one statement: the runs that moved (the others wrote nothing)."""
        if not moves:
            return set()
        values: dict[str, Any] = {name: [move.row[name] for move in moves] for name in _MOVE_COLUMNS}
        audit = [(move.run_id, *event) for move in moves for event in move.audit]
        for position, name in enumerate(_AUDIT_COLUMNS):
            values[name] = [event[position] for event in audit]
        outbox = [(move.run_id, *event) for move in moves for event in move.outbox]
        for position, name in enumerate(_OUTBOX_COLUMNS):
            values[name] = [event[position] for event in outbox]
        values["worker_id"] = self.worker_id
        q = runstore.FAST_TRANSITIONS
        return {row[0] for row in await conn.fetch(q.sql, *q.args(values))}


@dataclass(frozen=True)
class Move:
    """One run's transition, ready for ``FastPath.apply``: a row of ``runstore.FAST_TRANSITIONS``."""

    run_id: str
    finished: bool
    row: dict[str, Any]  # one value per array of the statement
    audit: list[tuple[str, str, str, str, str | None, str]]  # id, category, type, subject type and id, details
    outbox: list[tuple[str, str, str | None, str | None, str]]  # id, type, subject and organization ids, payload


def _outcome_event(
    run: Mapping[str, Any], revision: int, state: str
) -> list[tuple[str, str, str | None, str | None, str]]:
    """The run's outcome event (engine/runs/outcome_events.py), as a row of the outbox arrays."""
    entry = run_outcome_entry(
        run_id=run["id"],
        workflow_id=run["workflow_id"],
        revision=revision,
        subject_id=run["subject_id"],
        organization_id=run["organization_id"],
        state=state,
        error_category=None,
    )
    return [(new_id("obx"), entry.type, entry.subject_id, entry.organization_id, _json(entry.payload))]


_AUDIT_COLUMNS = (
    "audit_run_ids",
    "audit_ids",
    "audit_categories",
    "audit_types",
    "audit_subject_types",
    "audit_subject_ids",
    "audit_details",
)
_OUTBOX_COLUMNS = (
    "outbox_run_ids",
    "outbox_ids",
    "outbox_types",
    "outbox_subject_ids",
    "outbox_organization_ids",
    "outbox_payloads",
)
_MOVE_COLUMNS = tuple(
    name
    for name in runstore.FAST_TRANSITIONS.names
    if name not in _AUDIT_COLUMNS and name not in _OUTBOX_COLUMNS and name != "worker_id"
)


__all__ = ["ATTEMPT_SUCCEEDED", "FAST_STEP_TYPES", "FastPath", "Move", "Staged"]
