"""The batched form of each internal step type, for the fast path (engine/runs/fastpath.py).

What each step's decision reads of the directory beyond the caches (``_wanted``, one row of
``batched.STEP_FACTS`` per run: ``_facts``), the snapshot it is decided on — as
``snapshots.load_snapshot`` would read it (``_snapshot``) — and the run's row of
``batched.FAST_TRANSITIONS``: its effect and advance, or its permanent refusal recorded as the
single-run executor records it (``_move``, ``Move``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine.directory.admins import ADMIN_ROLE
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
    run_compensating_entry,
    run_succeeded_entry,
    step_failed_entry,
    step_succeeded_entry,
)
from engine.runs.fastpath_caches import Caches, Revision, Staged
from engine.runs.notices import NOT_CONFIGURED, NOT_CONFIGURED_TEXT, QUEUED
from engine.runs.outcome_events import run_outcome_entry
from engine.runs.retry import policy_for
from engine.runs.runstore import batched
from engine.runs.states import (
    ATTEMPT_FAILED,
    ATTEMPT_SUCCEEDED,
    COMPENSATING,
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


def _json(value: Any) -> str:
    """A ``jsonb`` parameter's text: the server parses it, so its spacing is not kept."""
    return json.dumps(value)


class StepForms(Caches):
    """The step-type part of ``FastPath``: what each step reads, its snapshot and its row."""

    mail_configured: bool  # notices are mailed (else recorded as not_configured)
    clock: Clock
    lease: timedelta  # a run that goes on is held this long from its advance

    async def _wanted(self, conn: Any, staged: Staged, run: Mapping[str, Any], step: dict[str, Any]) -> Wanted:
        """What the step's decision reads beyond the caches (``batched.STEP_FACTS``)."""
        kind = step["type"]
        organization_id = step.get("organization_id") or run["organization_id"]
        wanted = Wanted(facts=kind != "end")
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

    async def _facts(self, conn: Any, runs: list[tuple[Mapping[str, Any], Wanted]]) -> dict[str, Any]:
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
        wanted: Wanted,
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
        empty = dict.fromkeys(NOTICE_COLUMNS)
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
class Wanted:
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


AUDIT_COLUMNS = (
    "audit_run_ids",
    "audit_ids",
    "audit_categories",
    "audit_types",
    "audit_subject_types",
    "audit_subject_ids",
    "audit_details",
)
NOTICE_COLUMNS = (
    "notice_ids",
    "workflow_ids",
    "notices",
    "to_addresses",
    "notice_subjects",
    "notice_bodies",
    "notice_states",
    "notice_errors",
)
OUTBOX_COLUMNS = (
    "outbox_run_ids",
    "outbox_ids",
    "outbox_types",
    "outbox_subject_ids",
    "outbox_organization_ids",
    "outbox_payloads",
)
MOVE_COLUMNS = tuple(
    name
    for name in batched.FAST_TRANSITIONS.names
    if name not in AUDIT_COLUMNS and name not in OUTBOX_COLUMNS and name != "worker_id"
)
