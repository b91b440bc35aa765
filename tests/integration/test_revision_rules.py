"""Revisions through the engine (engine/workflows/revisions.py): numbers and "nothing changed" are
judged within one workflow, each staging and decision is audited on its workflow, the author's
refusal names itself, and the diff names the two revisions it compares."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.audit import Actor
from engine.platform.errors import Conflict, Forbidden
from engine.workflows.catalog import create_workflow
from engine.workflows.revisions import Staged, decide_revision, stage_revision
from testing.factories import RealmHandle, independent_admin

Client = AsyncTestClient[Litestar]
DEFINITION: dict[str, Any] = {
    "schema_version": 1,
    "triggers": [{"type": "manual"}],
    "steps": [{"id": "done", "type": "end"}],
}


def waiting(duration: str) -> dict[str, Any]:
    return DEFINITION | {
        "steps": [{"id": "pause", "type": "wait", "duration": duration}, {"id": "done", "type": "end"}]
    }


async def workflow(realm: RealmHandle, name: str) -> str:
    async with realm.sessions() as session, session.begin():
        made, _ = await create_workflow(session, realm.actor, name=name, definition=DEFINITION, has_definition=True)
        return made.id


async def stage(realm: RealmHandle, workflow_id: str, definition: dict[str, Any]) -> Staged:
    async with realm.sessions() as session, session.begin():
        return await stage_revision(session, realm.actor, workflow_id, definition)


async def events(realm: RealmHandle, workflow_id: str, kind: str) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, subject_type, details FROM audit_events"
                " WHERE subject_id = :w AND type LIKE :k ORDER BY id"
            ),
            {"w": workflow_id, "k": kind},
        )
        return [tuple(row) for row in rows]


async def test_numbers_and_the_latest_revision_are_those_of_the_same_workflow(realm: RealmHandle) -> None:
    busy = await workflow(realm, "Busy")
    assert (await stage(realm, busy, waiting("1h"))).revision.number == 2
    assert (await stage(realm, busy, waiting("2h"))).revision.number == 3
    quiet = await workflow(realm, "Quiet")
    # The same text as the other workflow's latest revision is a change here: revision 2.
    staged = await stage(realm, quiet, waiting("2h"))
    assert staged.unchanged is False
    assert (staged.revision.workflow_id, staged.revision.number) == (quiet, 2)
    same = await stage(realm, quiet, waiting("2h"))
    assert same.unchanged is True and same.revision.id == staged.revision.id
    hashes = {}
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT number, hash FROM workflow_revisions WHERE workflow_id = :w"), {"w": quiet}
        )
        hashes = {int(n): str(h) for n, h in rows}
    assert sorted(hashes) == [1, 2]
    assert await events(realm, quiet, "workflow.revision.staged") == [
        ("workflow.revision.staged", "workflow", {"revision": 1, "hash": hashes[1]}),
        ("workflow.revision.staged", "workflow", {"revision": 2, "hash": hashes[2]}),
    ]


async def test_decisions_are_audited_with_their_comment_and_the_author_is_refused_by_name(
    realm: RealmHandle,
) -> None:
    reviewer, _ = await independent_admin(realm, "reviewer@example.com")
    second = Actor(type="user", id=reviewer.id, realm_id=realm.id, mfa_session=True)
    approved, rejected = await workflow(realm, "Approved"), await workflow(realm, "Rejected")
    async with realm.sessions() as session, session.begin():
        with pytest.raises(Forbidden) as own:
            await decide_revision(session, realm.actor, approved, 1, approve=True, comment=None)
    assert own.value.code == "separation_of_duties"
    assert own.value.detail == "The author of a revision cannot approve or reject it."
    async with realm.sessions() as session, session.begin():
        await decide_revision(session, second, approved, 1, approve=True, comment="fine")
        await decide_revision(session, second, rejected, 1, approve=False, comment="no")
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT workflow_id, status, decided_by, decision_comment FROM workflow_revisions WHERE realm_id = :r"
            ),
            {"r": realm.id},
        )
        decided = {row[0]: tuple(row[1:]) for row in rows}
    assert decided == {approved: ("approved", reviewer.id, "fine"), rejected: ("rejected", reviewer.id, "no")}
    assert await events(realm, approved, "workflow.revision.approved") == [
        ("workflow.revision.approved", "workflow", {"revision": 1, "comment": "fine"})
    ]
    assert await events(realm, rejected, "workflow.revision.rejected") == [
        ("workflow.revision.rejected", "workflow", {"revision": 1, "comment": "no"})
    ]
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE workflows SET plugin_id = 'acme-hr' WHERE id = :w"), {"w": rejected})
    for approve, verb in ((True, "approve"), (False, "reject")):
        async with realm.sessions() as session, session.begin():
            with pytest.raises(Conflict) as managed:
                await decide_revision(session, second, rejected, 1, approve=approve, comment=None)
        assert (
            managed.value.detail == f"This workflow was installed by the plugin acme-hr; {verb} it through the plugin."
        )


async def test_the_diff_names_the_revision_and_the_one_it_is_against(client: Client, realm: RealmHandle) -> None:
    wid = await workflow(realm, "Diffed")
    await stage(realm, wid, waiting("1h"))
    answer = await client.get(
        f"{realm.api}/workflows/{wid}/revisions/2/diff", params={"against": "1"}, headers=realm.headers
    )
    assert answer.status_code == 200, answer.text
    assert (answer.json()["revision"], answer.json()["against"]) == (2, 1)
