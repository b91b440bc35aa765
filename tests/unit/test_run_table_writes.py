"""The run tables are written only by engine/runs/runstore.py, and only it names the runs' channel.

Every other module asks runstore (pause, resume, make due, insert, move, notify): a rule about how
a run changes — a lease check, a paused run's kept due time — then lives in one place.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.platform.config import PROJECT_ROOT
from engine.runs import runstore

pytestmark = pytest.mark.unit

ENGINE = PROJECT_ROOT / "engine"
RUNSTORE = ENGINE / "runs" / "runstore.py"

# SQL text, and SQLAlchemy's statement builders, that change a run table.
WRITES = re.compile(
    r"(?i)\b(?:UPDATE|INSERT\s+INTO)\s+(?:workflow_runs|step_attempts)\b"
    r"|\b(?:insert|update)\(\s*(?:WorkflowRun|StepAttempt)\b"
)
CHANNEL = re.compile(r"""["']""" + re.escape(runstore.NOTIFY_CHANNEL) + r"""["']""")


def writes_in(path: Path) -> list[str]:
    return [
        f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if WRITES.search(line)
    ]


def test_only_runstore_writes_the_run_tables() -> None:
    found = [hit for path in sorted(ENGINE.rglob("*.py")) if path != RUNSTORE for hit in writes_in(path)]
    assert found == [], "run-table writes belong in engine/runs/runstore.py as verbs:\n" + "\n".join(found)


def test_the_check_sees_a_write_in_every_form() -> None:
    """The pattern is not blind: it finds runstore's own writes, and each form a module could use."""
    assert writes_in(RUNSTORE)
    for line in (
        'text("UPDATE workflow_runs SET due_at = NULL")',
        '"insert into step_attempts (id) values (:id)"',
        "update(WorkflowRun).where(WorkflowRun.id == run_id)",
        "insert(StepAttempt).values(rows)",
    ):
        assert WRITES.search(line), line
    for line in ("SELECT count(*) FROM workflow_runs", "update(WorkflowApproval)", "DELETE FROM approval_links"):
        assert not WRITES.search(line), line


def test_the_runs_channel_is_named_once() -> None:
    """Declared in runstore; everyone else notifies through ``runstore.notify_due`` or listens on
    ``runstore.NOTIFY_CHANNEL``."""
    spoken = [
        f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}"
        for root in (ENGINE, PROJECT_ROOT / "cockpit")
        for path in sorted(root.rglob("*.py"))
        if path != RUNSTORE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CHANNEL.search(line) and re.search(r"(?i)notify|listen", line)
    ]
    assert spoken == []
    assert len(CHANNEL.findall(RUNSTORE.read_text())) == 1
    assert CHANNEL.search("SELECT pg_notify('cockpit_runs_due', '')")
