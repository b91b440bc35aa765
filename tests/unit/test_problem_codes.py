"""Every problem ``code`` the service can answer is in the document's enum (cockpit.problems.PROBLEM_CODES).

A client generated from the document parses ``code`` into an enum and refuses a value it does not
know, so a code missing from the list breaks every such client the first time it is answered.
"""

from __future__ import annotations

import re

from cockpit.problems import DEFAULT_CODES, PROBLEM_CODES
from engine.platform.config import PROJECT_ROOT

# ``code="x"`` (an error raised with a precise code), ``code = "x"`` at class level (an error
# kind's code), ``ProblemError(412, "x"`` and ``Problem(422, "x"`` (answers made by the web layer).
PATTERNS = [
    re.compile(r'\bcode="([a-z_]+)"'),
    re.compile(r'^    code = "([a-z_]+)"$', re.M),
    re.compile(r'\bProblem(?:Error)?\(\s*\d{3},\s*"([a-z_]+)"'),
]


def codes_in_source() -> dict[str, str]:
    found: dict[str, str] = {}
    for folder in ("engine", "cockpit"):
        for path in sorted((PROJECT_ROOT / folder).rglob("*.py")):
            text = path.read_text()
            for pattern in PATTERNS:
                for code in pattern.findall(text):
                    found.setdefault(code, str(path.relative_to(PROJECT_ROOT)))
    return found


def test_every_code_in_the_source_is_declared() -> None:
    found = codes_in_source()
    assert {"precondition_failed", "runs_in_flight", "target_outranks_actor"} <= set(found)  # the scan sees them
    missing = {code: where for code, where in found.items() if code not in PROBLEM_CODES}
    assert missing == {}


def test_every_default_code_is_declared_once() -> None:
    assert set(DEFAULT_CODES.values()) <= set(PROBLEM_CODES)
    assert len(PROBLEM_CODES) == len(set(PROBLEM_CODES))
