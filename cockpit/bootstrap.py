"""First start: what `cockpit up` prepares before it runs web and worker."""

from __future__ import annotations

from engine.config import Settings


def first_start(settings: Settings, database_url: str) -> list[str]:
    """Prepare a fresh installation; return lines to show the operator."""
    settings.secret_key  # noqa: B018  (generated into the home folder on first start)
    return []
