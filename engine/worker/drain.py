"""Draining due runs: pass after pass while there is work, then wait for a wake-up."""

from __future__ import annotations

from typing import NamedTuple

from engine.runs.runner import Runner

MAX_DRAIN_PASSES = 100  # passes in one go; the caller starts another go when work is left


class Drained(NamedTuple):
    """What one go of passes did."""

    transitions: int  # transitions made
    work_left: bool  # stopped at the pass limit, with work left


async def drain(runner: Runner, *, max_passes: int = MAX_DRAIN_PASSES) -> Drained:
    """Passes back to back while there is due work: (transitions made, stopped with work left).

    The next pass starts as soon as the last one ends, while the last claim filled the batch or
    the pass made progress (runs it handed back after 25 transitions, and runs that became due
    meanwhile, are due now). It stops at the first pass that claims nothing to do: an idle worker
    waits for a notification or the periodic pass, it never polls.
    """
    transitions = 0
    for _ in range(max_passes):
        made = await runner.run_pass()
        transitions += made
        if not made and not runner.last_claim_full:
            return Drained(transitions, work_left=False)
    return Drained(transitions, work_left=True)
