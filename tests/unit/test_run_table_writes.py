"""The run tables are written only by the modules of engine/runs/runstore/, and only
engine/runs/runstore/scheduling.py names the runs' channel.

Every other module asks runstore (pause, resume, make due, insert, move, notify): a rule about how
a run changes — a lease check, a paused run's kept due time — then lives in one place.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.platform.config import PROJECT_ROOT
from engine.runs.runstore import scheduling

pytestmark = pytest.mark.unit

ENGINE = PROJECT_ROOT / "engine"
RUNSTORE = ENGINE / "runs" / "runstore"
# The modules that write the run tables, each for its own part (engine/runs/runstore/__init__.py).
WRITERS = tuple(RUNSTORE / name for name in ("leases.py", "moves.py", "scheduling.py", "batched.py"))
CHANNEL_HOME = RUNSTORE / "scheduling.py"

# SQL text, and SQLAlchemy's statement builders, that change a run table.
WRITES = re.compile(
    r"(?i)\b(?:UPDATE|INSERT\s+INTO)\s+(?:workflow_runs|step_attempts)\b"
    r"|\b(?:insert|update)\(\s*(?:WorkflowRun|StepAttempt)\b"
)
CHANNEL = re.compile(r"""["']""" + re.escape(scheduling.NOTIFY_CHANNEL) + r"""["']""")


def writes_in(path: Path) -> list[str]:
    return [
        f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if WRITES.search(line)
    ]


def test_only_runstore_writes_the_run_tables() -> None:
    found = [hit for path in sorted(ENGINE.rglob("*.py")) if path not in WRITERS for hit in writes_in(path)]
    assert found == [], "run-table writes belong in engine/runs/runstore/ as verbs:\n" + "\n".join(found)


def test_the_writers_are_the_modules_of_runstore() -> None:
    """A module added to runstore is named here, as a writer or not: the rule names its homes."""
    assert sorted(RUNSTORE.glob("*.py")) == sorted([*WRITERS, RUNSTORE / "__init__.py"])
    assert writes_in(RUNSTORE / "__init__.py") == []


def test_the_check_sees_a_write_in_every_form() -> None:
    """The pattern is not blind: it finds each writer's own writes, and each form a module could use."""
    for path in WRITERS:
        assert writes_in(path), path
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
    """Declared in runstore/scheduling.py; everyone else notifies through ``scheduling.notify_due`` or
    listens on ``scheduling.NOTIFY_CHANNEL``."""
    spoken = [
        f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}"
        for root in (ENGINE, PROJECT_ROOT / "cockpit")
        for path in sorted(root.rglob("*.py"))
        if path != CHANNEL_HOME
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CHANNEL.search(line) and re.search(r"(?i)notify|listen", line)
    ]
    assert spoken == []
    assert len(CHANNEL.findall(CHANNEL_HOME.read_text())) == 1
    assert CHANNEL.search("SELECT pg_notify('cockpit_runs_due', '')")
