"""Workflow health badges for lists, kept for a few seconds in the web process.

A workflow's health reads its last 500 runs and their last 1,000 attempts (``engine.runs.diagnostics``):
a few milliseconds for one workflow, but the workflows list and the realm home show up to 50
and 100 of them, which at a million runs costs hundreds of milliseconds. So lists show a health
at most ``TTL_S`` seconds old, computed in one statement for every workflow missing from this
process's cache. A workflow's diagnostics page always computes afresh, and refreshes the entry;
marking a run resolved forgets the realm's entries.
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor
from engine.runs import attention, diagnostics
from engine.runs.diagnostics import Health
from engine.runs.models import RunResolution

TTL_S = 15.0
MAX_ENTRIES = 20_000

_entries: dict[tuple[str, str], tuple[float, Health]] = {}


async def health_of(session: AsyncSession, realm_id: str, workflow_ids: list[str]) -> dict[str, Health]:
    """The health of each workflow, from the cache when younger than ``TTL_S`` seconds."""
    now = time.monotonic()
    found: dict[str, Health] = {}
    missing: list[str] = []
    for workflow_id in workflow_ids:
        entry = _entries.get((realm_id, workflow_id))
        if entry is not None and now - entry[0] < TTL_S:
            found[workflow_id] = entry[1]
        else:
            missing.append(workflow_id)
    if missing:
        computed = await diagnostics.health_of(session, realm_id, missing)
        for workflow_id, health in computed.items():
            remember(realm_id, workflow_id, health, now)
        found |= computed
    return found


def remember(realm_id: str, workflow_id: str, health: Health, at: float | None = None) -> None:
    if len(_entries) >= MAX_ENTRIES:
        cutoff = time.monotonic() - TTL_S
        for key in [k for k, (t, _) in _entries.items() if t < cutoff]:
            del _entries[key]
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
    _entries[(realm_id, workflow_id)] = (time.monotonic() if at is None else at, health)


async def resolve_run(session: AsyncSession, actor: Actor, run_id: str, *, note: str) -> RunResolution:
    """Mark a run resolved (``engine.runs.attention.resolve_run``) and forget its realm's health
    badges here: a resolved run no longer makes its workflow need attention."""
    resolution = await attention.resolve_run(session, actor, run_id, note=note)
    forget(actor.realm_id)
    return resolution


def forget(realm_id: str) -> None:
    for key in [k for k in _entries if k[0] == realm_id]:
        del _entries[key]
