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

The fast path never decides a failure. Whenever something is not plainly fine — a cancellation,
a disabled workflow, a step already applied, a step type without a fast form, an inactive
publisher, a missing permission, a role that needs approval, a missing subject or membership, a
duplicate grant — it writes nothing and returns ``None``, and the runner takes the step the
ordinary way, which reports the failure exactly as it always has. Cache entries read inside a
transaction become visible to later transactions only once it commits.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from engine.directory.authz import AUTHORITY_SQL, Authority, Grant, authority_gaps
from engine.platform.ids import new_id
from engine.runs import runstore
from engine.runs.retry import Clock, policy_for
from engine.runs.states import (
    ATTEMPT_SUCCEEDED,
    COMP_NOT_NEEDED,
    COMP_PENDING,
    PENDING,
    RUNNING,
    STRATEGY_NONE,
    STRATEGY_UNDO,
    SUCCEEDED,
)
from engine.runs.steps import STEP_TYPES
from engine.runs.steps.assign_role import AssignRole
from engine.runs.steps.groups import AddToGroup
from engine.runs.steps.simple import End
from engine.workflows.definitions.canonical import input_version
from engine.workflows.definitions.durations import parse_duration

# The step types with a fast form, and the ``perform`` each mirrors: when a type's ``perform`` is
# another one (replaced in a test, say), the fast form steps aside and the step runs as written.
MIRRORED: dict[str, Any] = {"assign_role": AssignRole.perform, "add_to_group": AddToGroup.perform, "end": End.perform}
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
    roles: tuple[tuple[str, tuple[str, ...], str], ...]  # (name, permissions, boundary), ancestors' included


@dataclass(frozen=True)
class CachedAuthority:
    realm_epoch: int
    user_epoch: int
    read_at: datetime  # the run clock's time it was read at
    valid_until: datetime | None  # its earliest expiring grant
    authority: Authority


