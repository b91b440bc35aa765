"""What changed between two definitions: step-aware (steps matched by id) and line by line.

``structured_diff`` answers "which triggers and steps changed, and how"; ``line_diff`` pairs the
lines of the two pretty-printed definitions for a side-by-side view.
"""

from __future__ import annotations

import difflib
from typing import Any

from engine.workflows import read_models
from engine.workflows.definitions.canonical import canonical_json, pretty_json

_ABSENT = object()


def _key(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return repr(value)


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def member_changes(old: Any, new: Any, path: str = "") -> list[read_models.MemberChange]:
    """Changed members as JSON pointers relative to the compared objects.

    Objects are compared member by member; lists and other values as a whole. Each change has a
    ``path``, its ``change`` (added, removed or changed), ``old`` and ``new`` (None for an added
    or removed member).
    """
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[read_models.MemberChange] = []
        for name in sorted(set(old) | set(new), key=str):
            before = old.get(name, _ABSENT)
            after = new.get(name, _ABSENT)
            where = f"{path}/{_escape(str(name))}"
            if before is _ABSENT:
                changes.append(read_models.MemberChange(path=where, change="added", old=None, new=after))
            elif after is _ABSENT:
                changes.append(read_models.MemberChange(path=where, change="removed", old=before, new=None))
            else:
                changes.extend(member_changes(before, after, where))
        return changes
    if _key(old) == _key(new):
        return []
    return [read_models.MemberChange(path=path, change="changed", old=old, new=new)]


def _items(definition: Any, member: str) -> list[Any]:
    if not isinstance(definition, dict):
        return []
    value = definition.get(member)
    return list(value) if isinstance(value, list) else []


def _step_keys(steps: list[Any]) -> list[str]:
    """A step's id, or ``#<index>`` when it has none or repeats an earlier one."""
    keys: list[str] = []
    seen: set[str] = set()
    for index, step in enumerate(steps):
        step_id = step.get("id") if isinstance(step, dict) else None
        key = step_id if isinstance(step_id, str) and step_id not in seen else f"#{index}"
        seen.add(key)
        keys.append(key)
    return keys


def _diff_triggers(old: list[Any], new: list[Any]) -> read_models.TriggerChanges:
    """Identical triggers pair first; the rest pair by type, in order; what is left was added or removed."""
    unmatched_old = list(range(len(old)))
    unchanged: list[read_models.IndexPair] = []
    rest_new: list[int] = []
    for j, trigger in enumerate(new):
        match = next((i for i in unmatched_old if _key(old[i]) == _key(trigger)), None)
        if match is None:
            rest_new.append(j)
        else:
            unmatched_old.remove(match)
            unchanged.append(read_models.IndexPair(old_index=match, new_index=j))

    def kind(trigger: Any) -> Any:
        return trigger.get("type") if isinstance(trigger, dict) else None

    changed: list[read_models.ChangedTrigger] = []
    added: list[read_models.TriggerAtIndex] = []
    for j in rest_new:
        match = next((i for i in unmatched_old if kind(old[i]) == kind(new[j])), None)
        if match is None:
            added.append(read_models.TriggerAtIndex(index=j, trigger=new[j]))
        else:
            unmatched_old.remove(match)
            changed.append(
                read_models.ChangedTrigger(
                    old_index=match, new_index=j, type=kind(new[j]), changes=member_changes(old[match], new[j])
                )
            )
    removed = [read_models.TriggerAtIndex(index=i, trigger=old[i]) for i in unmatched_old]
    return read_models.TriggerChanges(added=added, removed=removed, changed=changed, unchanged=unchanged)


def _removed_entry(gone: read_models.StepAtIndex) -> read_models.StepInOrder:
    return read_models.StepInOrder(id=gone.id, status="removed", old_index=gone.index, new_index=None, moved=False)


def _diff_steps(old: list[Any], new: list[Any]) -> read_models.StepChanges:
    old_keys, new_keys = _step_keys(old), _step_keys(new)
    old_at = {key: i for i, key in enumerate(old_keys)}
    new_at = {key: j for j, key in enumerate(new_keys)}
    common = [key for key in new_keys if key in old_at]

    # common steps outside the longest run of unchanged order were moved
    old_order = [key for key in old_keys if key in new_at]
    matcher = difflib.SequenceMatcher(None, old_order, common, autojunk=False)
    in_place: set[str] = set()
    for block in matcher.get_matching_blocks():
        in_place.update(old_order[block.a : block.a + block.size])

    added = [
        read_models.StepAtIndex(id=key, index=j, step=new[j]) for j, key in enumerate(new_keys) if key not in old_at
    ]
    removed = [
        read_models.StepAtIndex(id=key, index=i, step=old[i]) for i, key in enumerate(old_keys) if key not in new_at
    ]
    changed: list[read_models.ChangedStep] = []
    moved: list[read_models.MovedStep] = []
    unchanged: list[str] = []
    status: dict[str, str] = {}
    for key in common:
        i, j = old_at[key], new_at[key]
        changes = member_changes(old[i], new[j])
        if changes:
            changed.append(read_models.ChangedStep(id=key, old_index=i, new_index=j, changes=changes))
        if key not in in_place:
            moved.append(read_models.MovedStep(id=key, old_index=i, new_index=j))
        if not changes and key in in_place:
            unchanged.append(key)
        status[key] = "changed" if changes else ("moved" if key not in in_place else "unchanged")

    # one list in display order: the new order, with each removed step where it used to be
    order: list[read_models.StepInOrder] = []
    pending_removed = list(removed)
    for j, key in enumerate(new_keys):
        if key in old_at:
            while pending_removed and pending_removed[0].index < old_at[key]:
                gone = pending_removed.pop(0)
                order.append(_removed_entry(gone))
            moved_flag = key not in in_place
            order.append(
                read_models.StepInOrder(
                    id=key, status=status[key], old_index=old_at[key], new_index=j, moved=moved_flag
                )
            )
        else:
            order.append(read_models.StepInOrder(id=key, status="added", old_index=None, new_index=j, moved=False))
    for gone in pending_removed:
        order.append(_removed_entry(gone))

    return read_models.StepChanges(
        added=added, removed=removed, changed=changed, moved=moved, unchanged=unchanged, order=order
    )


def _member(definition: Any, name: str) -> Any:
    return definition.get(name) if isinstance(definition, dict) else None


def structured_diff(old: Any, new: Any) -> read_models.StructuredDiff:
    """Step-aware differences between two definitions.

    - ``triggers``: ``added`` / ``removed`` (with index and trigger), ``changed`` (paired by type:
      old and new index, member changes), ``unchanged`` (index pairs).
    - ``steps`` (matched by id): ``added`` / ``removed`` (id, index, step), ``changed`` (id, old and new
      index, member changes such as ``{"path": "/expires_in", "change": "changed", "old": "72h",
      "new": "48h"}``), ``moved`` (id, old and new index, for steps whose relative order changed),
      ``unchanged`` (ids), and ``order``: every step once, in the new order with removed steps
      where they were, each with its status (added, removed, changed, moved, unchanged).
    - ``retry`` and ``schema_version``: None when equal, otherwise old, new and the member changes.
    - ``changed``: whether anything differs at all.
    """
    triggers = _diff_triggers(_items(old, "triggers"), _items(new, "triggers"))
    steps = _diff_steps(_items(old, "steps"), _items(new, "steps"))
    return read_models.StructuredDiff(
        changed=_key(old) != _key(new),
        triggers=triggers,
        steps=steps,
        retry=_top_level_change(_member(old, "retry"), _member(new, "retry")),
        schema_version=_top_level_change(_member(old, "schema_version"), _member(new, "schema_version")),
    )


def _top_level_change(before: Any, after: Any) -> read_models.TopLevelChange | None:
    """None when equal; otherwise old, new and the member changes."""
    if _key(before) == _key(after):
        return None
    return read_models.TopLevelChange(old=before, new=after, changes=member_changes(before, after))


def line_diff(old: Any, new: Any) -> list[read_models.LineRun]:
    """The two pretty-printed definitions as runs of lines, for a side-by-side view.

    Each run has its ``op`` (equal, insert, delete or replace), ``old_start``, ``new_start``,
    ``old_lines`` and ``new_lines``; line numbers start at 1 (for an empty side, the start is where the
    lines of the other side would go).
    """
    a = pretty_json(old).splitlines()
    b = pretty_json(new).splitlines()
    return [
        read_models.LineRun(op=op, old_start=i1 + 1, new_start=j1 + 1, old_lines=a[i1:i2], new_lines=b[j1:j2])
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    ]
