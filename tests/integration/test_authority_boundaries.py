"""Nobody climbs above their own authority: each path once found to lead to more power, closed."""

from __future__ import annotations

import re

import pyotp
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.models import Group, GroupRole, RealmPolicy, RoleAssignment, ServicePrincipal, User
from engine.directory.realms import builtin_role
from engine.platform.ids import new_id
from engine.workflows.publication import publish_revision
from testing.factories import HTML, RealmHandle, bearer, browser_session, enrol_totp, sign_in_link

Client = AsyncTestClient[Litestar]
MINIMAL = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


async def scalar(realm: RealmHandle, sql: str, **params: object) -> object:
    async with realm.sessions() as session:
        return await session.scalar(text(sql), params)


async def holder_of(realm: RealmHandle, *permissions: str, org_id: str | None = None) -> tuple[User, dict[str, str]]:
    """A user holding exactly ``permissions`` (in ``org_id`` when given), and an admin token of theirs."""
    user = await realm.user()
    boundary = "organization" if org_id else "realm"
    role = await realm.role(f"only-{new_id('rol')[-8:]}", list(permissions), boundary=boundary)
    await realm.assign(user, role, organization_id=org_id)
    return user, bearer(await realm.token(user))


async def organization_admin(realm: RealmHandle) -> tuple[User, str]:
    org = await realm.organization()
    target = await realm.user()
    await realm.member(org, target)
    role = await realm.role(f"org-admin-{new_id('rol')[-6:]}", ["org.*"], boundary="organization")
    await realm.assign(target, role, organization_id=org.id)
    return target, org.id


# --- 1. Password of an organization-scoped administrator ------------------------------------------


