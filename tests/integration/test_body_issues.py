"""Every issue of a request body at once, however deep, each at its JSON pointer.

A probe route beside the real ones takes a body with nested objects and lists of objects (the
shape of an invitation: a team with a lead, and members with emails), so nesting is checked at
every level the request bodies can have; the real bulk runs body is checked the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar import Litestar, post
from litestar.params import JSONBody
from litestar.testing import AsyncTestClient

from cockpit.api.common import Body, check, email_issue
from cockpit.app import create_app
from engine.platform.config import Settings
from engine.platform.errors import Issue
from testing.factories import RealmHandle

Client = AsyncTestClient[Litestar]
PROBE = "/api/v1/probe/invitations"


class Member(Body):
    email: str
    role: str = "reader"

    def field_issues(self) -> list[Issue]:
        return email_issue("/email", self.email)


class Team(Body):
    name: str
    lead: Member | None = None


class Invitation(Body):
    team: Team
    members: list[Member]
    note: str | None = None


@post(PROBE, opt={"public": True}, status_code=200, include_in_schema=False)
async def invite(data: JSONBody[Invitation]) -> dict[str, Any]:
    check(data.field_issues())
    return {"invited": len(data.members)}


@pytest.fixture
async def probe(settings: Settings, database_url: str) -> AsyncIterator[Client]:
    app = create_app(settings, database_url=database_url)
    app.register(invite)  # a probe beside the real routes, under the same guards and problem answers
    async with AsyncTestClient(app=app) as client:
        yield client


def issues_of(response: Any) -> set[tuple[str, str]]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == "validation_failed"
    return {(e["path"], e["code"]) for e in body["errors"]}


async def test_nested_unknown_members_and_bad_values_are_all_reported(probe: Client) -> None:
    response = await probe.post(
        PROBE,
        json={
            "team": {"name": "Ops", "lead": {"email": "lead-at-nowhere", "shoe": 44}},
            "members": [
                {"email": "ada@example.com"},
                {"email": "not-an-email", "admin": True},
                {"role": 5},
            ],
            "stray": 1,
        },
    )
    assert issues_of(response) == {
        ("/stray", "unknown_member"),
        ("/team/lead/shoe", "unknown_member"),
        ("/team/lead/email", "invalid_email"),
        ("/members/1/admin", "unknown_member"),
        ("/members/1/email", "invalid_email"),
        ("/members/2/role", "wrong_type"),
        ("/members/2/email", "required"),
    }


async def test_a_body_that_reads_well_has_its_nested_values_checked(probe: Client) -> None:
    response = await probe.post(
        PROBE,
        json={
            "team": {"name": "Ops", "lead": {"email": "lead@"}},
            "members": [{"email": "ada@example.com"}, {"email": "grace"}],
        },
    )
    assert issues_of(response) == {("/team/lead/email", "invalid_email"), ("/members/1/email", "invalid_email")}
    good = await probe.post(PROBE, json={"team": {"name": "Ops"}, "members": [{"email": "ada@example.com"}]})
    assert good.status_code == 200 and good.json() == {"invited": 1}


async def test_wrong_types_deep_in_lists_and_objects_keep_their_paths(probe: Client) -> None:
    response = await probe.post(PROBE, json={"team": "Ops", "members": {"email": "a@example.com"}, "note": 7})
    assert issues_of(response) == {
        ("/team", "wrong_type"),
        ("/members", "wrong_type"),
        ("/note", "wrong_type"),
    }
    items = await probe.post(PROBE, json={"team": {"name": 1}, "members": ["ada@example.com", None]})
    assert issues_of(items) == {
        ("/team/name", "wrong_type"),
        ("/members/0", "wrong_type"),
        ("/members/1", "wrong_type"),
    }


async def test_the_bulk_runs_filter_reports_every_issue_and_changes_nothing(client: Client, realm: RealmHandle) -> None:
    response = await client.post(
        realm.api + "/workflow-runs/bulk",
        json={"action": "cancel", "filter": {"state": 5, "colour": "red", "created_after": "yesterday"}, "why": 1},
        headers=realm.headers,
    )
    assert issues_of(response) == {
        ("/why", "unknown_member"),
        ("/filter/colour", "unknown_member"),
        ("/filter/state", "wrong_type"),
        ("/filter/created_after", "invalid"),
    }


async def test_a_query_parameter_of_the_wrong_type_is_named_by_its_name(client: Client, realm: RealmHandle) -> None:
    response = await client.get(realm.api + "/users?limit=ten&guest=maybe", headers=realm.headers)
    assert issues_of(response) == {("query:limit", "invalid"), ("query:guest", "invalid")}
