"""Every cockpit page route of a realm is guarded: no credential → 401 (or the sign-in page), another
realm's credential → 404. Public pages (sign-in) are the only exceptions, and they are listed."""

from __future__ import annotations

import re

from litestar import Litestar
from litestar.routes import HTTPRoute
from litestar.testing import AsyncTestClient

from tests.factories import RealmHandle
from tests.integration.test_authorization_matrix import DUMMY

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