async def test_users_write_cannot_change_the_password_of_an_organization_admin(
    client: Client, realm: RealmHandle
) -> None:
    target, org_id = await organization_admin(realm)
    before = await scalar(realm, "SELECT password_hash FROM users WHERE id = :u", u=target.id)
    _, headers = await holder_of(realm, "realm.users.write", "realm.users.read")
    refused = await client.patch(
        f"{realm.api}/users/{target.id}", json={"password": "a-new-long-password"}, headers=headers
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "target_outranks_actor" and org_id in refused.json()["detail"]
    # What is missing, as data: every permission of the target the caller lacks, in its organization.
    assert refused.json()["missing_permissions"] == [{"permission": "org.*", "organization_id": org_id}]
    assert await scalar(realm, "SELECT password_hash FROM users WHERE id = :u", u=target.id) == before
    # Renaming them is changing them too.
    renamed = await client.patch(f"{realm.api}/users/{target.id}", json={"display_name": "Mallory"}, headers=headers)
    assert renamed.status_code == 403
    # Who holds at least as much may.
    ok = await client.patch(
        f"{realm.api}/users/{target.id}", json={"password": "a-new-long-password"}, headers=realm.headers
    )
    assert ok.status_code == 200


async def test_suspending_and_reactivating_need_the_rule_too(client: Client, realm: RealmHandle) -> None:
    target, _ = await organization_admin(realm)
    _, headers = await holder_of(realm, "realm.users.suspend", "realm.users.read")
    assert (await client.post(f"{realm.api}/users/{target.id}/suspend", headers=headers)).status_code == 403
    assert (await client.post(f"{realm.api}/users/{target.id}/suspend", headers=realm.headers)).status_code == 200
    # A suspended administrator is not brought back by someone below them.
    back = await client.post(f"{realm.api}/users/{target.id}/reactivate", headers=headers)
    assert back.status_code == 403 and back.json()["code"] == "target_outranks_actor"
    assert await scalar(realm, "SELECT status FROM users WHERE id = :u", u=target.id) == "suspended"


# --- 2. Stripping roles from a group --------------------------------------------------------------


async def test_groups_write_cannot_strip_realm_admin_from_a_group(client: Client, realm: RealmHandle) -> None:
    org = await realm.organization()
    admin_role = await realm.builtin_role("realm-admin")
    created = await client.post(
        f"{realm.api}/organizations/{org.id}/groups",
        json={"name": "Admins", "role_ids": [admin_role.id]},
        headers=realm.headers,
    )
    assert created.status_code == 201
    group_id = created.json()["id"]
    _, headers = await holder_of(realm, "org.groups.write", org_id=org.id)
    url = f"{realm.api}/organizations/{org.id}/groups/{group_id}"
    stripped = await client.patch(url, json={"role_ids": []}, headers=headers)
    assert stripped.status_code == 403 and stripped.json()["code"] == "grant_ceiling_exceeded", stripped.text
    assert "revoke realm-admin" in stripped.json()["detail"]
    async with realm.sessions() as session:
        assert await session.get(GroupRole, (group_id, admin_role.id)) is not None
        assert await session.get(Group, group_id) is not None
    # The realm administrator may.
    assert (await client.patch(url, json={"role_ids": []}, headers=realm.headers)).status_code == 200


# --- 3. Tokens for a stronger service principal ---------------------------------------------------


async def test_tokens_write_cannot_mint_a_token_for_a_stronger_service_principal(
    client: Client, realm: RealmHandle
) -> None:
    async with realm.sessions() as session, session.begin():
        strong = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="deployer")
        weak = ServicePrincipal(id=new_id("spn"), realm_id=realm.id, name="reader")
        session.add_all([strong, weak])
        await session.flush()
        session.add(
            RoleAssignment(
                id=new_id("ras"),
                realm_id=realm.id,
                role_id=(await builtin_role(session, realm.id, "realm-admin")).id,
                service_principal_id=strong.id,
                granted_by=realm.admin.id,
            )
        )
    _, headers = await holder_of(realm, "realm.tokens.write")
    refused = await client.post(
        f"{realm.api}/service-principals/{strong.id}/tokens", json={"name": "escalate"}, headers=headers
    )
    assert refused.status_code == 403 and refused.json()["code"] == "target_outranks_actor", refused.text
    # The refusal names the kind of principal, what the actor lacks, and what was refused.
    detail = refused.json()["detail"]
    assert detail.startswith("This service principal holds permissions you do not hold ("), detail
    assert "realm.roles.write" in detail and detail.endswith("; you cannot mint a token for it."), detail
    lacking = detail[detail.index("(") + 1 : detail.index(")")].split(", ")
    assert len(lacking) > 1 and all(re.fullmatch(r"[a-z_]+(\.([a-z_]+|\*))+", p) for p in lacking), lacking
    assert await scalar(realm, "SELECT count(*) FROM api_tokens WHERE service_principal_id = :s", s=strong.id) == 0
    minted = await client.post(f"{realm.api}/service-principals/{weak.id}/tokens", json={"name": "ok"}, headers=headers)
    assert minted.status_code == 201
    assert minted.headers["cache-control"] == "no-store"
    # Nor may they revoke the tokens of someone above them.
    admin_token_id = await scalar(realm, "SELECT id FROM api_tokens WHERE user_id = :u", u=realm.admin.id)
    revoke = await client.delete(f"{realm.api}/tokens/{admin_token_id}", headers=headers)
    assert revoke.status_code == 403
    assert revoke.json()["detail"].startswith("This user holds permissions you do not hold ("), revoke.text
    assert await scalar(realm, "SELECT revoked_at FROM api_tokens WHERE id = :t", t=admin_token_id) is None


# --- 4. The second factor is a browser's business ------------------------------------------------


async def test_an_account_token_cannot_enrol_a_second_factor(client: Client, realm: RealmHandle) -> None:
    user = await realm.user()
    headers = bearer(await realm.token(user, "account")) | HTML
    page = await client.get(f"/realms/{realm.slug}/mfa", headers=headers)
    assert page.status_code == 403
    secret = pyotp.random_base32()
    post = await client.post(
        f"/realms/{realm.slug}/mfa",
        data={"code": pyotp.TOTP(secret).now(), "enrolment": secret, "next": ""},
        headers=headers,
    )
    assert post.status_code == 403
    assert await scalar(realm, "SELECT totp_enabled_at FROM users WHERE id = :u", u=user.id) is None


