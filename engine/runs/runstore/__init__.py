"""All SQL that writes the engine's run tables: claims, leases, transitions, pauses and wake-ups.

The runner (engine/runs/runner.py, transition.py, endpoint_calls.py, compensation.py, outcomes.py),
the run services, approvals and the workflow switch call these verbs and never write run-table SQL
themselves (tests/unit/test_run_table_writes.py). Every verb that
changes a run checks, in its WHERE clause, that this worker still holds the run's lease, so a
worker that lost its lease cannot commit anything.

- ``leases``: claiming due runs, locking one under its lease, handing leases back;
- ``moves``: a held run's transitions and its step attempts;
- ``scheduling``: when a run is due, set from outside the runner (start, cancel, retry now, pause,
  resume, an approval decided), and the workers' wake-up (``NOTIFY_CHANNEL``);
- ``batched``: the fast path's statements (engine/runs/fastpath.py), for asyncpg.
"""
