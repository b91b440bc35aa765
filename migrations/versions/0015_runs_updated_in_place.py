"""Runs are updated in place, and the documents nobody filters on are not analyzed.

A run's row changes at every transition. With every page of ``workflow_runs`` full, the new version
of a row has to go to another page, and then every index of the table gets a new entry even when
no indexed column changed. Leaving a fifth of each page free lets most advances be HOT updates
(heap-only tuples): the new version stays on its page and the indexes are not touched.

Autoanalyze sorted every sampled JSON document of the hot tables — the attempts' input and result,
the runs' input and context, the audit events' details, the outbox's payloads — to build
statistics no query uses: no plan joins on those columns, and the one filter on them (a paused
run's ``context->>'paused_due_at'``) is an expression, which the column's statistics do not serve.
Their statistics target is 0.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Documents read whole, never filtered on: no statistics.
UNANALYZED = {
    "workflow_runs": ("input", "context"),
    "step_attempts": ("input", "result", "compensation_result"),
    "audit_events": ("details",),
    "outbox_events": ("payload",),
}


def upgrade() -> None:
    op.execute("ALTER TABLE workflow_runs SET (fillfactor = 80)")
    for table, columns in UNANALYZED.items():
        for column in columns:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS 0")


def downgrade() -> None:
    for table, columns in UNANALYZED.items():
        for column in columns:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STATISTICS -1")
    op.execute("ALTER TABLE workflow_runs RESET (fillfactor)")
