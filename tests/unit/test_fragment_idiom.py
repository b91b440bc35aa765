"""One way for a page to answer with a fragment: ``cockpit.pages.common.targets(request, ID)``.

Only ``cockpit/pages/common.py`` reads the htmx headers; a page module that names one of them
itself (or passes ``fragment=`` to ``page``) decides "fragment or whole page" a second way.
"""

from __future__ import annotations

import ast

import pytest

from engine.platform.config import PROJECT_ROOT

pytestmark = pytest.mark.unit

PAGES = PROJECT_ROOT / "cockpit" / "pages"
COMMON = PAGES / "common.py"
HTMX_HEADERS = frozenset({"hx-target", "hx-request", "hx-boosted"})


def header_reads(source: str) -> list[tuple[int, str]]:
    """Where a module names an htmx request header, or passes ``fragment=`` to a call."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in HTMX_HEADERS:
            found.append((node.lineno, node.value))
        if isinstance(node, ast.Call):
            found += [(node.lineno, "fragment=") for k in node.keywords if k.arg == "fragment"]
    return found


def test_the_check_sees_an_inline_header_read() -> None:
    inline = 'ok = request.headers.get("hx-request") == "true" and request.headers.get("HX-Target") == "t"\n'
    assert header_reads(inline) == [(1, "hx-request"), (1, "HX-Target")]
    assert header_reads('page(request, "a.html", fragment="b.html")\n') == [(1, "fragment=")]
    assert header_reads('targets(request, "t")\n') == []


def test_only_common_reads_the_htmx_headers() -> None:
    modules = sorted(PAGES.rglob("*.py"))
    assert COMMON in modules and len(modules) > 10
    assert {name for _, name in header_reads(COMMON.read_text(encoding="utf-8"))} >= {"hx-target", "hx-request"}
    offenders = [
        f"{path.relative_to(PROJECT_ROOT)}:{line} {name}"
        for path in modules
        if path != COMMON
        for line, name in header_reads(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
