"""Comparing two revisions: which one to compare with, and the rows of the side-by-side diff."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.workflows.models import Workflow
from engine.workflows.read_models import LineRun

DIFF_CONTEXT = 3


def side_by_side(runs: Sequence[LineRun], context: int = DIFF_CONTEXT) -> list[dict[str, Any]]:
    """Rows of a two-column diff: unchanged lines folded beyond ``context`` lines of a change.

    Each row is ``{"kind": "equal"|"insert"|"delete"|"replace"|"fold", "old_no", "old", "new_no",
    "new"}``; a fold row carries ``count``, the number of unchanged lines it hides.
    """
    rows: list[dict[str, Any]] = []
    for position, run in enumerate(runs):
        op, old, new = run.op, list(run.old_lines), list(run.new_lines)
        o, n = run.old_start, run.new_start
        if op == "equal":
            keep_head = context if position > 0 else 0
            keep_tail = context if position < len(runs) - 1 else 0
            indexes = list(range(len(old)))
            if len(old) > keep_head + keep_tail + 1:
                shown = indexes[:keep_head]
                tail = indexes[len(old) - keep_tail :] if keep_tail else []
                for i in shown:
                    rows.append({"kind": "equal", "old_no": o + i, "old": old[i], "new_no": n + i, "new": new[i]})
                rows.append({"kind": "fold", "count": len(old) - len(shown) - len(tail)})
                for i in tail:
                    rows.append({"kind": "equal", "old_no": o + i, "old": old[i], "new_no": n + i, "new": new[i]})
            else:
                for i in indexes:
                    rows.append({"kind": "equal", "old_no": o + i, "old": old[i], "new_no": n + i, "new": new[i]})
            continue
        for i in range(max(len(old), len(new))):
            rows.append(
                {
                    "kind": op,
                    "old_no": o + i if i < len(old) else None,
                    "old": old[i] if i < len(old) else None,
                    "new_no": n + i if i < len(new) else None,
                    "new": new[i] if i < len(new) else None,
                }
            )
    return rows


def default_against(workflow: Workflow, number: int) -> int | None:
    """The published revision, or the one before when this is the published one (None for the first)."""
    if workflow.published_revision is not None and workflow.published_revision != number:
        return workflow.published_revision
    return number - 1 if number > 1 else None
