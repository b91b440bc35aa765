"""Webhooks, templates, policy, tokens and audit pages, driven like a browser would (cookie + CSRF)."""

from __future__ import annotations

import html
import re

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.models import User
from engine.directory.notice_templates import MAX_BODY
from engine.platform import crypto
from testing.factories import HTML, BrowserLogin, RealmHandle, bearer, browser_session
from testing.workflows import manual, publish


async def _sign_in(
    client: AsyncTestClient[Litestar], realm: RealmHandle, user: User, *, mfa: bool = True
) -> BrowserLogin:
    login = await browser_session(realm, user, mfa=mfa)
    client.cookies.set("cockpit_session", login.cookie)
    return login


def _secret_box(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}">([^<]+)<', page)
    assert found, f"no #{element_id} on the page"
    return html.unescape(found.group(1)).strip()


async def test_webhooks_page_creates_shows_the_secret_once_and_acts_on_rows(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/webhooks"
    empty = await client.get(base, headers=HTML)
    assert empty.status_code == 200 and "No webhook subscriptions yet." in empty.text
    assert 'aria-current="page"' in empty.text and 'href="/realms/' in empty.text

    created = await client.post(
        base,
        data={
            "_csrf": login.csrf,
            "destination": "https://hooks.example.com/in",
            "event_types": ["user.created", "user.suspended"],
        },
        headers=HTML,
    )
    assert created.status_code == 200, created.text
    secret = _secret_box(created.text, "webhook-secret")
    assert secret.startswith("whsec_") and "Copy it now" in created.text
    async with realm.sessions() as session:
        row = (await session.execute(text("SELECT id, secret_enc, event_types FROM webhook_subscriptions"))).one()
    assert crypto.decrypt("test-secret-key-0123456789abcdef0123456789", "webhook-secret", row.secret_enc) == secret
    assert row.event_types == ["user.created", "user.suspended"]

    listed = await client.get(base, headers=HTML)
    assert "hooks.example.com/in" in listed.text and secret not in listed.text
    assert '<span class="badge active">active</span>' in listed.text

    # Row actions through htmx: only the component comes back.
    paused = await client.post(
        f"{base}/{row.id}/pause",
        data={"_csrf": login.csrf},
        headers=HTML | {"HX-Request": "true", "HX-Target": "webhooks"},
    )
    assert paused.status_code == 200 and paused.text.lstrip().startswith('<div id="webhooks">')
    assert '<span class="badge paused">paused</span>' in paused.text
    rotated = await client.post(f"{base}/{row.id}/rotate-secret", data={"_csrf": login.csrf}, headers=HTML)
    new_secret = _secret_box(rotated.text, "webhook-secret")
    assert new_secret != secret and "previous secret keeps signing" in rotated.text
    deleted = await client.post(f"{base}/{row.id}/delete", data={"_csrf": login.csrf}, headers=HTML)
    assert deleted.status_code == 200 and "Subscription deleted" in deleted.text
    assert (await client.get(base, params={"state": "deleted"}, headers=HTML)).text.count('class="badge deleted"') == 1


async def test_webhook_form_errors_are_shown_beside_the_field(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await _sign_in(client, realm, realm.admin)
    response = await client.post(
        f"/realms/{realm.slug}/webhooks", data={"_csrf": login.csrf, "destination": "http://127.0.0.1/"}, headers=HTML
    )
    assert response.status_code == 422
    assert 'class="field-error"' in response.text and "allow_private_network" in response.text
    assert 'value="http://127.0.0.1/"' in response.text
    # The form's own error stands above the form, not above the list of subscriptions.
    listed, form = response.text.split('id="create-webhook"', 1)
    assert 'role="alert"' in form and 'role="alert"' not in listed.split('<div id="webhooks">', 1)[1]


async def test_deleting_a_subscription_a_workflow_calls_is_refused_then_forced(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/webhooks"
    made = await client.post(
        f"{realm.api}/webhooks", json={"destination": "https://hooks.example.com/in"}, headers=realm.headers
    )
    assert made.status_code == 201, made.text
    hook = made.json()["id"]
    await publish(realm, manual({"id": "call", "type": "call_webhook", "subscription_id": hook}), "Caller")

    async def state() -> str:
        async with realm.sessions() as session:
            return str(await session.scalar(text("SELECT state FROM webhook_subscriptions WHERE id = :w"), {"w": hook}))

    refused = await client.post(f"{base}/{hook}/delete", data={"_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 409 and "Caller" in refused.text
    assert 'name="force" value="true"' in refused.text and await state() == "active"
    forced = await client.post(f"{base}/{hook}/delete", data={"_csrf": login.csrf, "force": "true"}, headers=HTML)
    assert forced.status_code == 200 and "Subscription deleted. Nothing more is sent to it." in forced.text
    assert await state() == "deleted"


async def test_a_row_action_the_page_does_not_know_or_a_used_subscription_says_so_whole(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/webhooks"
    made = await client.post(
        f"{realm.api}/webhooks", json={"destination": "https://hooks.example.com/in"}, headers=realm.headers
    )
    assert made.status_code == 201, made.text
    hook = made.json()["id"]

    async def state() -> str:
        async with realm.sessions() as session:
            return str(await session.scalar(text("SELECT state FROM webhook_subscriptions WHERE id = :w"), {"w": hook}))

    unknown = await client.post(f"{base}/{hook}/archive", data={"_csrf": login.csrf}, headers=HTML)
    assert unknown.status_code == 404
    assert '<div class="flash bad" role="alert">Unknown action &#39;archive&#39;.' in unknown.text
    assert await state() == "active"

    await publish(realm, manual({"id": "call", "type": "call_webhook", "subscription_id": hook}), "Caller")
    refused = await client.post(f"{base}/{hook}/delete", data={"_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 409
    assert (
        '<div class="flash bad" role="alert">The subscription is used by the published revision of 1 workflow(s):'
        " Caller. Their runs would fail at that step. Change those workflows first, or delete anyway with"
        " force=true."
    ) in refused.text
    assert await state() == "active"


async def test_forms_without_the_csrf_field_are_refused(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    await _sign_in(client, realm, realm.admin)
    for url, data in [
        (f"/realms/{realm.slug}/webhooks", {"destination": "https://x.example.com/"}),
        (f"/realms/{realm.slug}/templates", {"subject": "s", "body": "b"}),
        (f"/realms/{realm.slug}/policy", {"workflow_publish_approval": "on"}),
        (f"/realms/{realm.slug}/tokens", {"name": "n", "audience": "account"}),
    ]:
        response = await client.post(url, data=data, headers=HTML)
        assert response.status_code == 403, url
        wrong = await client.post(url, data=data | {"_csrf": "not-the-token"}, headers=HTML)
        assert wrong.status_code == 403, url
    async with realm.sessions() as session:
        changes = await session.scalar(
            text(
                "SELECT count(*) FROM audit_events"
                " WHERE type IN ('webhook.created', 'template.updated', 'policy.updated')"
            )
        )
    assert changes == 0


async def test_template_page_saves_and_previews(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/templates"
    shown = await client.get(base, headers=HTML)
    assert shown.status_code == 200 and "server default" in shown.text and 'id="template-preview"' in shown.text

    preview = await client.post(
        base + "/preview",
        data={"subject": "Hello from {{realm}}", "body": "{{notice}} <b>now</b>"},
        headers=HTML | {"HX-Request": "true", "X-CSRF-Token": login.csrf},
    )
    assert preview.status_code == 200 and preview.text.lstrip().startswith(
        '<section class="card" id="template-preview"'
    )
    assert f"Hello from {realm.slug}" in preview.text and "Welcome! Your account is ready to use." in preview.text
    bad_preview = await client.post(
        base + "/preview", data={"subject": "x", "body": "{{ user }}"}, headers=HTML | {"X-CSRF-Token": login.csrf}
    )
    assert "cannot be rendered" in bad_preview.text and "{{user}} is not allowed" in html.unescape(bad_preview.text)

    invalid = await client.post(base, data={"_csrf": login.csrf, "subject": "Hi", "body": "{% if x %}"}, headers=HTML)
    assert invalid.status_code == 422 and 'class="field-error"' in invalid.text
    saved = await client.post(
        base,
        data={"_csrf": login.csrf, "subject": "[{{realm}}] {{notice}}", "body": "{{notice}}\r\n-- {{workflow}}"},
        headers=HTML,
    )
    assert saved.status_code == 200 and "Template saved" in saved.text and "customized" in saved.text
    api = (await client.get(realm.api + "/templates/workflow_notice", headers=bearer(realm.admin_token))).json()
    assert api["subject"] == "[{{realm}}] {{notice}}" and api["body"] == "{{notice}}\n-- {{workflow}}"


async def test_policy_page_toggles_the_extension(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/policy"
    shown = await client.get(base, headers=HTML)
    assert 'id="approval-state">off<' in shown.text and "created from now on" in shown.text
    on = await client.post(base, data={"_csrf": login.csrf, "workflow_publish_approval": "on"}, headers=HTML)
    assert on.status_code == 200 and 'id="approval-state">on<' in on.text and "Policy saved." in on.text
    off = await client.post(base, data={"_csrf": login.csrf}, headers=HTML)
    assert 'id="approval-state">off<' in off.text
    async with realm.sessions() as session:
        count = await session.scalar(text("SELECT count(*) FROM audit_events WHERE type = 'policy.updated'"))
    assert count == 2


async def test_tokens_page_mints_once_and_revokes(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    member = await realm.user("member@example.com")
    login = await _sign_in(client, realm, member, mfa=False)
    base = f"/realms/{realm.slug}/tokens"
    shown = await client.get(base, headers=HTML)
    assert shown.status_code == 200 and "You have no API tokens." in shown.text
    assert 'value="admin"' not in shown.text and "second factor" in shown.text

    minted = await client.post(
        base, data={"_csrf": login.csrf, "name": "laptop", "audience": "account", "expires_in_days": "7"}, headers=HTML
    )
    assert minted.status_code == 200, minted.text
    token = _secret_box(minted.text, "minted-token")
    assert token.startswith("pat_")
    assert (await client.get(realm.api + "/tokens", headers=bearer(token))).status_code == 200
    again = await client.get(base, headers=HTML)
    assert "laptop" in again.text and token not in again.text

    refused = await client.post(base, data={"_csrf": login.csrf, "name": "x", "audience": "admin"}, headers=HTML)
    assert refused.status_code == 403 and "second factor" in refused.text

    async with realm.sessions() as session:
        token_id = await session.scalar(
            text("SELECT id FROM api_tokens WHERE token_hash = :h"), {"h": crypto.token_hash(token)}
        )
        # Seven days from now, as chosen on the form.
        expiring = await session.scalar(
            text(
                "SELECT expires_at BETWEEN now() + interval '7 days' - interval '5 minutes'"
                " AND now() + interval '7 days' FROM api_tokens WHERE id = :t"
            ),
            {"t": token_id},
        )
    assert expiring is True
    revoked = await client.post(f"{base}/{token_id}/revoke", data={"_csrf": login.csrf}, headers=HTML)
    assert revoked.status_code == 200 and "Token revoked." in revoked.text
    client.cookies.clear()
    assert (await client.get(realm.api + "/tokens", headers=bearer(token))).status_code == 401


async def test_tokens_page_offers_admin_tokens_in_an_mfa_session(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    await _sign_in(client, realm, realm.admin, mfa=True)
    shown = await client.get(f"/realms/{realm.slug}/tokens", headers=HTML)
    assert '<option value="admin"' in shown.text


async def test_audit_page_filters_pages_and_shows_details(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    await _sign_in(client, realm, realm.admin)
    for i in range(3):
        await client.post(
            realm.api + "/webhooks",
            json={"destination": f"https://h{i}.example.com/"},
            headers=bearer(realm.admin_token),
        )
    base = f"/realms/{realm.slug}/audit"
    page = await client.get(base, headers=HTML)
    assert page.status_code == 200 and page.text.count("<details>") >= 6
    assert page.text.index("webhook.created") < page.text.index("realm.created")  # newest first
    assert "&#34;destination_host&#34;" in page.text or "&quot;destination_host&quot;" in page.text

    filtered = await client.get(base, params={"type": "webhook.*", "since": "2020-01-01T00:00"}, headers=HTML)
    assert filtered.text.count("<details>") == 3 and "realm.created" not in filtered.text.split('id="audit-table"')[1]

    fragment = await client.get(
        base, params={"type": "webhook.created"}, headers=HTML | {"HX-Request": "true", "HX-Target": "audit-table"}
    )
    assert fragment.text.lstrip().startswith('<div id="audit-table">') and "<html" not in fragment.text

    bad = await client.get(base, params={"since": "yesterday"}, headers=HTML)
    assert bad.status_code == 422 and "since: must be an ISO 8601" in bad.text


async def test_audit_page_pages_with_a_next_link(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    await _sign_in(client, realm, realm.admin)
    async with realm.sessions() as session, session.begin():
        from engine.directory.audit import record_audit

        for i in range(55):
            await record_audit(session, realm.actor, "test.event", category="configuration", details={"i": i})
    first = await client.get(f"/realms/{realm.slug}/audit", params={"type": "test.event"}, headers=HTML)
    link = re.search(r'<nav class="pager"[^>]*><a href="([^"]+)"', first.text)
    assert link and first.text.count("<details>") == 50
    second = await client.get(html.unescape(link.group(1)), headers=HTML)
    assert second.status_code == 200 and second.text.count("<details>") == 5


async def test_pages_follow_the_permissions_of_the_api(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    login = await _sign_in(client, realm, auditor)
    assert (await client.get(f"/realms/{realm.slug}/audit", headers=HTML)).status_code == 200
    policy = await client.get(f"/realms/{realm.slug}/policy", headers=HTML)
    assert policy.status_code == 200 and "needs the permission" in policy.text and "Save policy" not in policy.text
    assert (await client.get(f"/realms/{realm.slug}/webhooks", headers=HTML)).status_code == 403
    change = await client.post(
        f"/realms/{realm.slug}/policy", data={"_csrf": login.csrf, "workflow_publish_approval": "on"}, headers=HTML
    )
    assert change.status_code == 403
    template = await client.get(f"/realms/{realm.slug}/templates", headers=HTML)
    assert template.status_code == 200 and "readonly" in template.text and "Save template" not in template.text
    assert f'action="/realms/{realm.slug}/templates"' not in template.text  # read-only: no form Enter would send


async def test_a_service_principal_gets_roles_on_its_page_within_the_callers_ceiling(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """Roles for a service principal from its page, by the engine's rules: a role the caller holds
    is assigned; a role beyond the caller's permissions is refused and nothing is assigned; a caller
    without ``realm.roles.write`` sees no form and is refused."""
    made = await client.post(realm.api + "/service-principals", json={"name": "nightly-sync"}, headers=realm.headers)
    assert made.status_code == 201, made.text
    sp_id = made.json()["id"]
    reader = await realm.role("reader", ["realm.users.read"])
    strong = await realm.role("strong", ["realm.users.read", "realm.users.write"])
    assigner = await realm.user("assigner@example.com")
    await realm.assign(assigner, await realm.role("assigner", ["realm.users.read", "realm.roles.write"]))
    page_of = f"/realms/{realm.slug}/service-principals/{sp_id}"

    async def held() -> list[str]:
        async with realm.sessions() as session:
            rows = await session.execute(
                text("SELECT role_id FROM role_assignments WHERE service_principal_id = :s ORDER BY role_id"),
                {"s": sp_id},
            )
            return [r[0] for r in rows]

    login = await _sign_in(client, realm, assigner)
    shown = await client.get(page_of, headers=HTML)
    assert shown.status_code == 200 and "No roles yet" in shown.text
    assert f'<option value="{reader.id}">' in shown.text and f'value="{strong.id}"' not in shown.text
    refused = await client.post(
        f"{page_of}/role-assignments", data={"_csrf": login.csrf, "role_id": strong.id}, headers=HTML
    )
    assert refused.status_code == 403 and "realm.users.write" in refused.text
    assert await held() == []
    assigned = await client.post(
        f"{page_of}/role-assignments", data={"_csrf": login.csrf, "role_id": reader.id}, headers=HTML
    )
    assert assigned.status_code == 200 and "Role assigned." in assigned.text and "reader" in assigned.text
    assert await held() == [reader.id]

    plain = await realm.user("plain@example.com")
    await realm.assign(plain, await realm.role("plain", ["realm.users.read"]))
    client.cookies.clear()
    login = await _sign_in(client, realm, plain)
    shown = await client.get(page_of, headers=HTML)
    assert "Assigning roles needs the permission" in shown.text and "sp-assign-role" not in shown.text
    denied = await client.post(
        f"{page_of}/role-assignments", data={"_csrf": login.csrf, "role_id": reader.id}, headers=HTML
    )
    assert denied.status_code == 403
    assert await held() == [reader.id]


async def test_service_principal_forms_keep_their_limits_and_the_callers_reach(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """A description of 500 characters is taken and one of 501 refused beside the field; a refused
    token keeps the form; a token of a principal holding more than the caller is not theirs to revoke."""
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/service-principals"
    made = await client.post(
        base,
        data={"_csrf": login.csrf, "name": " sync ", "description": "d" * 500},
        headers=HTML,
        follow_redirects=False,
    )
    assert made.status_code == 303
    found = re.fullmatch(rf"{base}/(spn_[^/?]+)\?created=1", made.headers["location"])
    assert found
    sp_id = found.group(1)
    longer = await client.post(
        base, data={"_csrf": login.csrf, "name": "sync-2", "description": "d" * 501}, headers=HTML
    )
    assert longer.status_code == 422 and "must be at most 500 characters" in longer.text
    assert 'value="sync-2"' in longer.text

    async def names() -> list[str]:
        async with realm.sessions() as session:
            rows = await session.execute(
                text("SELECT name FROM service_principals WHERE realm_id = :r ORDER BY name"), {"r": realm.id}
            )
            return [r[0] for r in rows]

    assert await names() == ["sync"]

    bad = await client.post(
        f"{base}/{sp_id}/tokens", data={"_csrf": login.csrf, "name": "nightly", "expires_in_days": "0"}, headers=HTML
    )
    assert bad.status_code == 422 and 'value="nightly"' in bad.text and 'class="field-error"' in bad.text

    strong = await realm.role("strong", ["realm.users.read", "realm.users.write"])
    assigned = await client.post(
        f"{base}/{sp_id}/role-assignments", data={"_csrf": login.csrf, "role_id": strong.id}, headers=HTML
    )
    assert assigned.status_code == 200, assigned.text
    minted = await client.post(f"{base}/{sp_id}/tokens", data={"_csrf": login.csrf, "name": "ok"}, headers=HTML)
    assert minted.status_code == 200 and minted.headers["cache-control"] == "no-store"

    async def revoked() -> list[bool]:
        async with realm.sessions() as session:
            rows = await session.execute(
                text("SELECT revoked_at IS NOT NULL FROM api_tokens WHERE service_principal_id = :s"), {"s": sp_id}
            )
            return [r[0] for r in rows]

    async with realm.sessions() as session:
        token_id = await session.scalar(text("SELECT id FROM api_tokens WHERE service_principal_id = :s"), {"s": sp_id})
    keeper = await realm.user("keeper@example.com")
    await realm.assign(keeper, await realm.role("keeper", ["realm.users.read", "realm.tokens.write"]))
    client.cookies.clear()
    weaker = await _sign_in(client, realm, keeper)
    refused = await client.post(f"{base}/{sp_id}/tokens/{token_id}/revoke", data={"_csrf": weaker.csrf}, headers=HTML)
    assert refused.status_code == 403 and "realm.users.write" in refused.text
    assert await revoked() == [False]
    client.cookies.clear()
    login = await _sign_in(client, realm, realm.admin)
    done = await client.post(
        f"{base}/{sp_id}/tokens/{token_id}/revoke", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == f"{base}/{sp_id}?revoked=1"
    assert await revoked() == [True]


async def test_service_principal_tokens_are_shown_once_within_reach_and_only_on_their_principal(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """The minted token is shown whole, this once, and is the one stored; minting for a principal
    holding more than the caller is refused; a token is revoked only from its own principal's page."""
    base = f"/realms/{realm.slug}/service-principals"
    sp_ids = []
    for name in ("strong-sync", "plain-sync"):
        made = await client.post(realm.api + "/service-principals", json={"name": name}, headers=realm.headers)
        assert made.status_code == 201, made.text
        sp_ids.append(made.json()["id"])
    strong_sp, plain_sp = sp_ids
    login = await _sign_in(client, realm, realm.admin)
    strong = await realm.role("strong", ["realm.users.read", "realm.users.write"])
    assigned = await client.post(
        f"{base}/{strong_sp}/role-assignments", data={"_csrf": login.csrf, "role_id": strong.id}, headers=HTML
    )
    assert assigned.status_code == 200, assigned.text

    async def stored(sp_id: str) -> list[tuple[str, str, bool]]:
        async with realm.sessions() as session:
            rows = await session.execute(
                text(
                    "SELECT name, token_hash, revoked_at IS NOT NULL FROM api_tokens"
                    " WHERE service_principal_id = :s ORDER BY id"
                ),
                {"s": sp_id},
            )
            return [(r[0], r[1], r[2]) for r in rows]

    minted = await client.post(f"{base}/{plain_sp}/tokens", data={"_csrf": login.csrf, "name": "nightly"}, headers=HTML)
    assert minted.status_code == 200 and "Token “nightly” created" in minted.text
    shown = re.search(r'<p class="secret" id="minted-token">(pat_[^<]+)</p>', minted.text)
    assert shown
    assert await stored(plain_sp) == [("nightly", crypto.token_hash(shown.group(1)), False)]
    again = await client.get(f"{base}/{plain_sp}", headers=HTML)
    assert shown.group(1) not in again.text and 'data-testid="minted-token"' not in again.text

    async with realm.sessions() as session:
        token_id = await session.scalar(
            text("SELECT id FROM api_tokens WHERE service_principal_id = :s"), {"s": plain_sp}
        )
    elsewhere = await client.post(
        f"{base}/{strong_sp}/tokens/{token_id}/revoke", data={"_csrf": login.csrf}, headers=HTML
    )
    assert elsewhere.status_code == 400
    assert '<div class="flash bad" role="alert">That token belongs to someone else.</div>' in elsewhere.text
    assert [revoked for _, _, revoked in await stored(plain_sp)] == [False]

    keeper = await realm.user("keeper@example.com")
    await realm.assign(keeper, await realm.role("keeper", ["realm.users.read", "realm.tokens.write"]))
    client.cookies.clear()
    weaker = await _sign_in(client, realm, keeper)
    above = await client.post(
        f"{base}/{strong_sp}/tokens", data={"_csrf": weaker.csrf, "name": "mine-now"}, headers=HTML
    )
    assert above.status_code == 403 and "realm.users.write" in above.text
    assert 'data-testid="minted-token"' not in above.text
    assert await stored(strong_sp) == []


async def test_template_page_resets_to_the_default_and_previews_line_breaks_as_typed(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await _sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/templates"
    api_url = realm.api + "/templates/workflow_notice"
    default = (await client.get(api_url, headers=bearer(realm.admin_token))).json()
    saved = await client.post(
        base,
        data={"_csrf": login.csrf, "subject": "Custom {{notice}}", "body": "{{notice}}"},
        headers=HTML,
        follow_redirects=False,
    )
    assert saved.status_code == 303 and saved.headers["location"] == f"{base}?saved=1"
    assert (await client.get(api_url, headers=bearer(realm.admin_token))).json()["subject"] == "Custom {{notice}}"
    # A refused save shows the stored template's state beside what was typed.
    refused = await client.post(base, data={"_csrf": login.csrf, "subject": "Hi", "body": "{% if x %}"}, headers=HTML)
    assert refused.status_code == 422
    assert ">customized</span>" in refused.text and "Restore the default wording" in refused.text
    assert "Placeholders: <code>{{" in html.unescape(refused.text)

    reset = await client.post(base + "/reset", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert reset.status_code == 303 and reset.headers["location"] == f"{base}?saved=reset"
    shown = await client.get(reset.headers["location"], headers=HTML)
    assert "Back to the server's default wording." in html.unescape(shown.text) and "server default" in shown.text
    assert (await client.get(api_url, headers=bearer(realm.admin_token))).json() == default

    def rendered_body(answer_text: str) -> str:
        return answer_text.split("srcdoc=", 1)[1].split("</iframe>", 1)[0]

    # Typed line breaks (CRLF) count as one character each, as when saved: a body at the limit
    # with LF is within it with CRLF too.
    lines = MAX_BODY // 5
    previews = [
        await client.post(
            base + "/preview",
            data={"subject": "Lines", "body": newline.join(["line"] * lines)},
            headers=HTML | {"HX-Request": "true", "X-CSRF-Token": login.csrf},
        )
        for newline in ("\r\n", "\n")
    ]
    assert [p.status_code for p in previews] == [200, 200]
    assert "cannot be rendered" not in previews[0].text and "\r" not in previews[0].text
    assert rendered_body(previews[0].text) == rendered_body(previews[1].text)

    policy = await client.post(
        f"/realms/{realm.slug}/policy",
        data={"_csrf": login.csrf, "workflow_publish_approval": "on"},
        headers=HTML,
        follow_redirects=False,
    )
    assert policy.status_code == 303 and policy.headers["location"] == f"/realms/{realm.slug}/policy?saved=1"


async def test_token_forms_default_the_audience_refuse_a_bad_expiry_and_mint_admin_tokens_after_mfa(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    member = await realm.user("member@example.com")
    login = await _sign_in(client, realm, member, mfa=False)
    base = f"/realms/{realm.slug}/tokens"
    plain = await client.post(base, data={"_csrf": login.csrf, "name": "plain"}, headers=HTML)
    assert plain.status_code == 200, plain.text
    assert _secret_box(plain.text, "minted-token").startswith("pat_")

    bad_days = await client.post(
        base, data={"_csrf": login.csrf, "name": "typed name", "expires_in_days": "soon"}, headers=HTML
    )
    assert bad_days.status_code == 422, bad_days.text
    assert 'value="typed name"' in bad_days.text and 'value="soon"' in bad_days.text
    assert re.search(r'name="expires_in_days"[^>]*aria-invalid="true"', bad_days.text)

    admin_login = await _sign_in(client, realm, realm.admin, mfa=True)
    admin = await client.post(base, data={"_csrf": admin_login.csrf, "name": "ops", "audience": "admin"}, headers=HTML)
    assert admin.status_code == 200, admin.text
    assert _secret_box(admin.text, "minted-token").startswith("pat_")
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT name, audience, id FROM api_tokens WHERE name IN ('plain', 'ops', 'typed name') ORDER BY name"
                )
            )
        ).all()
    assert [tuple(r)[:2] for r in rows] == [("ops", "admin"), ("plain", "account")]
    ops_id = rows[0].id
    revoked = await client.post(
        f"{base}/{ops_id}/revoke", data={"_csrf": admin_login.csrf}, headers=HTML, follow_redirects=False
    )
    assert revoked.status_code == 303 and revoked.headers["location"] == f"{base}?revoked=1"
    async with realm.sessions() as session:
        gone = await session.scalar(text("SELECT revoked_at IS NOT NULL FROM api_tokens WHERE id = :t"), {"t": ops_id})
    assert gone is True
