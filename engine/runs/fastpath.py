"""The batched executor of internal steps: one statement for the transitions of a whole group commit.

The single-run executor (engine/runs/runner.py) reads the run, its revision, its attempts and its
publisher's authority through the ORM and makes the effect through the directory's writers: some
twenty round trips. This module does the same work for a group of runs in three statements on the
raw asyncpg connection — the lock of every run of the group (``batched.LOCK_FOR_TRANSITION``, a
row lock under the lease), what the group's decisions read of the directory
(``batched.STEP_FACTS``), and one data-modifying statement for all of them
(``batched.FAST_TRANSITIONS``: each run's effect or refusal, its attempt, audit and outbox
events, and its advance, which renews the lease) — with what never changes, or changes rarely,
kept in memory:

- a revision is immutable once written: cached by id;
- the publisher's and the subject's authority, and the roles and groups the grant ceiling reads,
  are cached with the authorization epochs they were read at (``realms.authz_epoch``,
  ``users.authz_epoch``, moved by triggers on every change to roles, groups, assignments,
  memberships and user status). The lock reads the current epochs in the effect's own
  transaction: when either moved, the full authority query runs again, in that transaction. An
  authority also expires with its earliest expiring grant.

Every internal step type has a batched form. Each step is decided by the same function as the
single-run executor and the preview (engine/runs/decisions.py, ``decide``), on the snapshot
``snapshots.load_snapshot`` would read, built here from the caches and the group's facts
(``_snapshot``). An effect is written as decided; a permanent refusal is recorded here as the
single-run executor records it (the failed attempt, and the run compensating from now), with the
audit events built by the same functions. A run goes the ordinary way — this module writes
nothing for it and ``transitions`` leaves it out — when it is cancelled, its workflow is disabled,
its step was already applied, its step type has no batched form (or its ``perform`` was
replaced), its role needs approval, the refusal would be retried, or the step's writer holds a
rule the statement cannot (the realm's last administrator: see ``_snapshot``); and when the
statement finds the facts it was decided on changed meanwhile.
Cache entries read inside a transaction become visible to later transactions only once it commits.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine.directory.admins import ADMIN_ROLE
from engine.directory.authz import AUTHORITY_SQL, Authority, Grant
from engine.directory.notice_templates import NOTICE_TEXTS, WORKFLOW_NOTICE, render_workflow_notice
from engine.platform.clock import SYSTEM_CLOCK, Clock
from engine.platform.ids import new_id
from engine.runs.decisions import (
    Effect,
    GroupFacts,
    Refusal,
    RoleFacts,
    Snapshot,
    SubjectFacts,
    decide,
    run_compensating_entry,
    run_succeeded_entry,
    step_failed_entry,
    step_succeeded_entry,
)
from engine.runs.notices import NOT_CONFIGURED, NOT_CONFIGURED_TEXT, QUEUED
from engine.runs.outcome_events import run_outcome_entry
from engine.runs.retry import policy_for
from engine.runs.runstore import batched
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_SUCCEEDED,
    COMPENSATING,
    PENDING,
    RUNNING,
    STRATEGY_NONE,
    SUCCEEDED,
    move_allowed,
)
from engine.runs.steps import STEP_TYPES
from engine.runs.steps.assign_role import AssignRole
from engine.runs.steps.groups import AddToGroup, RemoveFromGroup
from engine.runs.steps.human import Notify
from engine.runs.steps.remove_role import RemoveRole
from engine.runs.steps.simple import End, RemoveMembership, SuspendUser
from engine.workflows.definitions.canonical import input_version

# The step types with a fast form, and the ``perform`` each mirrors: when a type's ``perform`` is
# another one (replaced in a test, say), the fast form steps aside and the step runs as written.
MIRRORED: dict[str, Any] = {
    "assign_role": AssignRole.perform,
    "add_to_group": AddToGroup.perform,
    "remove_from_group": RemoveFromGroup.perform,
    "remove_role": RemoveRole.perform,
    "remove_membership": RemoveMembership.perform,
    "suspend_user": SuspendUser.perform,
    "notify": Notify.perform,
    "end": End.perform,
}
FAST_STEP_TYPES = frozenset(MIRRORED)
CACHE_LIMIT = 10_000  # entries per cache; a full cache starts again empty
_AUTHORITY = batched.positional(AUTHORITY_SQL)


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

    def __init__(self, worker_id: str, clock: Clock, lease: timedelta, *, mail_configured: bool = False) -> None:
        self.worker_id = worker_id
        self.mail_configured = mail_configured  # notices are mailed (else recorded as not_configured)
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
        rows = await conn.fetch(batched.LOCK_FOR_TRANSITION.sql, *batched.LOCK_FOR_TRANSITION.args(values))
        return {row["id"]: row for row in rows}

    async def _revision(self, conn: Any, revision_id: str) -> Revision | None:
        revision = self.revisions.get(revision_id)
        if revision is None:
            q = batched.REVISION_BY_ID
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
        q = batched.ROLE_BY_ID
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
        q = batched.GROUP_WITH_ROLES
        row = await conn.fetchrow(q.sql, *q.args({"group_id": group_id}))
        if row is None:
            return None
        roles = tuple((name, tuple(perms or ()), boundary) for name, perms, boundary in json.loads(row["roles"]))
        group = CachedGroup(epoch, row["realm_id"], row["organization_id"], row["name"], roles)
        staged.remember(self.groups, group_id, group)
        return group

    # --- the transitions of a group -----------------------------------------------------------

    async def transitions(
        self, conn: Any, staged: Staged, runs: list[Mapping[str, Any]], now: datetime, publishers: Collection[str]
    ) -> list[Move]:
        """The next internal step of each run, ready to be made together (``apply``); a run left out
        must be taken the ordinary way.

        ``publishers`` are the accountable publishers of every run in this transaction, and every
        subject of more than one of its runs: a run whose subject is one of them changes an authority
        another run of the transaction reads, and goes the ordinary way. What the decisions read of
        the directory is read for the whole group in one statement (``batched.STEP_FACTS``).
        """
        ready: list[tuple[Mapping[str, Any], Revision, dict[str, Any], int, _Wanted]] = []
        for run in runs:
            found = await self._ready(conn, staged, run, now, publishers)
            if found is not None:
                ready.append((run, *found))
        facts = await self._facts(conn, [(run, wanted) for run, _, _, _, wanted in ready if wanted.facts])
        moves = []
        for run, revision, step, index, wanted in ready:
            snapshot = await self._snapshot(conn, staged, run, step, wanted, facts.get(run["id"]), now)
            if snapshot is None:
                continue
            decision = decide(snapshot)
            if isinstance(decision, Refusal) and not decision.permanent:
                continue  # a retry waits out its backoff: the ordinary way schedules it
            move = self._move(run, revision, step, index, snapshot.organization_id, decision, now, facts.get(run["id"]))
            if move is not None:
                moves.append(move)
        return moves

    async def transition(
        self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime, publishers: Collection[str]
    ) -> Move | None:
        """One run's next internal step (``transitions`` for a group of one)."""
        moves = await self.transitions(conn, staged, [run], now, publishers)
        return moves[0] if moves else None

    async def _ready(
        self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime, publishers: Collection[str]
    ) -> tuple[Revision, dict[str, Any], int, _Wanted] | None:
        """The run's revision, step and its index, and what its decision reads; None when it goes the ordinary way."""
        if run["state"] not in (PENDING, RUNNING) or run["cancel_requested_at"] is not None:
            return None
        if run["due_at"] is None or run["due_at"] > now or run["workflow_state"] == "disabled":
            return None
        if run["succeeded"] or run["subject_id"] in publishers:
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
        return revision, step, index, await self._wanted(conn, staged, run, step)

    async def _wanted(self, conn: Any, staged: Staged, run: Mapping[str, Any], step: dict[str, Any]) -> _Wanted:
        """What the step's decision reads beyond the caches (``batched.STEP_FACTS``)."""
        kind = step["type"]
        organization_id = step.get("organization_id") or run["organization_id"]
        wanted = _Wanted(facts=kind != "end")
        if kind in ("assign_role", "remove_role"):
            role = await self._role(conn, staged, step.get("role_id"), run["realm_epoch"])
            if role is not None and role.realm_id == run["realm_id"]:
                wanted.role = RoleFacts(
                    step["role_id"], role.name, role.permissions, role.boundary, role.requires_approval
                )
                wanted.role_id = step["role_id"]
            if kind == "assign_role" and step.get("scope") == "organization":
                wanted.org = wanted.grant_org = organization_id
            wanted.want_grants = kind == "remove_role"
        elif kind in ("add_to_group", "remove_from_group"):
            group = await self._group(conn, staged, step.get("group_id"), run["realm_epoch"])
            if group is not None and group.realm_id == run["realm_id"]:
                wanted.group = GroupFacts(step["group_id"], group.name, group.organization_id, group.roles)
                wanted.group_id = step["group_id"]
                wanted.member_org = group.organization_id
        elif kind == "remove_membership":
            wanted.org = wanted.member_org = organization_id
            wanted.want_groups = wanted.want_admin = True
        elif kind == "suspend_user":
            wanted.want_admin = True
        elif kind == "notify":
            wanted.want_notice, wanted.workflow_id = True, run["workflow_id"]
        return wanted

    async def _facts(self, conn: Any, runs: list[tuple[Mapping[str, Any], _Wanted]]) -> dict[str, Any]:
        """``batched.STEP_FACTS`` for the runs that read the directory, in one statement: by run id."""
        if not runs:
            return {}
        values: dict[str, Any] = {
            "run_ids": [run["id"] for run, _ in runs],
            "realm_ids": [run["realm_id"] for run, _ in runs],
            "subject_ids": [run["subject_id"] for run, _ in runs],
            "orgs": [w.org for _, w in runs],
            "member_orgs": [w.member_org for _, w in runs],
            "group_ids": [w.group_id for _, w in runs],
            "role_ids": [w.role_id for _, w in runs],
            "grant_orgs": [w.grant_org for _, w in runs],
            "want_grants": [w.want_grants for _, w in runs],
            "want_groups": [w.want_groups for _, w in runs],
            "want_admin": [w.want_admin for _, w in runs],
            "workflow_ids": [w.workflow_id for _, w in runs],
            "want_notice": [w.want_notice for _, w in runs],
            "notice_template": WORKFLOW_NOTICE,
            "wall_now": SYSTEM_CLOCK.now(),
            "admin_role": ADMIN_ROLE,
        }
        q = batched.STEP_FACTS
        return {row["run_id"]: row for row in await conn.fetch(q.sql, *q.args(values))}

    async def _snapshot(
        self,
        conn: Any,
        staged: Staged,
        run: Mapping[str, Any],
        step: dict[str, Any],
        wanted: _Wanted,
        row: Mapping[str, Any] | None,
        now: datetime,
    ) -> Snapshot | None:
        """The step's snapshot, as engine/runs/snapshots.py::load_snapshot reads it, from the caches and
        the group's facts; None when the step goes the ordinary way.

        A step whose writer holds a rule this module's statement cannot — the realm keeps an active
        administrator (engine/directory/admins.py) — goes the ordinary way exactly when the rule is in
        play: revoking realm-admin, taking the subject out of a group that gives it, and removing from
        an organization or suspending a subject who holds it. So does a role that needs approval (its
        approver is read the ordinary way).
        """
        kind = step["type"]
        organization_id = step.get("organization_id") or run["organization_id"]
        facts: dict[str, Any] = {}
        if kind != "end":
            assert row is not None
            if row["subject_status"] is not None:
                facts["subject"] = SubjectFacts(row["subject_email"], row["subject_status"])
            if kind != "notify":
                facts["subject_authority"] = await self._subject_authority(conn, staged, run, now)
        role = wanted.role
        if role is not None:
            facts["role"] = role
        if kind == "assign_role":
            if role is not None and role.requires_approval:
                return None
            if wanted.grant_org:
                facts["organization_exists"] = row is not None and row["org_exists"]
            facts["holds_grant"] = row is not None and row["holds_grant"]
            facts["fresh_id"] = new_id("ras")
        elif kind == "remove_role" and role is not None:
            if role.name == ADMIN_ROLE:
                return None
            assert row is not None
            facts["assignments"] = tuple((grant[0], grant[1]) for grant in json.loads(row["grants"]))
        elif kind in ("add_to_group", "remove_from_group"):
            group = wanted.group
            facts["group"] = group
            if group is not None:
                if kind == "remove_from_group" and any(name == ADMIN_ROLE for name, _, _ in group.roles):
                    return None
                assert row is not None
                facts["is_member"] = row["membership_id"] is not None
                facts["in_group"] = row["in_group"]
        elif kind == "remove_membership" and organization_id:
            assert row is not None
            if row["subject_is_admin"]:
                return None
            facts["organization_exists"] = row["org_exists"]
            if row["membership_id"] is not None:
                facts["is_member"], facts["membership_id"] = True, row["membership_id"]
                joined = []
                for group_id in row["joined_groups"] or ():
                    cached = await self._group(conn, staged, group_id, run["realm_epoch"])
                    if cached is not None and cached.realm_id == run["realm_id"]:
                        joined.append(GroupFacts(group_id, cached.name, cached.organization_id, cached.roles))
                facts["joined_groups"] = tuple(joined)
        elif kind == "suspend_user":
            assert row is not None
            if row["subject_is_admin"]:
                return None
        elif kind == "notify":
            assert row is not None
            facts["workflow_name"] = row["workflow_name"] or ""
            facts["mail_configured"] = self.mail_configured
        return Snapshot(
            run_id=run["id"],
            realm_id=run["realm_id"],
            subject_id=run["subject_id"],
            publisher_id=run["publisher_id"],
            step=step,
            organization_id=organization_id,
            now=now,
            wall_now=SYSTEM_CLOCK.now(),
            authority=await self._authority(conn, staged, run, now),
            publisher_active=run["publisher_status"] == "active",
            **facts,
        )

    async def _subject_authority(self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime) -> Authority:
        """What the subject holds (nothing, when it is not a user)."""
        if run["subject_epoch"] is None:
            return Authority("user", run["subject_id"])
        return await self._user_authority(
            conn, staged, run["realm_id"], run["subject_id"], run["realm_epoch"], run["subject_epoch"], now
        )

    def _move(
        self,
        run: Mapping[str, Any],
        revision: Revision,
        step: dict[str, Any],
        index: int,
        organization_id: str | None,
        decision: Effect | Refusal,
        now: datetime,
        facts: Mapping[str, Any] | None = None,
    ) -> Move | None:
        """The run's row of the group's statement: its effect and advance, or its refusal recorded."""
        steps = revision.definition["steps"]  # a valid definition always has them
        step_type = STEP_TYPES[step["type"]]
        policy = policy_for(revision.definition, step)
        number = int(run["attempts"]) + 1
        idempotency_key = f"{run['id']}.{step['id']}"
        if isinstance(decision, Refusal):
            # As the single-run executor records a permanent refusal: the failed attempt, and the run
            # compensates from now (engine/runs/runner.py, ``_record_failure``).
            effect = Effect("none", decision.message, strategy=STRATEGY_NONE, compensation_state="")
            finished, target = False, COMPENSATING
            audit = [
                step_failed_entry(run["id"], step["id"], number, decision.category),
                run_compensating_entry(run["id"], decision.category),
            ]
        else:
            effect = decision
            finished = effect.ends_run or index + 1 >= len(steps)
            target = SUCCEEDED if finished else RUNNING
            audit = [*effect.audit, step_succeeded_entry(run["id"], step["id"], number, idempotency_key)]
            if finished:
                audit.append(run_succeeded_entry(run["id"]))
        if not move_allowed(run["state"], target):
            return None  # never written: the ordinary way refuses it by name
        refused = isinstance(decision, Refusal)
        notice = self._notice(run, effect, facts, now)
        if notice is None:
            return None
        result = {"notice_id": notice["notice_ids"]} | effect.result if effect.kind == "notify" else effect.result
        moved_at = self.clock.now()
        item_set = effect.values.get("assignment_ids", effect.values.get("group_ids"))
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
            "wall_nows": SYSTEM_CLOCK.now(),
            "attempt_ids": new_id("wsa"),
            "step_ids": step["id"],
            "step_types": step_type.name,
            "numbers": number,
            "idempotency_keys": idempotency_key,
            "inputs": _json({"step": step, "subject_id": run["subject_id"], "organization_id": organization_id}),
            "input_versions": input_version(revision.number, revision.hash, run["input_version"]),
            "results": None if refused else _json(result),
            # Every step type with a fast form is retried (only approvals and waits are not).
            "max_attempts": policy.max_attempts,
            "backoffs_ms": policy.backoff_ms,
            "strategies": effect.strategy,
            "compensation_states": None if refused else effect.compensation_state,
            "started_ats": now,
            "effects": effect.kind,
            "role_ids": effect.values.get("role_id"),
            "organization_ids": effect.values.get("organization_id"),
            "assignment_ids": effect.values.get("assignment_id"),
            "expires_ats": effect.values.get("expires_at"),
            "group_ids": effect.values.get("group_id"),
            "attempt_states": ATTEMPT_FAILED if refused else ATTEMPT_SUCCEEDED,
            "error_categories": decision.category if isinstance(decision, Refusal) else None,
            "error_messages": decision.message[:2000] if isinstance(decision, Refusal) else None,
            "item_sets": None if item_set is None else _json(list(item_set)),
            "membership_ids": effect.values.get("membership_id"),
            **notice,
        }
        events = [(new_id("aud"), e.category, e.type, e.subject_type, e.subject_id, _json(e.details)) for e in audit]
        outbox = [(new_id("obx"), o.type, o.subject_id, o.organization_id, _json(o.payload)) for o in effect.outbox]
        if finished:
            outbox += _outcome_event(run, revision.number, target)
        return Move(run["id"], finished, row, events, outbox)

    def _notice(
        self, run: Mapping[str, Any], effect: Effect, facts: Mapping[str, Any] | None, now: datetime
    ) -> dict[str, Any] | None:
        """A ``notify`` effect's row of ``workflow_notices``, rendered as engine/runs/notices.py::record_notice
        renders it (the columns of other effects are empty); None when it cannot be rendered here."""
        empty = dict.fromkeys(_NOTICE_COLUMNS)
        if effect.kind != "notify":
            return empty
        code = effect.values["notice"]
        if facts is None or facts["realm_name"] is None or code not in NOTICE_TEXTS:
            return None  # the ordinary way reports it
        override = tuple(json.loads(facts["notice_template"])) if facts["notice_template"] else None
        rendered = render_workflow_notice(
            facts["realm_name"],
            (override[0], override[1]) if override else None,
            effect.values["workflow_name"],
            code,
            now,
        )
        queued = self.mail_configured
        return {
            "notice_ids": new_id("ntc"),
            "workflow_ids": run["workflow_id"],
            "notices": code,
            "to_addresses": effect.values["to_address"],
            "notice_subjects": rendered.subject[:300],
            "notice_bodies": rendered.body,
            "notice_states": QUEUED if queued else NOT_CONFIGURED,
            "notice_errors": None if queued else NOT_CONFIGURED_TEXT,
        }

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
        q = batched.FAST_TRANSITIONS
        moved = {row[0] for row in await conn.fetch(q.sql, *q.args(values))}
        if any(move.outbox and move.run_id in moved for move in moves):
            await conn.execute(batched.OUTBOX_WAKE)  # the dispatcher wakes when this transaction commits
        return moved


