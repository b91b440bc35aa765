"""The browser-test kit as its users run it: pytest-playwright's options keep a trace, a
screenshot and a video of a failed browser test (and nothing of a passing one), and a browser
that cannot start skips the browser tests — or fails them when ``CI`` is ``true``.

Each case runs pytest in a subprocess on a small test module that uses the suite's own browser
fixtures (``e2e/conftest.py``) on a page that needs no server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.platform.config import PROJECT_ROOT
from testing.browser import chromium_executable

TESTS = """
def test_passes(page):
    page.set_content("<h1>Fine</h1>")
    assert page.get_by_role("heading", name="Fine").is_visible()


def test_fails(page):
    page.set_content("<h1>Broken</h1>")
    assert page.get_by_role("heading", name="Fine").count() == 1, "the heading says Broken"
"""


def run_pytest(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "conftest.py").write_text("from e2e.conftest import *  # noqa: F403\n")
    (suite / "test_kit.py").write_text(TESTS)
    (suite / "pytest.ini").write_text("[pytest]\n")
    environment = {k: v for k, v in os.environ.items() if k not in {"CI", "COCKPIT_CHROMIUM", "PYTEST_ADDOPTS"}}
    environment.update(env, PYTHONPATH=str(PROJECT_ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-c", str(suite / "pytest.ini"), str(suite), *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def a_browser_exists() -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        build = playwright.chromium.executable_path
    executable = chromium_executable(build) or build
    if not Path(executable).exists():
        pytest.skip("no Chromium on this machine")


def playwright_ffmpeg() -> bool:
    """Recording video needs Playwright's own ffmpeg (``playwright install ffmpeg``)."""
    root = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    return any(root.glob("ffmpeg-*/ffmpeg-linux"))


def test_a_failed_test_keeps_its_trace_screenshot_and_video_and_a_passing_one_keeps_none(
    tmp_path: Path, a_browser_exists: None
) -> None:
    output = tmp_path / "results"
    video = ["--video", "retain-on-failure"] if playwright_ffmpeg() else []
    done = run_pytest(
        tmp_path,
        "--tracing",
        "retain-on-failure",
        "--screenshot",
        "only-on-failure",
        *video,
        "--output",
        str(output),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    kept = {path.relative_to(output).as_posix() for path in output.rglob("*") if path.is_file()}
    failed = next(name.split("/")[0] for name in kept)
    assert "test-fails" in failed and "test-passes" not in " ".join(kept)
    assert {f"{failed}/trace.zip", f"{failed}/test-failed-1.png"} <= kept
    assert (f"{failed}/video.webm" in kept) == bool(video)
    assert (output / failed / "trace.zip").stat().st_size > 0


def test_a_browser_that_cannot_start_skips_locally_and_fails_on_ci(tmp_path: Path) -> None:
    local = run_pytest(tmp_path, "-rs", COCKPIT_CHROMIUM="/bin/false")
    assert local.returncode == 0, local.stdout + local.stderr
    assert "2 skipped" in local.stdout and "no browser could start" in local.stdout

    ci = run_pytest(tmp_path, COCKPIT_CHROMIUM="/bin/false", CI="true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "no browser could start" in ci.stdout and "CI=true" in ci.stdout
    assert "2 error" in ci.stdout
