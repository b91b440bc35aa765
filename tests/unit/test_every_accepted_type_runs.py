"""Nothing validates that the engine cannot carry out: every step and trigger type of the contract
has its runtime here."""

from __future__ import annotations

from engine.runs import triggers
from engine.runs.steps import STEP_TYPES
from engine.workflows.definitions.validation import validate_definition
from engine.workflows.definitions.vocabulary import STEP_TYPES as CONTRACT_STEP_TYPES
from engine.workflows.definitions.vocabulary import TRIGGER_TYPES


def test_every_step_type_the_contract_accepts_has_a_runtime() -> None:
    assert set(CONTRACT_STEP_TYPES) == set(STEP_TYPES)
    for name, step_type in STEP_TYPES.items():
        assert step_type.name == name


def test_every_trigger_type_the_contract_accepts_has_a_runtime() -> None:
    # manual: runs.start_run; event: triggers.dispatch_outbox; schedule: schedules.schedule_pass.
    from engine.runs import schedules
    from engine.runs import service as runs

    runtimes = {
        "manual": runs.start_run,
        "event": triggers.dispatch_outbox,
        "schedule": schedules.schedule_pass,
    }
    assert set(TRIGGER_TYPES) == set(runtimes)
    assert all(callable(f) for f in runtimes.values())


def test_an_unknown_step_type_does_not_validate() -> None:
    definition = {
        "schema": "lifecycle.workflow/v1",
        "name": "x",
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "a", "type": "teleport"}, {"id": "done", "type": "end"}],
    }
    assert any(issue.path.startswith("/steps/0") for issue in validate_definition(definition))
