"""The users list's search and filters, and what a reset of a missing second factor says."""

from __future__ import annotations

from litestar import Litestar
from litestar.testing import AsyncTestClient

from testing.factories import RealmHandle, bearer

Client = AsyncTestClient[Litestar]


async def emails(client: Client, realm: RealmHandle, **params: str) -> list[str]:
    answer = await client.get(realm.api + "/users", params=params, headers=realm.headers)
    assert answer.status_code == 200, answer.text
    return sorted(u["email"] for u in answer.json()["items"])


async def test_the_list_finds_an_underscore_as_written(client: Client, realm: RealmHandle) -> None:
    lead = await realm.user("lead@example.com", display_name="Team_Lead")
    await realm.user("other@example.com", display_name="TeamXLead")
    assert await emails(client, realm, q="Team_Lead") == [lead.email]
    assert await emails(client, realm, q="team") == sorted([lead.email, "other@example.com"])


async def test_the_list_filters_guests_and_members(client: Client, realm: RealmHandle) -> None:
    visitor = await realm.user("visitor@example.com", guest=True)
    member = await realm.user("member@example.com")
    assert await emails(client, realm, guest="true") == [visitor.email]
    assert await emails(client, realm, guest="false") == sorted([realm.admin.email, member.email])
    assert await emails(client, realm) == sorted([realm.admin.email, member.email, visitor.email])


async def test_resetting_a_second_factor_nobody_enrolled_says_there_is_none(client: Client, realm: RealmHandle) -> None:
    user = await realm.user("plain@example.com")
    refused = await client.post(f"{realm.api}/users/{user.id}/reset-mfa", headers=realm.headers)
    assert refused.status_code == 409
    assert (refused.json()["code"], refused.json()["detail"]) == (
        "mfa_not_enrolled",
        "The user has no second factor to reset.",
    )


async def test_a_new_display_name_is_checked_for_hidden_characters_with_the_password(
    client: Client, realm: RealmHandle
) -> None:
    user = await realm.user("named@example.com", display_name="Named")
    url = f"{realm.api}/users/{user.id}"
    hidden = await client.patch(url, json={"display_name": "Na\u200bmed"}, headers=realm.headers)
    assert hidden.status_code == 422, hidden.text
    assert [(e["path"], e["code"]) for e in hidden.json()["errors"]] == [("/display_name", "invisible_character")]
    short = await client.patch(url, json={"display_name": "Renamed", "password": "x"}, headers=realm.headers)
    assert short.status_code == 422, short.text
    assert [e["path"] for e in short.json()["errors"]] == ["/password"]
    assert (await client.get(url, headers=realm.headers)).json()["display_name"] == "Named"


async def test_a_refused_change_names_the_user_and_what_was_refused(client: Client, realm: RealmHandle) -> None:
    org = await realm.organization()
    target = await realm.user()
    await realm.member(org, target)
    org_admin = await realm.role("org-admin-x", ["org.*"], boundary="organization")
    await realm.assign(target, org_admin, organization_id=org.id)
    holder = await realm.user()
    await realm.assign(holder, await realm.role("writer-x", ["realm.users.write", "realm.users.read"]))
    refused = await client.patch(
        f"{realm.api}/users/{target.id}", json={"display_name": "Mallory"}, headers=bearer(await realm.token(holder))
    )
    assert refused.status_code == 403, refused.text
    detail = refused.json()["detail"]
    assert detail.startswith("This user holds permissions you do not hold (") and org.id in detail, detail
    assert detail.endswith("; you cannot change their profile or password."), detail
