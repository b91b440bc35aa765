"""Each step type's own guards, asked directly (seed 000, "Step types", "Error categories").

A run reaches a step's effect only after the runner has re-checked the publisher's authority for
that step (``Runner._recheck_authority``), and that check already refuses a role or group that is
gone. The step types keep their own guards anyway — a step type is called by the runner, the fast
path's fallback and compensation, and must never act on another realm's role or group or with an
authority that does not reach: these tests call each type with a context as the runner builds it
and pin the category, the message and whether the failure is permanent, and that what the subject
holds did not change before the refusal (read in the step's own transaction).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory import webhooks
from engine.directory.authz import Authority, Grant, load_authority
from engine.endpoints.calls import EndpointSettings, PreparedCall
from engine.platform.ids import new_id
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.steps import STEP_TYPES, StepContext, StepFailure
from engine.runs.steps.call_webhook import CallWebhook
from testing.directory import member_group
from testing.factories import TEST_SECRET_KEY, RealmHandle


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


async def context(
    realm: RealmHandle, session: AsyncSession, subject_id: str, step: dict[str, Any], authority: Authority | None = None
) -> StepContext:
    """The context the runner builds for a step: the publisher (here the realm's administrator),
    its authority loaded in the step's transaction unless another is given, and the time."""
    return StepContext(
        session=session,
        run=run_about(realm, subject_id),
        step=step,
        step_index=0,
        organization_id=None,
        actor=realm.actor,
        authority=authority or await load_authority(session, realm.id, "user", realm.admin.id),
        now=datetime.now(UTC),
    )


def attempt_of(ctx: StepContext, **extra: Any) -> StepAttempt:
    """A succeeded-looking attempt of the context's step (nothing is written for it)."""
    return StepAttempt(
        id=new_id("wsa"),
        run_id=ctx.run.id,
        realm_id=ctx.run.realm_id,
        step_id=ctx.step["id"],
        step_index=0,
        step_type=ctx.step["type"],
        number=1,
        idempotency_key=new_id("obx"),
        input_version="1",
        **extra,
    )


HOLDINGS = text(
    "SELECT (SELECT array_agg(id ORDER BY id) FROM role_assignments WHERE user_id = :u),"
    " (SELECT array_agg(group_id ORDER BY group_id) FROM group_members WHERE user_id = :u)"
)


async def holdings(session: AsyncSession, subject_id: str) -> tuple[Any, Any]:
    """The subject's assignments and groups, as ``session`` sees them."""
    row = (await session.execute(HOLDINGS, {"u": subject_id})).one()
    return row[0], row[1]


async def perform(
    realm: RealmHandle, step: dict[str, Any], subject_id: str, *, authority: Authority | None = None
) -> StepFailure:
    """Perform ``step`` in a transaction that is rolled back; the failure it raised. What the
    subject holds is read in that transaction, after the refusal and before the rollback: a step
    that changed something before refusing would be seen."""
    async with realm.sessions() as session, session.begin():
        before = await holdings(session, subject_id)
        ctx = await context(realm, session, subject_id, step, authority)
        with pytest.raises(StepFailure) as refused:
            await STEP_TYPES[step["type"]].perform(ctx)
        assert await holdings(session, subject_id) == before
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


async def test_a_removal_the_authority_does_not_reach_is_refused_with_the_directorys_code(
    realm: RealmHandle,
) -> None:
    """``remove_role`` revokes through the directory with the publisher's authority: an authority
    without the role's ceiling is refused there, permanently, with the directory's code and words,
    and the assignment stays."""
    subject = await realm.user()
    viewer = await realm.role("viewer", ["realm.workflows.read"])
    await realm.assign(subject, viewer)
    weak = Authority("user", realm.admin.id, [Grant(frozenset({"realm.audit.read"}), None)])
    step = {"id": "s", "type": "remove_role", "role_id": viewer.id}
    refused = await perform(realm, step, subject.id, authority=weak)
    assert failure(refused) == (
        "grant_ceiling_exceeded",
        "To revoke viewer you need every permission of the role in that scope; missing: realm.workflows.read",
        True,
    )


@pytest.mark.parametrize("step_type", ["add_to_group", "remove_from_group"])
async def test_a_group_that_is_gone_or_of_another_realm_is_refused_by_the_step_itself(
    realm: RealmHandle, other_realm: RealmHandle, step_type: str
) -> None:
    subject = await realm.user()
    _, foreign_group = await member_group(other_realm, (await other_realm.user()).id)
    for group_id in (new_id("grp"), foreign_group):
        refused = await perform(realm, {"id": "s", "type": step_type, "group_id": group_id}, subject.id)
        assert failure(refused) == ("group_missing", "The group no longer exists.", True)


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
        ctx = await context(realm, session, subject.id, {"id": "s", "type": step_type})
        with pytest.raises(StepFailure) as refused:
            await STEP_TYPES[step_type].undo(ctx, attempt_of(ctx))
    assert failure(refused.value) == ("error", f"{step_type} cannot be undone", True)


async def prepared(
    realm: RealmHandle, step: dict[str, Any], settings: EndpointSettings, *, compensation: bool = False
) -> PreparedCall | StepFailure:
    """``call_webhook``'s call (or compensation call) as the runner prepares it, or its refusal."""
    subject = await realm.user()
    async with realm.sessions() as session, session.begin():
        ctx = await context(realm, session, subject.id, step)
        attempt = attempt_of(ctx, compensation_attempts=2)
        hook = CallWebhook()
        try:
            if compensation:
                return await hook.prepare_compensation(ctx, attempt, settings)
            return await hook.prepare(ctx, attempt, settings)
        except StepFailure as exc:
            return exc


async def subscription(realm: RealmHandle) -> str:
    async with realm.sessions() as session, session.begin():
        made, _ = await webhooks.create_subscription(
            session, realm.actor, TEST_SECRET_KEY, destination="https://hooks.example.com/cockpit"
        )
    return made.id


async def test_a_call_to_a_subscription_that_is_gone_or_of_another_realm_is_refused(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    """A definition names a subscription of its own realm when it is published; one removed from
    the database since, or another realm's, is never called: a permanent ``subscription_missing``."""
    settings = EndpointSettings(operator_key=TEST_SECRET_KEY)
    for hook in (new_id("whk"), await subscription(other_realm)):
        refused = await prepared(realm, {"id": "call", "type": "call_webhook", "subscription_id": hook}, settings)
        assert isinstance(refused, StepFailure)
        assert failure(refused) == ("subscription_missing", f"The webhook subscription {hook} is gone.", True)


async def test_without_an_operator_key_a_call_fails_permanently(realm: RealmHandle) -> None:
    hook = await subscription(realm)
    refused = await prepared(
        realm, {"id": "call", "type": "call_webhook", "subscription_id": hook}, EndpointSettings(operator_key=None)
    )
    assert isinstance(refused, StepFailure)
    assert failure(refused) == ("secret_unavailable", "No operator key to read the subscription's secret.", True)


@pytest.mark.parametrize(
    ("step_timeout", "operator_timeout", "seconds"),
    [(None, 10_000, 10.0), (1_500, 10_000, 1.5), (30_000, 2_500, 2.5), (100, 100, 0.1)],
)
async def test_a_calls_time_limit_is_the_steps_under_the_operators_ceiling(
    realm: RealmHandle, step_timeout: int | None, operator_timeout: int, seconds: float
) -> None:
    hook = await subscription(realm)
    step: dict[str, Any] = {"id": "call", "type": "call_webhook", "subscription_id": hook}
    if step_timeout is not None:
        step["timeout_ms"] = step_timeout
    settings = EndpointSettings(operator_key=TEST_SECRET_KEY, timeout_ms=operator_timeout)
    call = await prepared(realm, step, settings)
    assert isinstance(call, PreparedCall)
    assert (call.action, call.timeout_s, call.url) == ("execute", seconds, "https://hooks.example.com/cockpit")
    # A compensation call always has five seconds, whatever the step and the operator say.
    undo = await prepared(realm, step, settings, compensation=True)
    assert isinstance(undo, PreparedCall)
    assert (undo.action, undo.timeout_s) == ("compensate", 5.0)
