"""Run, attempt and compensation states, declared once, with the transitions allowed between them.

Every transition of a run is a verb in engine/runs/runstore/moves.py that updates
``WHERE id = :id AND state = ANY(:allowed_from)`` and raises :class:`TransitionRefused` when
nothing matched.
"""

from __future__ import annotations

from typing import Final

# Run states (seed 000 "Concepts").
PENDING: Final = "pending"
RUNNING: Final = "running"
WAITING: Final = "waiting"
AWAITING_APPROVAL: Final = "awaiting_approval"
COMPENSATING: Final = "compensating"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
COMPENSATED: Final = "compensated"
COMPENSATION_FAILED: Final = "compensation_failed"
CANCELLED: Final = "cancelled"

RUN_STATES: Final = (
    PENDING,
    RUNNING,
    WAITING,
    AWAITING_APPROVAL,
    COMPENSATING,
    SUCCEEDED,
    FAILED,
    COMPENSATED,
    COMPENSATION_FAILED,
    CANCELLED,
)
FINISHED: Final = frozenset({SUCCEEDED, FAILED, COMPENSATED, COMPENSATION_FAILED, CANCELLED})
IN_FLIGHT: Final = frozenset(RUN_STATES) - FINISHED
# States in which forward progress happens (paused while the workflow is disabled).
FORWARD: Final = frozenset({PENDING, RUNNING, WAITING, AWAITING_APPROVAL})

# run state -> the states it may move to
RUN_TRANSITIONS: Final[dict[str, frozenset[str]]] = {
    # A pending run starts and makes its first step in one transaction: the batched executor
    # (engine/runs/fastpath.py) writes that step's outcome directly — running when the run goes on,
    # compensating when the step was refused, and succeeded when the first step is also the last
    # one (or an ``end``), so a one-step run finishes in the commit that starts it.
    PENDING: frozenset({RUNNING, SUCCEEDED, COMPENSATING}),
    RUNNING: frozenset({RUNNING, WAITING, AWAITING_APPROVAL, SUCCEEDED, COMPENSATING}),
    WAITING: frozenset({RUNNING, COMPENSATING}),
    AWAITING_APPROVAL: frozenset({RUNNING, COMPENSATING}),
    COMPENSATING: frozenset({COMPENSATING, FAILED, COMPENSATED, COMPENSATION_FAILED, CANCELLED}),
}

# Every edge of the table, as (from, to) pairs: the batched statement's advance only makes these
# (engine/runs/runstore/batched.py, ``FAST_TRANSITIONS``, generated from this list).
RUN_EDGES: Final = tuple(sorted((state, target) for state, targets in RUN_TRANSITIONS.items() for target in targets))


def move_allowed(current: str, target: str) -> bool:
    """May a run in ``current`` move to ``target``?"""
    return target in RUN_TRANSITIONS.get(current, frozenset())


def allowed_from(target: str) -> list[str]:
    """The states a run may be in to move to ``target``."""
    return sorted(state for state, targets in RUN_TRANSITIONS.items() if target in targets)


# Step attempt states.
ATTEMPT_STARTED: Final = "started"
ATTEMPT_SUCCEEDED: Final = "succeeded"
ATTEMPT_FAILED: Final = "failed"

# Compensation strategies (fixed when the step succeeds) and compensation states.
STRATEGY_NONE: Final = "none"
STRATEGY_UNDO: Final = "undo"
STRATEGY_NOTIFY_ENDPOINT: Final = "notify_endpoint"
STRATEGY_IMPOSSIBLE: Final = "impossible"

COMP_PENDING: Final = "pending"
COMP_DONE: Final = "done"
COMP_NOT_NEEDED: Final = "not_needed"
COMP_IMPOSSIBLE: Final = "impossible"
COMP_FAILED: Final = "failed"


class TransitionRefused(Exception):
    """The row was not in a state that allows this transition (or the lease is not ours)."""
