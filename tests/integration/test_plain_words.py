"""Small things said plainly: a deleted reference is not a refusal of authority, a draft's Start is
disabled, and the sign-in pages point to the button an administrator has (not to a command)."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from testing.factories import HTML, RealmHandle
from testing.pages import signed_in
from testing.workflows import manual, publish

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
    assert (
        "Your own authority must cover every step of the workflow" not in page.text
        and "<code>forbidden</code>" not in page.text
    )
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


async def test_a_name_over_its_limit_is_refused_with_the_limit_named(client: Client, realm: RealmHandle) -> None:
    """The browser no longer cuts a long name silently (no ``maxlength`` on name fields): the
    server refuses it and says the limit; the last allowed length is kept."""
    login = await signed_in(client, realm)
    roles = f"/realms/{realm.slug}/roles"
    form = (await client.get(roles, headers=HTML)).text
    field = form.split('id="role-name"')[1].split(">")[0]
    assert "maxlength" not in field
    too_long = await client.post(
        roles,
        data={"name": "r" * 101, "boundary": "realm", "permissions": "realm.users.read", "_csrf": login.csrf},
        headers=HTML,
    )
    assert too_long.status_code == 422 and "must be at most 100 characters" in too_long.text
    assert 'value="' + "r" * 101 + '"' in too_long.text  # what was typed stays, whole, to be shortened
    longest = await client.post(
        roles,
        data={"name": "r" * 100, "boundary": "realm", "permissions": "realm.users.read", "_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert longest.status_code == 303, longest.text[:500]


async def test_a_start_form_sent_twice_starts_one_run_and_answers_a_friendly_409(
    client: Client, realm: RealmHandle, caplog: pytest.LogCaptureFixture
) -> None:
    subject = await realm.user("twice@example.com")
    wid = await publish(realm, manual({"id": "done", "type": "end"}), "Twice")
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/workflows/{wid}/runs/start"
    form = (await client.get(url, headers=HTML)).text
    submission = re.search(r'name="submission" value="([0-9a-z]{26})"', form)
    assert submission is not None
    data = {"subject": subject.email, "organization_id": "", "submission": submission.group(1), "_csrf": login.csrf}
    caplog.set_level(logging.INFO)
    answers = await asyncio.gather(
        *(client.post(url, data=data, headers=HTML, follow_redirects=False) for _ in range(2))
    )
    assert sorted(a.status_code for a in answers) == [303, 409]
    [second] = [a for a in answers if a.status_code == 409]
    assert "This form was sent twice: the run started once" in second.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    async with realm.sessions() as session:
        started = (
            await session.execute(text("SELECT count(*) FROM workflow_runs WHERE workflow_id = :w"), {"w": wid})
        ).scalar()
    assert started == 1
    # A new form is a new key: the next start is a new run.
    again = (await client.get(url, headers=HTML)).text
    fresh = re.search(r'name="submission" value="([0-9a-z]{26})"', again)
    assert fresh is not None and fresh.group(1) != submission.group(1)
    third = await client.post(url, data=data | {"submission": fresh.group(1)}, headers=HTML, follow_redirects=False)
    assert third.status_code == 303
    bad = await client.post(url, data=data | {"submission": "not-a-key"}, headers=HTML, follow_redirects=False)
    assert bad.status_code == 422
