"""Telling approvers (engine/runs/approval_links.py): each approver's notice, named after its
workflow, with the one-time link in the mail only; a link opens its approval for its one user, in
its own realm, once."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.platform import crypto
from engine.platform.clock import FixedClock
from engine.platform.config import get_settings
from engine.platform.errors import NotFound
from engine.runs import approval_links
from engine.runs.approval_models import WorkflowApproval
from engine.runs.notices import LINK_PLACEHOLDER, LINK_PURPOSE
from testing.factories import RealmHandle, bearer
from testing.runs import drain, make_runner, rows, start
from testing.workflows import manual, publish

Client = AsyncTestClient[Litestar]


async def test_each_approver_is_told_with_a_link_to_the_path_when_no_public_address_is_set(
    realm: RealmHandle, other_realm: RealmHandle, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Without a public address the mail names the path on the cockpit's address; the notice row
    carries the run, workflow, approval and address; the link's row only its hash, with the
    approval's expiry, for its one user."""
    monkeypatch.delenv("COCKPIT_PUBLIC_URL", raising=False)
    get_settings.cache_clear()
    request.addfinalizer(get_settings.cache_clear)
    assert get_settings().public_url is None
    subject = await realm.user()
    first, second = await realm.user("first@example.com"), await realm.user("second@example.com")
    bystander = await realm.user()
    wid = await publish(
        realm,
        manual({"id": "approve", "type": "approval", "approvers": [first.id, second.id], "expires_in": "1h"}),
    )
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock, mail_configured=True))
    [(approval_id, expires_at)] = await rows(
        realm, "SELECT id, expires_at FROM workflow_approvals WHERE run_id = :r", r=run_id
    )
    [(name,)] = await rows(realm, "SELECT name FROM workflows WHERE id = :w", w=wid)
    notices = await rows(
        realm,
        "SELECT user_id, to_address, run_id, workflow_id, approval_id, notice, state, body, link_enc, created_at"
        " FROM workflow_notices WHERE run_id = :r ORDER BY to_address",
        r=run_id,
    )
    assert [n.user_id for n in notices] == [first.id, second.id]  # nobody else: not the subject, not a bystander
    assert bystander.id not in {n.user_id for n in notices}
    links = {
        user_id: (token_hash, link_approval, link_expires, used_at)
        for user_id, token_hash, link_approval, link_expires, used_at in await rows(
            realm,
            "SELECT user_id, token_hash, approval_id, expires_at, used_at FROM approval_links WHERE approval_id = :a",
            a=approval_id,
        )
    }
    assert set(links) == {first.id, second.id}
    for notice, user in zip(notices, (first, second), strict=True):
        assert (notice.to_address, notice.run_id, notice.workflow_id, notice.approval_id) == (
            user.email,
            run_id,
            wid,
            approval_id,
        )
        assert (notice.notice, notice.state, notice.created_at) == ("approval_requested", "queued", clock.now())
        body = html.unescape(notice.body)
        assert f'the workflow "{name}"' in body
        assert (
            "Decide after signing in: open the cockpit's approvals page, or use this one-time link"
            f" (a path on the cockpit's address): {LINK_PLACEHOLDER}"
        ) in body
        link = crypto.decrypt(get_settings().secret_key, LINK_PURPOSE, notice.link_enc)
        found = re.fullmatch(rf"/realms/{realm.slug}/approval-links/(apl_[A-Za-z0-9_-]{{43}})", link)
        assert found is not None, link
        assert links[user.id] == (crypto.token_hash(found.group(1)), approval_id, expires_at, None)


async def test_a_role_request_notice_is_named_after_the_role_assignment(realm: RealmHandle, client: Client) -> None:
    """A role assignment has no workflow: its approver's notice names it "Role assignment approval"."""
    role = await realm.role("payments", ["realm.users.read"], requires_approval=True)
    requester = await realm.user("requester@example.com")
    await realm.assign(requester, await realm.builtin_role("realm-admin"))
    approver = await realm.user("approver@example.com")
    await realm.assign(approver, await realm.builtin_role("realm-admin"))
    subject = await realm.user("subject@example.com")
    asked = await client.post(
        realm.api + "/role-assignments",
        json={"role_id": role.id, "user_id": subject.id, "approver_id": approver.id},
        headers=bearer(await realm.token(requester)),
    )
    assert asked.status_code == 202, asked.text
    approval_id = asked.json()["approval"]["id"]
    [notice] = await rows(
        realm,
        "SELECT user_id, to_address, run_id, workflow_id, notice, body FROM workflow_notices WHERE approval_id = :a",
        a=approval_id,
    )
    assert (notice.user_id, notice.to_address, notice.run_id, notice.workflow_id, notice.notice) == (
        approver.id,
        "approver@example.com",
        None,
        None,
        "approval_requested",
    )
    assert 'the workflow "Role assignment approval"' in html.unescape(notice.body)


async def test_a_link_opens_its_approval_only_in_its_own_realm_and_only_for_its_user(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    subject, approver, other = await realm.user(), await realm.user(), await realm.user()
    wid = await publish(
        realm, manual({"id": "approve", "type": "approval", "approvers": [approver.id], "expires_in": "1h"})
    )
    run_id = await start(realm, wid, subject.id)
    clock = FixedClock(datetime.now(UTC) + timedelta(seconds=5))
    await drain(make_runner(realm, clock, mail_configured=False))
    [(approval_id,)] = await rows(realm, "SELECT id FROM workflow_approvals WHERE run_id = :r", r=run_id)
    async with realm.sessions() as session, session.begin():
        row = await session.get(WorkflowApproval, approval_id)
        assert row is not None
        token = await approval_links.create_link(session, row, approver.id)

    async def redeem(realm_id: str, user_id: str) -> str:
        async with realm.sessions() as session:
            try:
                return await approval_links.redeem_link(session, realm_id, user_id, token, now=clock.now())
            except NotFound:
                return "not_found"
            finally:
                await session.rollback()

    assert await redeem(other_realm.id, approver.id) == "not_found"
    assert await redeem(realm.id, other.id) == "not_found"
    assert await redeem(realm.id, approver.id) == approval_id
