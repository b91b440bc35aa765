"""Approvals for tests: the pending one as its approver sees it, and a decision at a given time."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient

from engine.directory.audit import Actor
from engine.directory.models import User
from engine.runs import approvals
from testing.factories import RealmHandle, bearer
from testing.runs import rows

Client = AsyncTestClient[Litestar]


async def approval_of(client: Client, realm: RealmHandle, token: str, status: str = "pending") -> dict[str, Any]:
    response = await client.get(f"{realm.api}/approvals", params={"status": status}, headers=bearer(token))
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert len(items) == 1, items
    return dict(items[0])


async def approval_row(realm: RealmHandle, run_id: str, step_id: str) -> Any:
    [row] = await rows(
        realm,
        "SELECT id, created_at, remind_at, expires_at, reminded_at, status FROM workflow_approvals"
        " WHERE run_id = :r AND step_id = :s",
        r=run_id,
        s=step_id,
    )
    return row


async def decide(
    realm: RealmHandle, approver: User, run_id: str, step_id: str, *, approve: bool, comment: str | None, now: datetime
) -> str:
    """The approver decides (as the API does) at ``now``; the approval's id."""
    approval_id = str((await approval_row(realm, run_id, step_id)).id)
    async with realm.sessions() as session, session.begin():
        await approvals.decide(
            session,
            Actor(type="user", id=approver.id, realm_id=realm.id),
            approval_id,
            approve=approve,
            comment=comment,
            now=now,
        )
    return approval_id
