"""Pages read through the engine: no module under ``cockpit/pages`` builds or runs a query.

What a page shows is read by a function of the engine layer that owns the data (for the notices
page, ``engine/runs/notices.py::names_for_notices``); a page that imports SQLAlchemy's or
SQLModel's query constructs, or runs a statement itself, has a second read model the engine does
not know about. The session's types (``sqlalchemy.ext.asyncio``) may still be named.
"""

from __future__ import annotations

import ast

import pytest

from engine.platform.config import PROJECT_ROOT

pytestmark = pytest.mark.unit

PAGES = PROJECT_ROOT / "cockpit" / "pages"
QUERY_PACKAGES = ("sqlalchemy", "sqlmodel")
TYPES_ONLY = ("sqlalchemy.ext.asyncio",)  # AsyncSession in a signature runs nothing
RUNS_A_STATEMENT = frozenset({"exec", "execute", "scalar", "scalars", "stream", "stream_scalars"})


def queries(source: str) -> list[tuple[int, str]]:
    """Where a module imports a query construct or runs a statement on a session."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if alias.name.split(".")[0] in QUERY_PACKAGES and not alias.name.startswith(TYPES_ONLY)
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in QUERY_PACKAGES and not node.module.startswith(TYPES_ONLY):
                found.append((node.lineno, f"from {node.module} import …"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in RUNS_A_STATEMENT:
                found.append((node.lineno, f".{node.func.attr}("))
    return found


def test_the_check_sees_a_query_built_and_run_in_a_page() -> None:
    inline = (
        "from sqlalchemy import select\n"
        "from sqlmodel import col\n"
        "import sqlalchemy.sql\n"
        "rows = await db_session.execute(select(User))\n"
        "one = await session.scalar(q)\n"
        "more = (await session.exec(q)).all()\n"
    )
    assert queries(inline) == [
        (1, "from sqlalchemy import …"),
        (2, "from sqlmodel import …"),
        (3, "import sqlalchemy.sql"),
        (4, ".execute("),
        (5, ".scalar("),
        (6, ".exec("),
    ]
    assert queries("from sqlalchemy.ext.asyncio import AsyncSession\nfound = await notices.list_notices(s, r)\n") == []


def test_no_page_builds_or_runs_a_query() -> None:
    modules = sorted(PAGES.rglob("*.py"))
    assert len(modules) > 20  # the walk sees the pages
    found = {
        str(path.relative_to(PROJECT_ROOT)): hits
        for path in modules
        if (hits := queries(path.read_text(encoding="utf-8")))
    }
    assert found == {}, "read through an engine function of the layer that owns the data"
