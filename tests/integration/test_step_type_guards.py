"""Each step type's own guards, asked directly (seed 000, "Step types", "Error categories").

A run reaches a step's effect only after the runner has re-checked the publisher's authority for
that step (``Runner._recheck_authority``), and that check already refuses a role or group that is
gone. The step types keep their own guards anyway — a step type is called by the runner, the fast
path's fallback and compensation, and must never act on another realm's role or group or with an
authority that does not reach: these tests call each type with a context as the runner builds it
and pin the category, the message and whether the failure is permanent, and that nothing changed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from engine.directory.audit import Actor
from engine.directory.authz import Authority, Grant, load_authority
from engine.platform.ids import new_id
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.steps import STEP_TYPES, StepContext, StepFailure
from tests.factories import RealmHandle
from tests.integration.test_engine_rules import member_group


def run_about(realm: RealmHandle, subject_id: str) -> WorkflowRun:
    """A run as the step sees it: its realm, subject and publisher (nothing is written for it)."""
    return WorkflowRun(
        id=new_id("wrn"),
        realm_id=realm.id,
        workflow_id=new_id("wfl"),
        revision=1,
        revision_id=new_id("wrv"),
        subject_id=subject_id,
        publisher_id=realm.admin.id,
        trigger_type="manual",
        trigger_key=new_id("obx"),
        state="running",
        context={},
        input={},
    )


async def perform(
    realm: RealmHandle,
    step: dict[str, Any],
    subject_id: str,
    *,
    authority: Authority | None = None,
    organization_id: str | None = None,
) -> StepFailure:
    """Perform ``step`` in a transaction that is rolled back; the failure it raised."""
    async with realm.sessions() as session, session.begin():
        ctx = StepContext(
            session=session,
            run=run_about(realm, subject_id),
            step=step,
            step_index=0,
            organization_id=organization_id,
            actor=realm.actor,
            authority=authority or await load_authority(session, realm.id, "user", realm.admin.id),
            now=datetime.now(UTC),
        )
        with pytest.raises(StepFailure) as refused:
            await STEP_TYPES[step["type"]].perform(ctx)
        await session.rollback()
    return refused.value


def failure(exc: StepFailure) -> tuple[str, str, bool]:
    return exc.category, exc.message, exc.permanent


async def count(realm: RealmHandle, sql: str, **params: Any) -> int:
    async with realm.sessions() as session:
        return int(await session.scalar(text(sql), params) or 0)


@pytest.mark.parametrize("step_type", ["assign_role", "remove_role"])
async def test_a_role_that_is_gone_or_of_another_realm_is_refused_by_the_step_itself(
    realm: RealmHandle, other_realm: RealmHandle, step_type: str
) -> None:
    subject = await realm.user()
    foreign = await other_realm.role("viewer", ["realm.workflows.read"])
    for role_id in (new_id("rol"), foreign.id):
        step = {"id": "s", "type": step_type, "role_id": role_id, "scope": "realm"}
        refused = await perform(realm, step, subject.id)
        assert failure(refused) == ("not_found", "The role no longer exists.", True)
    held = "SELECT count(*) FROM role_assignments WHERE user_id = :u"
    assert await count(realm, held, u=subject.id) == 0


async def test_a_removal_the_authority_does_not_reach_is_refused_with_the_directorys_code(
    realm: RealmHandle,
) -> None:
    """``remove_role`` revokes through the directory with the publisher's authority: an authority
    without the role's ceiling is refused there, permanently, with the directory's code and words,
    and the assignment stays."""
    subject = await realm.user()
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    assignment = await realm.assign(subject, viewer)
    weak = Authority("user", realm.admin.id, [Grant(frozenset({"realm.audit.read"}), None)])
    step = {"id": "s", "type": "remove_role", "role_id": viewer.id}
    refused = await perform(realm, step, subject.id, authority=weak)
    assert failure(refused) == (
        "grant_ceiling_exceeded",
        "To revoke viewer you need every permission of the role in that scope; missing: realm.workflows.read",
        True,
    )
    assert await count(realm, "SELECT count(*) FROM role_assignments WHERE id = :a", a=assignment.id) == 1


@pytest.mark.parametrize("step_type", ["add_to_group", "remove_from_group"])
async def test_a_group_that_is_gone_or_of_another_realm_is_refused_by_the_step_itself(
    realm: RealmHandle, other_realm: RealmHandle, step_type: str
) -> None:
    subject = await realm.user()
    _, foreign_group = await member_group(other_realm, (await other_realm.user()).id)
    for group_id in (new_id("grp"), foreign_group):
        refused = await perform(realm, {"id": "s", "type": step_type, "group_id": group_id}, subject.id)
        assert failure(refused) == ("group_missing", "The group no longer exists.", True)
    assert await count(realm, "SELECT count(*) FROM group_members WHERE user_id = :u", u=subject.id) == 0


async def test_an_external_step_is_never_performed_inside_a_transaction(realm: RealmHandle) -> None:
    """``call_webhook`` is made outside any transaction (the runner prepares it): asked to perform
    inside one, it refuses, as a transient error that makes no call."""
    subject = await realm.user()
    refused = await perform(realm, {"id": "s", "type": "call_webhook", "subscription_id": "whs_x"}, subject.id)
    assert failure(refused) == ("error", "call_webhook runs as an external step", False)


@pytest.mark.parametrize("step_type", ["remove_role", "remove_from_group", "remove_membership", "suspend_user"])
async def test_a_step_that_is_never_reversed_refuses_to_be_undone(realm: RealmHandle, step_type: str) -> None:
    """Only the types that record a pending compensation have an undo; the others refuse, by name,
    permanently (seed 000: removals and suspensions are never reversed)."""
    subject = await realm.user()
    async with realm.sessions() as session, session.begin():
        ctx = StepContext(
            session=session,
            run=run_about(realm, subject.id),
            step={"id": "s", "type": step_type},
            step_index=0,
            organization_id=None,
            actor=Actor(type="user", id=realm.admin.id, realm_id=realm.id),
            authority=await load_authority(session, realm.id, "user", realm.admin.id),
            now=datetime.now(UTC),
        )
        attempt = StepAttempt(
            id=new_id("wsa"),
            run_id=ctx.run.id,
            realm_id=realm.id,
            step_id="s",
            step_index=0,
            step_type=step_type,
            number=1,
            idempotency_key=new_id("obx"),
            input_version="1",
        )
        with pytest.raises(StepFailure) as refused:
            await STEP_TYPES[step_type].undo(ctx, attempt)
    assert failure(refused.value) == ("error", f"{step_type} cannot be undone", True)
