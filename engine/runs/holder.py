"""Who advances runs: a worker's sessions, its id (the lease owner), its settings and its clock.

The modules of the runner (engine/runs/runner.py, transition.py, endpoint_calls.py,
compensation.py, outcomes.py) are functions of a ``Holder``; the ``Runner`` is one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from engine.directory.audit import Actor
from engine.endpoints.calls import EndpointSettings
from engine.platform.clock import Clock
from engine.runs.models import WorkflowRun

CATEGORY = "workflow"


@dataclass
class RunnerSettings:
    lease: timedelta = timedelta(seconds=60)
    batch_size: int = 50
    tenant_share: int = 10
    # Runs whose transitions commit together (group commit; 1: each run commits alone).
    group_commit: int = 50
    # Internal steps that can only succeed in one statement each (engine/runs/fastpath.py); off, every
    # transition takes the ordinary path.
    fast_path: bool = True
    # Endpoint calls (call_webhook): the operator key, private egress, the timeout ceiling.
    endpoints: EndpointSettings = field(default_factory=EndpointSettings)
    # Endpoint calls of one round made at once (each outside any transaction).
    call_concurrency: int = 16
    # Notices are mailed after commit (engine/notices.py); without mail they are recorded not_configured.
    mail_configured: bool = False


class Holder(Protocol):
    """The holder of the runs' leases (a ``Runner``)."""

    sessions: async_sessionmaker[AsyncSession]
    worker_id: str
    settings: RunnerSettings
    clock: Clock


def run_actor(run: WorkflowRun) -> Actor:
    """The accountable publisher, with the run id as request and correlation id."""
    return Actor(type="user", id=run.publisher_id, realm_id=run.realm_id, request_id=run.id, correlation_id=run.id)
