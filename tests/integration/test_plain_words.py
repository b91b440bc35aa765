"""Small things said plainly: a deleted reference is not a refusal of authority, a draft's Start is
disabled, and the sign-in pages point to the button an administrator has (not to a command)."""

from __future__ import annotations

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from tests.factories import HTML, RealmHandle
from tests.integration.test_run_pages import manual, publish, signed_in

Client = AsyncTestClient[Litestar]


async def test_a_deleted_role_is_said_as_such_not_as_forbidden(client: Client, realm: RealmHandle) -> None:
    subject = await realm.user("grantee@example.com")
    role = await realm.role("Lab access", ["realm.users.read"])
    wid = await publish(
        realm, manual({"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}), "Grant lab"
    )
    async with realm.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM roles WHERE id = :id"), {"id": role.id})

    answer = await client.post(
        f"{realm.api}/workflows/{wid}/runs", json={"subject_id": subject.id}, headers=realm.headers
    )
    assert answer.status_code == 409, answer.text
    body = answer.json()
    assert body["detail"].startswith("A step of the published revision names something that no longer exists")
    assert [e["code"] for e in body["errors"]] == ["not_found"]

    login = await signed_in(client, realm)
    page = await client.post(
        f"/realms/{realm.slug}/workflows/{wid}/runs/start",
        data={"subject": subject.email, "organization_id": "", "confirm": "yes", "_csrf": login.csrf},
        headers=HTML,
    )
    assert page.status_code == 409
    assert "names something that no longer exists" in page.text
    assert "Your own authority must cover" not in page.text and "<code>forbidden</code>" not in page.text
    assert "The step names a role that does not exist." in page.text


async def test_authority_that_falls_short_is_still_forbidden(client: Client, realm: RealmHandle) -> None:
    """The other side: a role that exists but outranks the starter stays a 403 ``forbidden``."""
    subject = await realm.user("other@example.com")
    starter = await realm.user("starter@example.com")
    await realm.assign(starter, await realm.role("Runner", ["realm.workflows.run", "realm.workflows.read"]))
    role = await realm.role("Big", ["realm.users.write"])
    wid = await publish(
        realm, manual({"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}), "Grant big"
    )
    answer = await client.post(
        f"{realm.api}/workflows/{wid}/runs",
        json={"subject_id": subject.id},
        headers={"Authorization": f"Bearer {await realm.token(starter)}"},
    )
    assert answer.status_code == 403 and answer.json()["code"] == "forbidden", answer.text


async def test_sign_in_pages_point_to_the_administrators_button(client: Client, realm: RealmHandle) -> None:
    for path in ("/sign-in", "/sign-in/link?token=not-a-token"):
        page = await client.get(f"/realms/{realm.slug}{path}", headers=HTML)
        assert page.status_code in (200, 400), path
        assert "Make a sign-in link" in page.text and "uv run cockpit" not in page.text, path
