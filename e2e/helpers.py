"""Getting into a live server from a browser test: a realm, a sign-in link, a token."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

from e2e.conftest import LiveServer
from engine.platform.config import PROJECT_ROOT


def cli(live: LiveServer, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=live.env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def create_realm(live: LiveServer, slug: str, admin_email: str) -> None:
    cli(live, "admin", "create-realm", slug, "--admin-email", admin_email)


def sign_in_url(live: LiveServer, slug: str, email: str) -> str:
    """The one-time link, pointed at the live server (the CLI prints the configured address)."""
    printed = cli(live, "admin", "sign-in-link", "--realm", slug, "--email", email)
    parts = urlsplit(printed)
    return f"{live.url}{parts.path}?{parts.query}"


def admin_token(live: LiveServer, slug: str, email: str) -> str:
    return cli(live, "admin", "token", "--realm", slug, "--email", email, "--audience", "admin")
