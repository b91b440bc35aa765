"""The docs name files that exist: a path in backticks or a relative link that no longer resolves fails.

Dated reports under docs/reports/ describe the code as it was on their day and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.platform.config import PROJECT_ROOT

pytestmark = pytest.mark.unit

TOPS = ("engine", "cockpit", "tests", "e2e", "testing", "bench", "deploy", "docs", "migrations", "static", "templates")
# `engine/runs/runner.py`, `tests/unit/test_x.py::test_y`, `engine/endpoints/*` — not `<realm>/…` patterns.
IN_BACKTICKS = re.compile("`((?:" + "|".join(TOPS) + r")/[A-Za-z0-9_./*@-]*)(?:::[A-Za-z0-9_.]+)?`")
LINK = re.compile(r"\]\(((?!https?:|mailto:|#)[^)#\s]+)(?:#[^)]*)?\)")
ANCHORED = re.compile(r"\]\(((?!https?:|mailto:)[^)#\s]*\.md)?#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
DOCS = sorted([*PROJECT_ROOT.glob("docs/*.md"), PROJECT_ROOT / "README.md", PROJECT_ROOT / "CONTRIBUTING.md"])


def named_paths(doc: Path) -> list[tuple[str, Path]]:
    text = doc.read_text(encoding="utf-8")
    found = [(m.group(1).rstrip("."), PROJECT_ROOT / m.group(1).rstrip(".")) for m in IN_BACKTICKS.finditer(text)]
    found += [(m.group(1), (doc.parent / m.group(1)).resolve()) for m in LINK.finditer(text)]
    return found


def exists(path: Path) -> bool:
    if "*" in path.name or "*" in str(path.parent):
        return any(PROJECT_ROOT.glob(str(path.relative_to(PROJECT_ROOT))))
    return path.exists()


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {slug(m.group(1)) for m in HEADING.finditer(text)}


def broken_anchors(doc: Path) -> list[str]:
    broken = []
    for m in ANCHORED.finditer(doc.read_text(encoding="utf-8")):
        target = (doc.parent / m.group(1)).resolve() if m.group(1) else doc
        if target.exists() and m.group(2) not in anchors(target):
            broken.append(f"{m.group(1) or ''}#{m.group(2)}")
    return broken


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda d: d.name)
def test_every_anchor_a_doc_links_to_is_a_heading(doc: Path) -> None:
    assert broken_anchors(doc) == [], f"{doc.name} links to headings that do not exist"


@pytest.mark.parametrize("doc", [d for d in DOCS if d.exists()], ids=lambda d: d.name)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    missing = [named for named, path in named_paths(doc) if not exists(path)]
    assert missing == [], f"{doc.name} names paths that do not exist: {missing}"


def test_the_check_sees_a_path_that_is_gone(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("See `engine/runs/no_such_module.py` and `engine/runs/runstore/leases.py`.", encoding="utf-8")
    names = [named for named, path in named_paths(doc) if not exists(path)]
    assert names == ["engine/runs/no_such_module.py"]


def test_the_check_sees_an_anchor_that_is_gone(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# Web processes: `bench/web.py`\n[a](#web-processes-benchwebpy) [b](#web-processes-bench-webpy)\n")
    assert broken_anchors(doc) == ["#web-processes-bench-webpy"]