async def test_resetting_a_second_factor_follows_the_rule_and_ends_sessions(client: Client, realm: RealmHandle) -> None:
    user = await realm.user()
    await enrol_totp(realm, user)
    login = await browser_session(realm, user, mfa=True)
    await sign_in_link(realm, user)  # made before the reset: it must not open a session after it
    target, _ = await organization_admin(realm)
    await enrol_totp(realm, target)
    _, headers = await holder_of(realm, "realm.users.write")
    refused = await client.post(f"{realm.api}/users/{target.id}/reset-mfa", headers=headers)
    assert refused.status_code == 403 and refused.json()["code"] == "target_outranks_actor"
    assert await scalar(realm, "SELECT totp_enabled_at FROM users WHERE id = :u", u=target.id) is not None
    done = await client.post(f"{realm.api}/users/{user.id}/reset-mfa", headers=headers)
    assert done.status_code == 200 and done.json()["mfa_enrolled"] is False
    assert await scalar(realm, "SELECT revoked_at FROM sessions WHERE id = :s", s=login.session_id) is not None
    assert await scalar(realm, "SELECT count(*) FROM audit_events WHERE type = 'user.mfa_reset'") == 1
    assert (
        await scalar(realm, "SELECT count(*) FROM sign_in_links WHERE user_id = :u AND used_at IS NULL", u=user.id) == 0
    )
    again = await client.post(f"{realm.api}/users/{user.id}/reset-mfa", headers=headers)
    assert again.status_code == 409


# --- 5. Numbers and times outside what can be stored ---------------------------------------------


async def test_revision_numbers_and_times_out_of_range_are_client_errors(client: Client, realm: RealmHandle) -> None:
    workflow = (
        await client.post(realm.api + "/workflows", json={"name": "W", "definition": MINIMAL}, headers=realm.headers)
    ).json()
    base = f"{realm.api}/workflows/{workflow['id']}"
    huge = 2**31
    for method, url in [
        ("GET", f"{base}/revisions/{huge}"),
        ("GET", f"{base}/revisions/{huge}/diff"),
        ("GET", f"{base}/revisions/1/diff?against={huge}"),
        ("POST", f"{base}/revisions/{huge}/approve"),
        ("POST", f"{base}/revisions/{huge}/reject"),
        ("POST", f"{base}/revisions/{huge}/publish"),
        ("GET", f"{base}/revisions/{2**70}"),
    ]:
        response = await client.request(method, url, headers=realm.headers, json={} if method == "POST" else None)
        assert response.status_code in {404, 422}, f"{method} {url}: {response.status_code}"
    # The last number PostgreSQL holds is looked up, the first beyond it is not: both unknown.
    for number in (2**31 - 1, huge):
        missing = await client.get(f"{base}/revisions/{number}", headers=realm.headers)
        assert (missing.status_code, missing.json()["detail"]) == (404, "No such revision."), number
    other_id = workflow["id"][:-1] + ("1" if workflow["id"][-1] == "0" else "0")
    unknown = await client.get(f"{realm.api}/workflows/{other_id}", headers=realm.headers)
    assert (unknown.status_code, unknown.json()["detail"]) == (404, "No such workflow.")
    rollback = await client.post(f"{base}/rollback", json={"revision": huge}, headers=realm.headers)
    assert rollback.status_code == 422 and rollback.json()["errors"][0]["path"] == "/revision"

    login = await browser_session(realm, realm.admin)
    client.cookies.set("cockpit_session", login.cookie, domain="testserver.local")
    page = await client.get(f"/realms/{realm.slug}/workflows/{workflow['id']}/revisions/{huge}", headers=HTML)
    assert page.status_code == 404
    client.cookies.clear()

    for query in ("since=9999-12-31T23:59:59-14:00", "until=0001-01-01T00:00:00%2B14:00"):
        audit = await client.get(f"{realm.api}/audit-events?{query}", headers=realm.headers)
        assert audit.status_code == 422, (query, audit.text)
        assert audit.json()["errors"][0]["path"].startswith("query:")

    role = await realm.role("helper", ["realm.users.read"])
    subject = await realm.user()
    expiry = await client.post(
        f"{realm.api}/role-assignments",
        json={"role_id": role.id, "user_id": subject.id, "expires_at": "9999-12-31T23:59:59-14:00"},
        headers=realm.headers,
    )
    assert expiry.status_code == 422 and expiry.json()["errors"][0]["path"] == "/expires_at", expiry.text
    assert await scalar(realm, "SELECT count(*) FROM role_assignments WHERE user_id = :u", u=subject.id) == 0


