"""The smoke suite: flows against any running cockpit, the way QA runs them.

    COCKPIT_E2E_TOKEN=pat_… COCKPIT_E2E_REALM=acme uv run pytest e2e/smoke --base-url https://cockpit.example

The token is an admin-audience token of a realm administrator. The suite never touches the
database: it creates what it needs through the JSON API — its own users, workflows and runs, all
named with one prefix (``smoke-<time>-<random>``) — and removes them at the end: each workflow
is disabled and deleted (its runs cancelled first if any is still going), its roles are deleted,
each user loses the roles the suite gave them and is suspended. Without the base URL, the token and the realm the
tests skip, saying so.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, Playwright

from e2e.signin import create_sign_in_link, storage_state_from_link
from e2e.smoke.deployment import Deployment, Person

TOKEN_VARIABLE = "COCKPIT_E2E_TOKEN"
REALM_VARIABLE = "COCKPIT_E2E_REALM"


@pytest.fixture(scope="session", autouse=True)
def _needs_a_running_cockpit(base_url: str | None) -> None:
    missing = [] if base_url else ["--base-url"]
    missing += [name for name in (TOKEN_VARIABLE, REALM_VARIABLE) if not os.environ.get(name)]
    if missing:
        pytest.skip("the smoke suite runs against a running cockpit; missing: " + ", ".join(missing))


@pytest.fixture(scope="session")
def deployment(base_url: str) -> Iterator[Deployment]:
    url = base_url.rstrip("/")
    realm = os.environ[REALM_VARIABLE]
    api = httpx.Client(
        base_url=f"{url}/api/v1/realms/{realm}",
        headers={"Authorization": f"Bearer {os.environ[TOKEN_VARIABLE]}"},
        timeout=30,
    )
    probe = api.get("/users", params={"limit": 1})
    if probe.status_code != 200:
        pytest.fail(f"{TOKEN_VARIABLE} does not reach realm {realm!r} at {url}: {probe.status_code} {probe.text}")
    prefix = f"smoke-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"
    deployment = Deployment(url=url, realm=realm, prefix=prefix, api=api)
    try:
        yield deployment
    finally:
        left = deployment.clean_up()
        api.close()
        assert not left, "the smoke suite could not remove: " + "; ".join(left)


@pytest.fixture
def signed_in(
    deployment: Deployment, playwright: Playwright, new_context: Callable[..., BrowserContext]
) -> Callable[[Person], Page]:
    """A page of a new browser context, signed in as ``person`` through a one-time link."""

    def open_as(person: Person) -> Page:
        link = create_sign_in_link(deployment.api, person.id)
        state = storage_state_from_link(playwright, deployment.url + link.path)
        return new_context(storage_state=state).new_page()

    return open_as
