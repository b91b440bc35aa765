"""The shape every step type has: one small module per type (engine/runs/steps/<type>.py).

A step type says what kind of work it is, performs its effect inside the run's transaction
(internal effects), and says how it is compensated. It never writes the engine's own tables:
engine/runs/runstore/ does that around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor
from engine.directory.authz import Authority
from engine.platform.errors import EngineError
from engine.runs.decisions import DECISIONS, Effect, Refusal, Snapshot
from engine.runs.models import StepAttempt, WorkflowRun
from engine.runs.snapshots import RunFacts, load_snapshot
from engine.runs.states import COMP_NOT_NEEDED, STRATEGY_NONE

INTERNAL = "internal"  # one transaction: lease check, authority, effect, attempt, advance, audit
WAIT = "wait"  # the run waits for time to pass
APPROVAL = "approval"  # the run waits for people
EXTERNAL = "external"  # a call outside any transaction (at-least-once)


class StepFailure(Exception):
    """A step (or its compensation) did not do its work.

    ``category`` is the error category recorded on the attempt (seed 000 "Error categories");
    a permanent failure is never retried.
    """

    def __init__(self, category: str, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.category = category
        self.message = message
        self.permanent = permanent

    @classmethod
    def from_engine_error(cls, exc: EngineError) -> StepFailure:
        """Refused operations are permanent, with their code as the category."""
        return cls(exc.code, exc.detail, permanent=True)


@dataclass
class StepContext:
    session: AsyncSession
    run: WorkflowRun
    step: dict[str, Any]
    step_index: int
    organization_id: str | None
    actor: Actor  # the accountable publisher, with the run id as request and correlation id
    authority: Authority  # the publisher's authority, loaded in this transaction
    now: datetime
    mail_configured: bool = False  # notices are mailed (else recorded as not_configured)
    snapshot: Snapshot | None = None  # what the step's decision reads, once loaded in this transaction

    def require_organization(self) -> str:
        if not self.organization_id:
            raise StepFailure(
                "organization_required", "This step needs an organization and the run has none.", permanent=True
            )
        return self.organization_id


@dataclass
class Outcome:
    """What a succeeded step leaves behind: its result and how it would be compensated."""

    result: dict[str, Any] = field(default_factory=dict)
    strategy: str = STRATEGY_NONE
    compensation_state: str = COMP_NOT_NEEDED
    ends_run: bool = False


def outcome_of(effect: Effect, **result: Any) -> Outcome:
    """The succeeded attempt of a written effect (``result``: what only the writing learned, such as a row's id)."""
    return Outcome(
        result=result | effect.result,
        strategy=effect.strategy,
        compensation_state=effect.compensation_state,
        ends_run=effect.ends_run,
    )


class StepType:
    """One step type: its decision (engine/runs/decisions.py) and the writer of its effect.

    ``perform`` is the single-run executor of an internal step: it loads the step's snapshot in
    the step's transaction, decides, and writes exactly what was decided (``write``); a refusal
    fails the attempt with its category, message and permanence.
    """

    name: ClassVar[str]
    kind: ClassVar[str] = INTERNAL
    retried: ClassVar[bool] = True  # waits and approvals are never retried

    async def snapshot(self, ctx: StepContext, *, operator_key: str | None = None) -> Snapshot:
        """The step's snapshot, read in the step's transaction (once: the executor may have read it).

        ``operator_key``: a call's, to judge whether its subscription's secret can be read.
        """
        if ctx.snapshot is None:
            ctx.snapshot = await load_snapshot(
                ctx.session,
                RunFacts.of(ctx.run),
                ctx.step,
                now=ctx.now,
                authority=ctx.authority,
                mail_configured=ctx.mail_configured,
                operator_key=operator_key,
            )
        return ctx.snapshot

    async def decide(self, ctx: StepContext) -> Effect:
        """The step's decision on what it reads now; a refusal raises :class:`StepFailure`."""
        decision = DECISIONS[self.name](await self.snapshot(ctx))
        if isinstance(decision, Refusal):
            raise StepFailure(decision.category, decision.message, permanent=decision.permanent)
        return decision

    async def perform(self, ctx: StepContext) -> Outcome:
        effect = await self.decide(ctx)
        try:
            return await self.write(ctx, effect)
        except EngineError as exc:  # an invariant the writer holds, such as the realm's last administrator
            raise StepFailure.from_engine_error(exc) from exc

    async def write(self, ctx: StepContext, effect: Effect) -> Outcome:
        """Write what was decided: the effect's rows and their audit events."""
        raise NotImplementedError

    async def undo(self, ctx: StepContext, attempt: StepAttempt) -> dict[str, Any]:
        """Reverse what ``attempt`` did; something already gone counts as done."""
        raise StepFailure("error", f"{self.name} cannot be undone", permanent=True)
