"""Tests stand alone: no module imports a test module or a conftest, and nothing imports from tests/.

What tests share lives in ``testing/`` (and, for the browser tests only, in the helper modules of
``e2e/``: ``helpers``, ``demo``, ``pages``, ``signin``); fixtures live in a ``conftest.py``, which
pytest finds by itself. A test module imported by another runs its imports, fixtures and module
state twice over and ties the two files together, so neither can be moved, split or run alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.platform.config import PROJECT_ROOT

pytestmark = pytest.mark.unit

SCANNED = ("tests", "e2e", "testing", "bench")
SKIPPED = ("vendor", "generated_client", "__pycache__")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> list[tuple[int, list[str]]]:
    """Every import of the file, at any depth: its line and the modules it may name, relative
    imports resolved (``from tests.integration import test_runner`` may name a module too)."""
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, [alias.name]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, [module, *(f"{module}.{alias.name}" for alias in node.names)]))
    return found


def enclosing_test_module(name: str) -> str | None:
    """The test module or conftest of tests/ or e2e/ that the dotted ``name`` is or is in, if any."""
    parts = name.split(".")
    if parts[0] not in ("tests", "e2e"):
        return None
    for i, part in enumerate(parts[1:], start=2):
        if part.startswith("test_") or part == "conftest":
            return ".".join(parts[:i])
    return None


def offence(names: list[str], top: str) -> str | None:
    """Why an import naming ``names`` from a module under ``top`` is refused, if it is."""
    if tested := next(filter(None, map(enclosing_test_module, names)), None):
        return f"imports the test module {tested}"
    first = names[0].split(".")[0]
    if first == "tests":
        return f"imports {names[0]}: shared helpers live in testing/"
    if first == "e2e" and top != "e2e":
        return f"imports {names[0]}: only the browser tests use e2e/"
    return None


def offences(root: Path) -> list[str]:
    """Every import under ``root`` of a test module or a conftest, of anything in ``tests``, or of
    ``e2e`` from outside it."""
    found: list[str] = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            if any(part in SKIPPED for part in path.relative_to(root).parts):
                continue
            for line, names in imports(path, root):
                if why := offence(names, top):
                    found.append(f"{path.relative_to(root)}:{line} {why}")
    return sorted(found)


def test_no_module_imports_a_test_module_or_a_helper_under_tests() -> None:
    assert offences(PROJECT_ROOT) == []


def write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_check_finds_every_kind_of_import_of_a_test_module(tmp_path: Path) -> None:
    for package in ("tests", "tests/integration", "e2e", "testing", "bench"):
        write(tmp_path, f"{package}/__init__.py")
    write(tmp_path, "tests/integration/test_a.py", "def helper() -> None: ...\n")
    write(tmp_path, "tests/integration/test_fine.py", "from testing.runs import drain\nimport tests_data\n")
    write(tmp_path, "e2e/helpers.py", "")
    write(tmp_path, "e2e/test_fine.py", "from e2e.helpers import x\nfrom e2e import pages\n")
    assert offences(tmp_path) == []

    write(tmp_path, "tests/integration/test_b.py", "from tests.integration.test_a import helper\n")
    write(tmp_path, "tests/integration/test_c.py", "def f() -> None:\n    import tests.integration.test_a\n")
    write(tmp_path, "tests/integration/test_d.py", "from .test_a import helper\n")
    write(tmp_path, "tests/integration/test_e.py", "from tests.integration import test_a\n")
    write(tmp_path, "tests/integration/test_f.py", "from tests.factories import make_realm\n")
    write(tmp_path, "e2e/test_g.py", "from e2e.conftest import LiveServer\n")
    write(tmp_path, "testing/shared.py", "from e2e.helpers import x\n")
    write(tmp_path, "bench/run.py", "from . import engine\nfrom tests.integration.test_a import helper\n")
    assert offences(tmp_path) == [
        "bench/run.py:2 imports the test module tests.integration.test_a",
        "e2e/test_g.py:1 imports the test module e2e.conftest",
        "testing/shared.py:1 imports e2e.helpers: only the browser tests use e2e/",
        "tests/integration/test_b.py:1 imports the test module tests.integration.test_a",
        "tests/integration/test_c.py:2 imports the test module tests.integration.test_a",
        "tests/integration/test_d.py:1 imports the test module tests.integration.test_a",
        "tests/integration/test_e.py:1 imports the test module tests.integration.test_a",
        "tests/integration/test_f.py:1 imports tests.factories: shared helpers live in testing/",
    ]