@dataclass(frozen=True)
class Effect:
    """What one fast transition writes besides the attempt and the advance."""

    kind: str  # assign_role, add_to_group or none: the effect columns of runstore.FAST_TRANSITIONS
    values: dict[str, Any]
    result: dict[str, Any]
    strategy: str
    compensation_state: str
    audit: tuple[str, str, str, dict[str, Any]] | None  # category, type, subject type, details
    ends_run: bool = False


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
        group = CachedGroup(epoch, row["realm_id"], row["organization_id"], roles)
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
        if not authority.holds("realm.workflows.publish"):
            return None
        organization_id = step.get("organization_id") or run["organization_id"]
        if step_type.name == "assign_role":
            effect = await self._assign_role(conn, staged, run, step, organization_id, authority, now)
        elif step_type.name == "add_to_group":
            effect = await self._add_to_group(conn, staged, run, step, authority)
        else:
            effect = Effect("none", {}, {}, STRATEGY_NONE, COMP_NOT_NEEDED, None, ends_run=True)
        if effect is None:
            return None
        if step_type.name in ("assign_role", "add_to_group"):
            # The one rule of engine.directory.authz: changing what the subject holds needs everything the
            # subject holds, in every scope. A subject who outranks the publisher goes the
            # ordinary way, which refuses with target_outranks_actor.
            if run["subject_epoch"] is None:
                return None
            subject = await self._user_authority(
                conn, staged, run["realm_id"], run["subject_id"], run["realm_epoch"], run["subject_epoch"], now
            )
            if authority_gaps(authority, subject):
                return None
        return self._move(run, revision, step, index, organization_id, effect, now)

    async def _assign_role(
        self,
        conn: Any,
        staged: Staged,
        run: Mapping[str, Any],
        step: dict[str, Any],
        organization_id: str | None,
        authority: Authority,
        now: datetime,
    ) -> Effect | None:
        """The checks of ``AssignRole.perform``, ``roles.create_assignment`` and the authority re-check."""
        role = await self._role(conn, staged, step.get("role_id"), run["realm_epoch"])
        if role is None or role.realm_id != run["realm_id"] or role.requires_approval:
            return None
        realm_scope = step.get("scope") != "organization"
        grant_org = None if realm_scope else organization_id
        if not realm_scope and not organization_id:
            return None
        if (role.boundary == "organization") != (grant_org is not None):
            return None
        expires_at = None
        if step.get("expires_in"):
            expires_at = now + timedelta(seconds=parse_duration(step["expires_in"]))
            if expires_at <= datetime.now(UTC):
                return None
        # The step's requirement (role_ceiling) and the grant ceiling: every permission of the role,
        # held where the grant takes effect. Past the boundary check above, both are one scope: the
        # organization for a role bounded by one (granted there), the whole realm for any other.
        if not all(authority.holds(p, grant_org) for p in role.permissions):
            return None
        assignment_id = new_id("ras")
        return Effect(
            "assign_role",
            {
                "role_id": step["role_id"],
                "organization_id": grant_org,
                "assignment_id": assignment_id,
                "expires_at": expires_at,
            },
            {"assignment_id": assignment_id, "role_id": step["role_id"], "organization_id": grant_org},
            STRATEGY_UNDO,
            COMP_PENDING,
            (
                "authorization",
                "role.assigned",
                "user",
                {
                    "assignment_id": assignment_id,
                    "role_id": step["role_id"],
                    "role": role.name,
                    "organization_id": grant_org,
                    "expires_at": expires_at.isoformat() if expires_at else None,
                    "approver_id": None,
                },
            ),
        )

    async def _add_to_group(
        self, conn: Any, staged: Staged, run: Mapping[str, Any], step: dict[str, Any], authority: Authority
    ) -> Effect | None:
        """The checks of ``AddToGroup.perform``, ``organizations.add_group_member`` and the re-check."""
        group = await self._group(conn, staged, step.get("group_id"), run["realm_epoch"])
        if group is None or group.realm_id != run["realm_id"]:
            return None
        if not authority.holds("org.groups.write", group.organization_id):
            return None
        for _name, permissions, boundary in group.roles:
            scope = group.organization_id if boundary == "organization" else None
            if not all(authority.holds(p, scope) for p in permissions):
                return None
        details = {"group_id": step["group_id"], "organization_id": group.organization_id}
        return Effect(
            "add_to_group",
            {"group_id": step["group_id"], "organization_id": group.organization_id},
            dict(details),
            STRATEGY_UNDO,
            COMP_PENDING,
            ("directory", "group.member_added", "user", details),
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
    ) -> Move:
        steps = revision.definition["steps"]  # a valid definition always has them
        step_type = STEP_TYPES[step["type"]]
        policy = policy_for(revision.definition, step)
        number = int(run["attempts"]) + 1
        finished = effect.ends_run or index + 1 >= len(steps)
        idempotency_key = f"{run['id']}.{step['id']}"
        audit: list[tuple[str, str, str, str | None, dict[str, Any]]] = []  # category, type, subject, id, details
        if effect.audit is not None:
            category, kind, subject_type, details = effect.audit
            audit.append((category, kind, subject_type, run["subject_id"], details))
        audit.append(
            (
                "workflow",
                "workflow.step.succeeded",
                "workflow_run",
                run["id"],
                {"step_id": step["id"], "attempt": number, "idempotency_key": idempotency_key},
            )
        )
        if finished:
            audit.append(("workflow", "workflow.run.succeeded", "workflow_run", run["id"], {}))
        moved_at = self.clock.now()
        row = {
            "run_ids": run["id"],
            "realm_ids": run["realm_id"],
            "subject_ids": run["subject_id"],
            "publisher_ids": run["publisher_id"],
            "from_states": run["state"],
            "targets": SUCCEEDED if finished else RUNNING,
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
        return Move(run["id"], finished, row, [(new_id("aud"), *entry[:4], _json(entry[4])) for entry in audit])

    async def apply(self, conn: Any, moves: list[Move]) -> set[str]:
        """Make the moves of a group in one statement: the runs that moved (the others wrote nothing)."""
        if not moves:
            return set()
        values: dict[str, Any] = {name: [move.row[name] for move in moves] for name in _MOVE_COLUMNS}
        audit = [(move.run_id, *event) for move in moves for event in move.audit]
        for position, name in enumerate(_AUDIT_COLUMNS):
            values[name] = [event[position] for event in audit]
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


_AUDIT_COLUMNS = (
    "audit_run_ids",
    "audit_ids",
    "audit_categories",
    "audit_types",
    "audit_subject_types",
    "audit_subject_ids",
    "audit_details",
)
_MOVE_COLUMNS = tuple(
    name for name in runstore.FAST_TRANSITIONS.names if name not in _AUDIT_COLUMNS and name != "worker_id"
)


__all__ = ["ATTEMPT_SUCCEEDED", "FAST_STEP_TYPES", "FastPath", "Move", "Staged"]
