"""Which Chromium the browser tests drive, and with which switches.

pytest-playwright launches the browser; these decide its ``executable_path``:

1. ``COCKPIT_CHROMIUM`` when set (any Chromium binary; it wins over everything else);
2. nothing when ``--browser-channel`` asks for an installed channel (``chrome``, ``msedge``…)
   or when Playwright's own build is installed (``playwright install chromium``);
3. otherwise Debian's Chromium (``/usr/bin/chromium``, or ``chromium`` on the ``PATH``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def system_chromium() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def chromium_executable(playwright_build: str | None, *, channel: str | None = None) -> str | None:
    """The ``executable_path`` to launch with, or None to let Playwright pick its own."""
    chosen = os.environ.get("COCKPIT_CHROMIUM")
    if chosen:
        return chosen
    if channel:
        return None
    if playwright_build and Path(playwright_build).exists():
        return None
    return system_chromium()


def must_have_browser() -> bool:
    """On CI a browser that cannot start fails the browser tests instead of skipping them."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}
