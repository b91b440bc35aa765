"""Browser tests: the real server (and a worker) on a free port, a fresh database, Chromium."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from testing.browser import CHROMIUM_ARGS, system_chromium
from testing.processes import cockpit_env, free_port, start, stop, wait_http


@dataclass
class LiveServer:
    url: str
    database_url: str
    home: Path
    env: dict[str, str]
    log: Path


@pytest.fixture
def live_server(database_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    port = free_port()
    home = tmp_path / "home"
    env = cockpit_env(database_url, home)
    log = tmp_path / "server.log"
    processes: list[subprocess.Popen[bytes]] = [
        start(["serve", "--no-migrate", "--port", str(port)], env, log),
        start(["worker", "--no-migrate"], env, log),
    ]
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/healthz", timeout=30)
        yield LiveServer(url=url, database_url=database_url, home=home, env=env, log=log)
    finally:
        for process in processes:
            stop(process)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        executable = system_chromium()
        try:
            launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        except Exception as exc:  # no system Chromium and no Playwright build
            pytest.skip(f"no Chromium available for browser tests: {str(exc).splitlines()[0]}")
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()
