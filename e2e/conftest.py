"""Browser tests on pytest-playwright.

The plugin owns the browser, the contexts and the pages, and with them its command-line options:
``--base-url``, ``--browser-channel``, ``--headed``, ``--slowmo``, ``--tracing``, ``--video``,
``--screenshot``, ``--output``. This file only adds what the cockpit needs:

- Chromium's executable and switches (``testing/browser.py``): Debian's Chromium when Playwright's
  own build is not installed;
- a browser that cannot start skips the browser tests with the reason, or fails them when ``CI``
  is ``true``;
- every context gets the cockpit under test as its ``base_url`` (the test's own live server, or
  ``--base-url``), a desktop viewport and generous timeouts;
- ``live_server``: ``cockpit serve`` and ``cockpit worker`` on a fresh database, ready once the
  worker has beaten (``/readyz`` answers 200), with any settings of ``live_server_env`` added.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, BrowserType, expect
from playwright.sync_api import Error as PlaywrightError

from e2e.helpers import LiveServer
from testing.browser import CHROMIUM_ARGS, chromium_executable, must_have_browser
from testing.processes import cockpit_env, free_port, start, stop, wait_http

# Generous deadlines: the machine running the suite may be busy. Tests wait on conditions.
ACTION_TIMEOUT_MS = 15_000
expect.set_options(timeout=ACTION_TIMEOUT_MS)
READY_TIMEOUT_S = 90


@pytest.fixture
def live_server_env() -> dict[str, str]:
    """More ``COCKPIT_*`` settings for the live server (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def live_server(database_url: str, tmp_path: Path, live_server_env: dict[str, str]) -> Iterator[LiveServer]:
    """The web server and a worker on this test's database; yielded once ``/readyz`` says ready
    (database, migrations and a worker heartbeat), so runs started by the test are picked up."""
    port = free_port()
    home = tmp_path / "home"
    env = cockpit_env(database_url, home, **live_server_env)
    log = tmp_path / "server.log"
    processes: list[subprocess.Popen[bytes]] = [
        start(["serve", "--no-migrate", "--port", str(port)], env, log),
        start(["worker", "--no-migrate"], env, log),
    ]
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(url + "/readyz", timeout=READY_TIMEOUT_S)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n--- server and worker log ---\n{log.read_text(errors='replace')}") from exc
        yield LiveServer(url=url, database_url=database_url, home=home, env=env, log=log)
    finally:
        for process in processes:
            stop(process)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any], browser_type: BrowserType) -> dict[str, Any]:
    args = dict(browser_type_launch_args)
    if browser_type.name == "chromium":
        args["args"] = [*CHROMIUM_ARGS, *args.get("args", [])]
        executable = chromium_executable(browser_type.executable_path, channel=args.get("channel"))
        if executable:
            args["executable_path"] = executable
    return args


@pytest.fixture(scope="session")
def browser(launch_browser: Callable[[], Browser]) -> Iterator[Browser]:
    try:
        launched = launch_browser()
    except PlaywrightError as exc:
        reason = f"no browser could start for the browser tests: {str(exc).strip().splitlines()[0]}"
        if must_have_browser():
            pytest.fail(reason + " (CI=true: a missing browser is a failure)", pytrace=False)
        pytest.skip(reason)
    yield launched
    launched.close()


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    # The base URL is set per context (see ``new_context``): this test's live server or --base-url.
    args = {key: value for key, value in browser_context_args.items() if key != "base_url"}
    args.setdefault("viewport", {"width": 1280, "height": 900})
    return args


@pytest.fixture(scope="session")
def base_url(pytestconfig: pytest.Config) -> str | None:
    """``--base-url`` (or ``PYTEST_BASE_URL``, or the ``base_url`` ini value): a running cockpit."""
    value = pytestconfig.getoption("--base-url", default=None) or pytestconfig.getini("base_url") or None
    return str(value) if value else None


@pytest.fixture
def app_url(request: pytest.FixtureRequest, base_url: str | None) -> str | None:
    """The cockpit under test: the test's own live server when it has one, else ``--base-url``."""
    if "live_server" in request.fixturenames:
        live: LiveServer = request.getfixturevalue("live_server")
        return live.url
    return base_url.rstrip("/") if base_url else None


@pytest.fixture
def new_context(new_context: Callable[..., BrowserContext], app_url: str | None) -> Callable[..., BrowserContext]:
    """pytest-playwright's context factory (traces, videos and screenshots included), with the
    cockpit's base URL and the suite's timeouts."""

    def make(**kwargs: Any) -> BrowserContext:
        if app_url:
            kwargs.setdefault("base_url", app_url)
        context = new_context(**kwargs)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        return context

    return make
