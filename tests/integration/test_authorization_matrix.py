"""Every registered realm API route against every kind of caller.

The table in ``testing/authorization.py`` (``MATRIX``) states what each route needs. A route
registered in the app without a row there fails ``test_every_realm_route_has_a_row``; a row whose
route answers otherwise fails ``test_matrix``. Add the row when you add the route.
"""

from __future__ import annotations

import re

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.authz import BUILTIN_ROLES, covers
from testing.authorization import ACCOUNT, DUMMY, MATRIX, realm_routes
from testing.factories import RealmHandle, bearer


def concrete(slug: str, path: str) -> str:
    def fill(match: re.Match[str]) -> str:
        return DUMMY.get(match.group(1), "x")

    return f"/api/v1/realms/{slug}" + re.sub(r"\{(\w+)\}", fill, path)


AUDITOR_PERMISSIONS = list(BUILTIN_ROLES["realm-auditor"].permissions)


def test_every_realm_route_has_a_row(app: Litestar) -> None:
    registered = realm_routes(app)
    missing = sorted(registered - MATRIX.keys())
    stale = sorted(MATRIX.keys() - registered)
    assert not missing, f"routes without a row in the authorization matrix: {missing}"
    assert not stale, f"rows for routes that do not exist: {stale}"


async def test_matrix(client: AsyncTestClient[Litestar], realm: RealmHandle, other_realm: RealmHandle) -> None:
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    auditor_token = await realm.token(auditor, "admin")
    account_user = await realm.user("member@example.com")
    account_token = await realm.token(account_user, "account")
    admin_account_token = await realm.token(realm.admin, "account")
    failures: list[str] = []

    async def call(method: str, url: str, headers: dict[str, str]) -> int:
        body = {} if method in {"POST", "PUT", "PATCH"} else None
        response = await client.request(method, url, headers=headers, json=body)
        return response.status_code

    for (method, path), need in sorted(MATRIX.items()):
        url = concrete(realm.slug, path)
        label = f"{method} {path}"
        if (status := await call(method, url, {})) != 401:
            failures.append(f"{label}: no credential -> {status}, want 401")
        if (status := await call(method, url, other_realm.headers)) != 404:
            failures.append(f"{label}: other realm's admin -> {status}, want 404")
        if (status := await call(method, url, realm.headers)) in {401, 403} or status >= 500:
            failures.append(f"{label}: admin -> {status}, want access")
        auditor_allowed = need != ACCOUNT and any(covers(p, need) for p in AUDITOR_PERMISSIONS)
        status = await call(method, url, bearer(auditor_token))
        if need == ACCOUNT or auditor_allowed:
            if status in {401, 403}:
                failures.append(f"{label}: auditor -> {status}, want access")
        elif status != 403:
            failures.append(f"{label}: auditor -> {status}, want 403")
        status = await call(method, url, bearer(account_token))
        if need == ACCOUNT:
            if status in {401, 403}:
                failures.append(f"{label}: account token -> {status}, want access")
        elif status != 403:
            failures.append(f"{label}: account token of a member -> {status}, want 403")
        status = await call(method, url, bearer(admin_account_token))
        if need != ACCOUNT and status != 403:
            failures.append(f"{label}: the admin's account-audience token -> {status}, want 403")
    assert not failures, "\n".join(failures)
