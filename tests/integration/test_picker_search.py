"""The pickers' search over each kind of directory object: what matches, in which order, page by page."""

from __future__ import annotations

import pytest

from engine.directory.models import Group, WebhookSubscription
from engine.directory.search import Candidate, search_directory
from engine.platform.ids import new_id
from testing.factories import RealmHandle


async def search(
    realm: RealmHandle, kind: str, q: str = "", *, offset: int = 0, limit: int = 20
) -> tuple[list[tuple[str, str, str]], bool]:
    async with realm.sessions() as session:
        found, more = await search_directory(session, realm.id, kind, q, offset=offset, limit=limit)
    assert all(isinstance(c, Candidate) for c in found)
    return [(c.id, c.name, c.detail) for c in found], more


async def test_roles_match_by_name_anywhere_or_by_id_in_name_order(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    b = await realm.role("Beta 50% readers", [], boundary="organization")
    z = await realm.role("Zeta alphaXreaders", [])
    a = await realm.role("Alpha_readers", [])
    await other_realm.role("Alpha elsewhere", [])
    assert await search(realm, "role", "  ALPHA_ ") == ([(a.id, "Alpha_readers", "realm")], False)
    assert await search(realm, "role", "50%") == ([(b.id, "Beta 50% readers", "organization")], False)
    assert await search(realm, "role", f" {b.id} ") == ([(b.id, "Beta 50% readers", "organization")], False)
    assert await search(realm, "role", "elsewhere") == ([], False)
    assert [c[0] for c in (await search(realm, "role", "readers"))[0]] == [a.id, b.id, z.id]


async def test_a_page_is_told_whether_another_follows(realm: RealmHandle) -> None:
    made = [await realm.role(f"Paged {i}", []) for i in range(5)]
    ids = [r.id for r in made]
    first, more = await search(realm, "role", "paged", limit=2)
    assert [c[0] for c in first] == ids[:2] and more is True
    middle, more = await search(realm, "role", "paged", offset=2, limit=2)
    assert [c[0] for c in middle] == ids[2:4] and more is True
    last, more = await search(realm, "role", "paged", offset=4, limit=2)
    assert [c[0] for c in last] == ids[4:] and more is False
    exact, more = await search(realm, "role", "paged", limit=5)
    assert len(exact) == 5 and more is False
    before_the_start, _ = await search(realm, "role", "paged", offset=-3, limit=2)
    assert before_the_start == first
    everything, _ = await search(realm, "role", "   ", limit=100)
    assert set(ids) <= {c[0] for c in everything} and len(everything) > 5  # the built-in roles too


async def test_groups_show_their_organization_and_match_by_name_or_id(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    finance = await realm.organization("Acme Finance")
    sales = await realm.organization("Acme Sales")
    elsewhere = await other_realm.organization("Elsewhere")
    async with realm.sessions() as session, session.begin():
        payroll = Group(id=new_id("grp"), realm_id=realm.id, organization_id=finance.id, name="Payroll")
        accounts = Group(id=new_id("grp"), realm_id=realm.id, organization_id=sales.id, name="Accounts")
        foreign = Group(id=new_id("grp"), realm_id=other_realm.id, organization_id=elsewhere.id, name="Accounts 2")
        session.add_all([payroll, accounts, foreign])
    assert await search(realm, "group") == (
        [(accounts.id, "Accounts", "Acme Sales"), (payroll.id, "Payroll", "Acme Finance")],
        False,
    )
    assert await search(realm, "group", "ROLL") == ([(payroll.id, "Payroll", "Acme Finance")], False)
    assert await search(realm, "group", f" {accounts.id} ") == ([(accounts.id, "Accounts", "Acme Sales")], False)
    assert await search(realm, "group", foreign.id) == ([], False)


async def test_users_match_by_name_email_or_id_and_each_page_is_shown_by_name(realm: RealmHandle) -> None:
    zoe = await realm.user("zoe@example.com", display_name="zoe Quinn")
    ada = await realm.user("lovelace@example.org", display_name="Ada")
    bob = await realm.user("bob@example.com", display_name="Bob_Marley")
    await realm.user("bobxmarley@example.com", display_name="BobXMarley")
    assert await search(realm, "user", "EXAMPLE.ORG") == ([(ada.id, "Ada", "lovelace@example.org")], False)
    assert await search(realm, "user", "quinn") == ([(zoe.id, "zoe Quinn", "zoe@example.com")], False)
    assert await search(realm, "user", zoe.id) == ([(zoe.id, "zoe Quinn", "zoe@example.com")], False)
    assert await search(realm, "user", "b_m") == ([(bob.id, "Bob_Marley", "bob@example.com")], False)
    found, _ = await search(realm, "user", "e", limit=100)
    names = [name for _, name, _ in found]
    assert names == sorted(names, key=str.casefold) and names.index("Ada") < names.index("zoe Quinn")


async def test_organizations_show_their_state(realm: RealmHandle) -> None:
    active = await realm.organization("North office")
    closed = await realm.organization("North annex")
    async with realm.sessions() as session, session.begin():
        row = await session.get(type(closed), closed.id)
        assert row is not None
        row.state = "inactive"
    assert await search(realm, "organization", "north") == (
        [(closed.id, "North annex", "inactive"), (active.id, "North office", "active")],
        False,
    )
    assert await search(realm, "organization", active.id) == ([(active.id, "North office", "active")], False)


async def test_subscriptions_match_by_destination_or_id_and_deleted_ones_are_not_listed(realm: RealmHandle) -> None:
    def hook(destination: str, state: str = "active") -> WebhookSubscription:
        return WebhookSubscription(
            id=new_id("whk"), realm_id=realm.id, destination=destination, secret_enc="x", state=state
        )

    payroll = hook("https://pay.example.com/", "paused")
    hr = hook("https://hooks.example.com/hr")
    gone = hook("https://hooks.example.com/old", "deleted")
    async with realm.sessions() as session, session.begin():
        session.add_all([hr, payroll, gone])
    assert await search(realm, "subscription") == (
        [(hr.id, "https://hooks.example.com/hr", "active"), (payroll.id, "https://pay.example.com/", "paused")],
        False,
    )
    assert await search(realm, "subscription", "HOOKS") == ([(hr.id, "https://hooks.example.com/hr", "active")], False)
    assert await search(realm, "subscription", payroll.id) == (
        [(payroll.id, "https://pay.example.com/", "paused")],
        False,
    )
    assert await search(realm, "subscription", gone.id) == ([], False)


async def test_an_unknown_kind_is_a_key_error(realm: RealmHandle) -> None:
    with pytest.raises(KeyError):
        await search(realm, "workflow", "x")
