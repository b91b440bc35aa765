"""The commands over HTTP (``cockpit runs …``, ``approvals``, ``workflows``) and every command's
help start without the database layer, the web framework or the definition schema: they are
loaded only by the commands that use them."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "sqlmodel", "asyncpg", "litestar", "jsonschema", "procrastinate")

PROBE = """
import sys
from cockpit.cli import build_parser
args = build_parser().parse_args(sys.argv[1:])
print(",".join(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def loaded_by(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [name for name in done.stdout.strip().split(",") if name]


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv",
    [
        ("runs", "list"),
        ("approvals", "list"),
        ("workflows", "apply", "onboarding.json"),
        ("admin", "token", "--realm", "acme", "--email", "a@acme.example", "--audience", "admin"),
    ],
)
def test_parsing_a_command_loads_no_database_layer(argv: tuple[str, ...]) -> None:
    assert loaded_by(*argv) == []