@dataclass(frozen=True)
class Move:
    """One run's transition, ready for ``FastPath.apply``: a row of ``batched.FAST_TRANSITIONS``."""

    run_id: str
    finished: bool
    row: dict[str, Any]  # one value per array of the statement
    audit: list[tuple[str, str, str, str, str | None, str]]  # id, category, type, subject type and id, details
    outbox: list[tuple[str, str, str | None, str | None, str]] = field(
        default_factory=list
    )  # id, type, subject, org, payload


@dataclass
class _Wanted:
    """What one run's step reads of the directory (a row of ``batched.STEP_FACTS``), and its cached role or group."""

    facts: bool
    org: str | None = None  # the organization whose existence is checked
    member_org: str | None = None  # the organization whose membership is read
    group_id: str | None = None
    role_id: str | None = None
    grant_org: str | None = None
    want_grants: bool = False
    want_groups: bool = False
    want_admin: bool = False
    want_notice: bool = False
    workflow_id: str | None = None
    role: RoleFacts | None = None
    group: GroupFacts | None = None


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
_NOTICE_COLUMNS = (
    "notice_ids",
    "workflow_ids",
    "notices",
    "to_addresses",
    "notice_subjects",
    "notice_bodies",
    "notice_states",
    "notice_errors",
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
    for name in batched.FAST_TRANSITIONS.names
    if name not in _AUDIT_COLUMNS and name not in _OUTBOX_COLUMNS and name != "worker_id"
)


__all__ = ["ATTEMPT_SUCCEEDED", "FAST_STEP_TYPES", "FastPath", "Move", "Staged"]