# --- 8. The publish-approval policy is a floor ---------------------------------------------------


async def test_the_publish_approval_policy_is_a_floor(client: Client, realm: RealmHandle) -> None:
    before = (
        await client.post(
            realm.api + "/workflows",
            json={"name": "Before", "requires_approval": False, "definition": MINIMAL},
            headers=realm.headers,
        )
    ).json()
    turned_on = await client.patch(
        realm.api + "/policy", json={"extensions": {"workflow_publish_approval": True}}, headers=realm.headers
    )
    assert turned_on.status_code == 200
    refused = await client.post(
        realm.api + "/workflows",
        json={"name": "Alone", "requires_approval": False, "definition": MINIMAL},
        headers=realm.headers,
    )
    assert refused.status_code == 422
    assert refused.json()["errors"] == [
        {
            "path": "/requires_approval",
            "code": "required_by_policy",
            "message": "the realm policy requires approval before publishing; it cannot be turned off",
        }
    ]
    assert await scalar(realm, "SELECT count(*) FROM workflows WHERE name = 'Alone'") == 0
    # A workflow made before the policy was turned on is held to it as well.
    publish = await client.post(
        f"{realm.api}/workflows/{before['id']}/revisions/1/publish", json={}, headers=realm.headers
    )
    assert publish.status_code == 403 and publish.json()["code"] == "approval_required"
    async with realm.sessions() as session, session.begin():
        policy = await session.get(RealmPolicy, realm.id)
        assert policy is not None
        policy.extensions = {"workflow_publish_approval": False}
    async with realm.sessions() as session, session.begin():
        published = await publish_revision(session, realm.actor, before["id"], 1)
    assert published.revision.status == "published"


# --- A run started by hand acts with its publisher's authority: not a way around the rule ---------


async def test_a_starter_cannot_aim_a_run_at_someone_stronger(client: Client, realm: RealmHandle) -> None:
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "suspend", "type": "suspend_user"}, {"id": "done", "type": "end"}],
    }
    workflow = (
        await client.post(
            realm.api + "/workflows", json={"name": "Offboard", "definition": definition}, headers=realm.headers
        )
    ).json()
    published = await client.post(
        f"{realm.api}/workflows/{workflow['id']}/revisions/1/publish", json={}, headers=realm.headers
    )
    assert published.status_code == 200
    target, _ = await organization_admin(realm)
    ordinary = await realm.user()
    _, headers = await holder_of(realm, "realm.workflows.run", "realm.users.suspend", "realm.users.read")
    url = f"{realm.api}/workflows/{workflow['id']}/runs"
    refused = await client.post(url, json={"subject_id": target.id}, headers=headers)
    assert refused.status_code == 403 and refused.json()["code"] == "target_outranks_actor", refused.text
    assert await scalar(realm, "SELECT count(*) FROM workflow_runs WHERE subject_id = :s", s=target.id) == 0
    started = await client.post(url, json={"subject_id": ordinary.id}, headers=headers)
    assert started.status_code == 202, started.text
