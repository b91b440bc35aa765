"""Every answer carries the security headers; no page needs inline script to work."""

from __future__ import annotations

import re

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.platform.config import PROJECT_ROOT
from testing.factories import HTML, RealmHandle, browser_session

Client = AsyncTestClient[Litestar]


def assert_security_headers(headers: object, *, no_store: bool) -> None:
    get = headers.get  # type: ignore[attr-defined]
    csp = get("content-security-policy") or ""
    directives = {d.strip().split(" ")[0]: d.strip() for d in csp.split(";") if d.strip()}
    assert directives["frame-ancestors"] == "frame-ancestors 'none'", csp
    assert "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
    assert directives["script-src"] == "script-src 'self'"
    assert get("x-content-type-options") == "nosniff"
    assert get("referrer-policy") == "same-origin"
    if no_store:
        assert get("cache-control") == "no-store"


async def test_pages_api_errors_and_static_files_carry_the_headers(client: Client, realm: RealmHandle) -> None:
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    page = await client.get(f"/realms/{realm.slug}/tokens", headers=HTML)
    assert page.status_code == 200
    assert_security_headers(page.headers, no_store=True)
    client.cookies.clear()
    sign_in = await client.get(f"/realms/{realm.slug}/sign-in", headers=HTML)
    assert_security_headers(sign_in.headers, no_store=True)
    api = await client.get(f"{realm.api}/users", headers=realm.headers)
    assert api.status_code == 200
    assert_security_headers(api.headers, no_store=True)
    refused = await client.get(f"{realm.api}/users")
    assert refused.status_code == 401 and refused.headers["content-type"].startswith("application/problem+json")
    assert_security_headers(refused.headers, no_store=True)
    static = await client.get("/static/js/cockpit.js")
    assert static.status_code == 200
    assert_security_headers(static.headers, no_store=False)
    assert static.headers.get("cache-control") != "no-store"


async def test_a_minted_token_and_a_webhook_secret_are_never_cached(client: Client, realm: RealmHandle) -> None:
    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    minted = await client.post(
        f"{realm.api}/tokens",
        json={"name": "ci", "audience": "account"},
        headers={"X-CSRF-Token": login.csrf},
    )
    assert minted.status_code == 201 and minted.json()["token"].startswith("pat_")
    assert minted.headers["cache-control"] == "no-store"
    client.cookies.clear()
    hook = await client.post(
        f"{realm.api}/webhooks",
        json={"destination": "https://hooks.example.com/in"},
        headers=realm.headers,
    )
    assert hook.status_code == 201, hook.text
    assert hook.headers["cache-control"] == "no-store"


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"\s(on[a-z]+|hx-on[:\w-]*)\s*=", re.I)
INLINE_STYLE = re.compile(r"\sstyle\s*=|<style\b", re.I)


def test_templates_and_static_pages_hold_no_inline_script_or_style() -> None:
    offenders: list[str] = []
    for path in sorted((PROJECT_ROOT / "templates").rglob("*.html")):
        source = path.read_text()
        for pattern, what in (
            (INLINE_SCRIPT, "inline <script>"),
            (INLINE_HANDLER, "inline handler"),
            (INLINE_STYLE, "inline style"),
        ):
            for match in pattern.finditer(source):
                line = source.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(PROJECT_ROOT)}:{line}: {what}")
    assert not offenders, "the Content-Security-Policy would block these:\n" + "\n".join(offenders)
