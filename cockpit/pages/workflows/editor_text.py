"""The editor's text: parsing it, and placing each issue on the line of the value it is about.

:func:`pointer_lines` walks the text and notes where each value starts, so an issue with a JSON
path (as the API reports it) is shown on its line; :func:`parse_text` turns a text that is not
JSON into one issue at the line and column of the fault.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cockpit.pages.workflows import builder
from engine.platform.errors import Issue
from engine.workflows.definitions import MAX_DEFINITION_BYTES

MAX_TEXT_BYTES = 4 * MAX_DEFINITION_BYTES  # room for indentation; the service enforces the real limit


# --- From a JSON pointer to a line of the text ----------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def pointer_lines(text: str) -> dict[str, int]:
    """Where each value of a JSON text begins: JSON pointer → line (1-based).

    An object member is placed on the line of its key, an array item on the line where the item
    starts, the whole document on its first line. A repeated key keeps the last occurrence, as
    ``json.loads`` does. Meant for text that parses; for anything else the answer is partial.
    The walk keeps its own stack, so nesting depth is bounded only by what ``json.loads`` accepts.
    """
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(pos: int) -> int:
        return bisect.bisect_right(line_starts, pos)

    def ws(pos: int) -> int:
        match = _WHITESPACE.match(text, pos)
        return match.end() if match else pos

    out: dict[str, int] = {}

    def member(container: str, pos: int) -> tuple[str, int]:
        """Read ``"key" :`` at ``pos``; note the member's line; return its pointer and where its value starts."""
        if text[pos] != '"':
            raise ValueError("expected a key")
        key, end = _DECODER.raw_decode(text, pos)
        child = f"{container}/{_escape(key)}"
        if child in out:  # a repeated key: the last one wins, and what the first one held is gone
            for stale in [p for p in out if p.startswith(child + "/")]:
                del out[stale]
        out[child] = line(pos)
        colon = ws(end)
        if text[colon] != ":":
            raise ValueError("expected ':'")
        return child, ws(colon + 1)

    # Each frame: [kind ("{" or "["), pointer of the container, index of the current item].
    stack: list[list[Any]] = []
    try:
        pos = ws(0)
        pointer = ""
        out[pointer] = line(pos)
        while True:
            # A value starts at ``pos``; its pointer is ``pointer``.
            char = text[pos]
            if char == "{":
                inner = ws(pos + 1)
                if text[inner] == "}":
                    pos = inner + 1
                else:
                    stack.append(["{", pointer, 0])
                    pointer, pos = member(pointer, inner)
                    continue
            elif char == "[":
                inner = ws(pos + 1)
                if text[inner] == "]":
                    pos = inner + 1
                else:
                    stack.append(["[", pointer, 0])
                    pointer = f"{pointer}/0"
                    out[pointer] = line(inner)
                    pos = inner
                    continue
            else:
                _, pos = _DECODER.raw_decode(text, pos)
            # The value ended: close containers until one has a next item.
            while True:
                pos = ws(pos)
                if not stack:
                    return out
                frame = stack[-1]
                if text[pos] == ",":
                    nxt = ws(pos + 1)
                    if frame[0] == "{":
                        pointer, pos = member(frame[1], nxt)
                    else:
                        frame[2] += 1
                        pointer = f"{frame[1]}/{frame[2]}"
                        out[pointer] = line(nxt)
                        pos = nxt
                    break
                if text[pos] not in "}]":
                    raise ValueError("expected a separator or the end of a container")
                stack.pop()
                pos += 1
    except (IndexError, ValueError):
        return out


def line_of(lines: Mapping[str, int], pointer: str) -> int | None:
    """The line of ``pointer``, or of its nearest ancestor present in the text (a missing member)."""
    while True:
        if pointer in lines:
            return lines[pointer]
        if not pointer:
            return None
        pointer = pointer.rsplit("/", 1)[0]


# --- The definition as text -----------------------------------------------------------------------


@dataclass(frozen=True)
class EditorIssue:
    """One issue as the API reports it (``path`` under ``/definition``), placed on a line of the text."""

    path: str
    code: str
    message: str
    line: int | None = None
    column: int | None = None
    field: str | None = None  # the id of the builder control it is about (its field, or its step)

    @property
    def step_label(self) -> str | None:
        """``definition.steps[2]`` for an issue about a step (as the API's 403 detail names it)."""
        match = re.match(r"^/definition/steps/(\d+)", self.path)
        return f"definition.steps[{match.group(1)}]" if match else None


@dataclass
class ParsedText:
    text: str
    value: Any = None
    parsed: bool = False
    issues: tuple[EditorIssue, ...] = ()


def trailing_comma(text: str, pos: int) -> tuple[int, int] | None:
    """Line and column of a comma right before a closing ``]`` or ``}`` at ``pos`` (the fault JSON reports).

    The decoder reports the fault where it expected the next item, which is the line of the
    closing bracket; the mistake is the comma, often on the line before.
    """
    if pos >= len(text) or text[pos] not in "]}":
        return None
    before = pos - 1
    while before >= 0 and text[before] in " \t\r\n":
        before -= 1
    if before < 0 or text[before] != ",":
        return None
    line = text.count("\n", 0, before) + 1
    column = before - (text.rfind("\n", 0, before) + 1) + 1
    return line, column


def parse_text(text: str) -> ParsedText:
    """Parse the editor's text; a text that is not JSON gives one issue at the line and column of the fault."""
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        issue = EditorIssue(
            "/definition",
            "too_large",
            f"The text is over {MAX_TEXT_BYTES // 1024} KiB; a definition's canonical JSON has at most "
            f"{MAX_DEFINITION_BYTES // 1024} KiB.",
            line=1,
        )
        return ParsedText(text, issues=(issue,))
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        comma = trailing_comma(text, exc.pos)
        if comma is not None:
            line, column = comma
            issue = EditorIssue(
                "/definition",
                "invalid_json",
                f"This is not valid JSON: a trailing comma before the end of a list or object "
                f"(line {line}, column {column}).",
                line=line,
                column=column,
            )
        else:
            issue = EditorIssue(
                "/definition",
                "invalid_json",
                f"This is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).",
                line=exc.lineno,
                column=exc.colno,
            )
        return ParsedText(text, issues=(issue,))
    except RecursionError:
        issue = EditorIssue("/definition", "too_deep", "Values are nested too deeply to read.", line=1)
        return ParsedText(text, issues=(issue,))
    except ValueError as exc:  # e.g. an integer with thousands of digits
        issue = EditorIssue("/definition", "invalid_json", f"This JSON cannot be read: {exc}.", line=1)
        return ParsedText(text, issues=(issue,))
    return ParsedText(text, value=value, parsed=True)


def place(issues: Iterable[Issue], text: str, *, prefix: str = "/definition") -> tuple[EditorIssue, ...]:
    """Issues under ``prefix`` placed on the lines of ``text``; other issues keep no line."""
    lines = pointer_lines(text)
    try:
        fields = builder.field_pointers(json.loads(text))
    except (ValueError, RecursionError):
        fields = set()
    placed: list[EditorIssue] = []
    for issue in issues:
        line = None
        if issue.path == prefix or issue.path.startswith(prefix + "/"):
            line = line_of(lines, issue.path[len(prefix) :])
        field = builder.nearest_field(fields, issue.path, prefix)
        placed.append(EditorIssue(issue.path, issue.code, issue.message, line=line, field=field))
    return tuple(placed)
