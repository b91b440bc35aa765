"""Every cockpit page route of a realm is guarded: no credential → 401 (or the sign-in page), another
realm's credential → 404. Public pages (sign-in) are the only exceptions, and they are listed."""

from __future__ import annotations

import re

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.authorization import DUMMY
from testing.factories import HTML, RealmHandle, browser_session

PUBLIC = {
    ("GET", "/realms/{realm}/sign-in"),
    ("POST", "/realms/{realm}/sign-in"),
    ("GET", "/realms/{realm}/sign-in/totp"),
    ("POST", "/realms/{realm}/sign-in/totp"),
    ("GET", "/realms/{realm}/sign-in/link"),
    ("POST", "/realms/{realm}/sign-in/link"),
}


def page_routes(app: Litestar) -> list[tuple[str, str, bool]]:
    found = []
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        if not path.startswith("/realms/{realm}"):
            continue
        for method, handler in route.route_handler_map.items():
            if method in {"HEAD", "OPTIONS"}:
                continue
            found.append((method, path, bool(handler[0].opt.get("public"))))
    return sorted(found)


async def test_every_realm_page_is_guarded(
    client: AsyncTestClient[Litestar], app: Litestar, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    routes = page_routes(app)
    assert len(routes) > 30
    public = {(m, p) for m, p, is_public in routes if is_public}
    assert public <= PUBLIC, f"pages open to anyone that are not meant to be: {sorted(public - PUBLIC)}"
    failures = []
    for method, path, is_public in routes:
        if is_public:
            continue
        url = re.sub(r"\{(\w+)\}", lambda m: realm.slug if m.group(1) == "realm" else DUMMY.get(m.group(1), "x"), path)
        anonymous = await client.request(method, url, headers={"accept": "application/json"})
        if anonymous.status_code != 401:
            failures.append(f"{method} {path}: no credential -> {anonymous.status_code}")
        foreign = await client.request(method, url, headers={**other_realm.headers, "accept": "application/json"})
        if foreign.status_code != 404:
            failures.append(f"{method} {path}: another realm's admin -> {foreign.status_code}")
    assert not failures, "\n".join(failures)


async def test_htmx_requests_without_a_live_session_answer_401_with_a_redirect_to_sign_in(
    client: AsyncTestClient[Litestar], app: Litestar, realm: RealmHandle
) -> None:
    """htmx swaps fragments: without a session it gets 401 and ``HX-Redirect`` (never a 500)."""
    login = await browser_session(realm, realm.admin)
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE sessions SET revoked_at = now() WHERE id = :s"), {"s": login.session_id})
    failures = []
    for method, path, is_public in page_routes(app):
        if is_public:
            continue
        url = re.sub(r"\{(\w+)\}", lambda m: realm.slug if m.group(1) == "realm" else DUMMY.get(m.group(1), "x"), path)
        for cookie in (None, login.cookie):
            client.cookies.clear()
            if cookie:
                client.cookies.set("cockpit_session", cookie)
            answer = await client.request(
                method, url, headers={**HTML, "HX-Request": "true", "X-CSRF-Token": login.csrf}
            )
            target = answer.headers.get("hx-redirect", "")
            if answer.status_code != 401 or not target.startswith(f"/realms/{realm.slug}/sign-in?next="):
                failures.append(f"{method} {path} (session: {bool(cookie)}): {answer.status_code} {target!r}")
    assert not failures, "\n".join(failures)


async def test_htmx_requests_of_a_session_without_a_second_factor_are_sent_to_mfa(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await browser_session(realm, realm.admin, mfa=False)
    client.cookies.set("cockpit_session", login.cookie)
    answer = await client.get(f"/realms/{realm.slug}/users", headers={**HTML, "HX-Request": "true"})
    assert answer.status_code == 403
    assert answer.headers["hx-redirect"] == f"/realms/{realm.slug}/mfa?next=/realms/{realm.slug}/users"
    plain = await client.get(f"/realms/{realm.slug}/users", headers=HTML, follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"] == answer.headers["hx-redirect"]
