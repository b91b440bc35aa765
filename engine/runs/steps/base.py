"""The shape every step type has: one small module per type (engine/runs/steps/<type>.py).

A step type says what kind of work it is, performs its effect inside the run's transaction
(internal effects), and says how it is compensated. It never writes the engine's own tables:
engine/runs/runstore.py does that around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor
from engine.directory.authz import Authority
from engine.platform.errors import EngineError
from engine.runs.models import StepAttempt, WorkflowRun
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


class StepType:
    name: ClassVar[str]
    kind: ClassVar[str] = INTERNAL
    retried: ClassVar[bool] = True  # waits and approvals are never retried

    async def perform(self, ctx: StepContext) -> Outcome:
        raise NotImplementedError

    async def undo(self, ctx: StepContext, attempt: StepAttempt) -> dict[str, Any]:
        """Reverse what ``attempt`` did; something already gone counts as done."""
        raise StepFailure("error", f"{self.name} cannot be undone", permanent=True)
