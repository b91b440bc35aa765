"""Publication and rollback through the engine (engine/workflows/publication.py): the message of
each refusal, the audit event, the other workflows' revisions left alone, the workflow's lock, and
the publisher's authority read at the moment of publishing (an expired grant counts for nothing)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from engine.directory.audit import Actor
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Conflict, EngineError, Forbidden, GrantCeilingExceeded, Issue, ValidationFailed
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision, rollback
from engine.workflows.revisions import stage_revision
from testing.factories import RealmHandle

DEFINITION: dict[str, Any] = {
    "schema_version": 1,
    "triggers": [{"type": "manual"}],
    "steps": [{"id": "done", "type": "end"}],
}


def waiting(duration: str) -> dict[str, Any]:
    return DEFINITION | {
        "steps": [{"id": "pause", "type": "wait", "duration": duration}, {"id": "done", "type": "end"}]
    }


async def workflow(realm: RealmHandle, name: str, *, requires_approval: bool = False) -> str:
    async with realm.sessions() as session, session.begin():
        made, _ = await create_workflow(
            session,
            realm.actor,
            name=name,
            requires_approval=requires_approval,
            definition=DEFINITION,
            has_definition=True,
        )
        return made.id


async def stage(realm: RealmHandle, workflow_id: str, definition: dict[str, Any]) -> int:
    async with realm.sessions() as session, session.begin():
        return (await stage_revision(session, realm.actor, workflow_id, definition)).revision.number


async def publish(realm: RealmHandle, workflow_id: str, number: int, actor: Actor | None = None, **kw: Any) -> None:
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, actor or realm.actor, workflow_id, number, **kw)


async def roll_back(realm: RealmHandle, workflow_id: str, number: int, actor: Actor | None = None) -> None:
    async with realm.sessions() as session, session.begin():
        await rollback(session, actor or realm.actor, workflow_id, number)


async def refusal(call: Any) -> EngineError:
    with pytest.raises(EngineError) as raised:
        await call
    return raised.value


async def statuses(realm: RealmHandle, workflow_id: str) -> dict[int, str]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT number, status FROM workflow_revisions WHERE workflow_id = :w"), {"w": workflow_id}
        )
        return {int(n): str(s) for n, s in rows}


async def test_every_refusal_of_publish_and_rollback_says_why(realm: RealmHandle) -> None:
    wid = await workflow(realm, "Refusals")
    robot = Actor(type="service_principal", id="spr_robot", realm_id=realm.id)
    only_user = await refusal(publish(realm, wid, 1, robot))
    assert isinstance(only_user, Forbidden)
    assert only_user.detail == "Only a user can be accountable for a published revision."
    writer = await realm.user("writer@example.com")
    await realm.assign(writer, await realm.role("writer", ["realm.workflows.read", "realm.workflows.write"]))
    lacking = await refusal(publish(realm, wid, 1, Actor(type="user", id=writer.id, realm_id=realm.id)))
    assert isinstance(lacking, Forbidden)
    assert lacking.detail == "Publishing needs the permission realm.workflows.publish."
    too_long = await refusal(publish(realm, wid, 1, comment="x" * 1001))
    assert isinstance(too_long, ValidationFailed)
    assert too_long.issues == [Issue("/comment", "too_long", "A comment has at most 1000 characters.")]
    assert await statuses(realm, wid) == {1: "draft"}

    await publish(realm, wid, 1, comment="x" * 1000)
    again = await refusal(publish(realm, wid, 1))
    assert isinstance(again, Conflict) and again.detail == "This revision is already published."
    published = await refusal(roll_back(realm, wid, 1))
    assert isinstance(published, Conflict) and published.detail == "This revision is the published one already."
    assert await stage(realm, wid, waiting("1h")) == 2
    never_published = await refusal(roll_back(realm, wid, 2))
    assert isinstance(never_published, Conflict)
    assert never_published.detail == (
        "Only a revision that was published before can be rolled back to; publish drafts instead."
    )
    await publish(realm, wid, 2)
    superseded = await refusal(publish(realm, wid, 1))
    assert isinstance(superseded, Conflict)
    assert superseded.detail == "A superseded revision is not published again directly; roll back to it instead."
    for number in (0, 2**31):
        out_of_range = await refusal(roll_back(realm, wid, number))
        assert isinstance(out_of_range, ValidationFailed)
        assert out_of_range.issues == [Issue("/revision", "out_of_range", "is not a revision number")]
    assert await stage(realm, wid, waiting("2h")) == 3
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE workflow_revisions SET status = 'rejected' WHERE workflow_id = :w AND number = 3"), {"w": wid}
        )
    rejected = await refusal(publish(realm, wid, 3))
    assert isinstance(rejected, Conflict) and rejected.detail == "A rejected revision cannot be published."
    assert await statuses(realm, wid) == {1: "superseded", 2: "published", 3: "rejected"}

    reviewed = await workflow(realm, "Reviewed", requires_approval=True)
    unapproved = await refusal(publish(realm, reviewed, 1))
    assert isinstance(unapproved, Forbidden) and unapproved.code == "approval_required"
    assert unapproved.detail == "This workflow requires an approved revision before publishing."

    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE workflows SET plugin_id = 'acme-hr' WHERE id = :w"), {"w": wid})
    for call, verb in ((publish(realm, wid, 3), "publish"), (roll_back(realm, wid, 1), "roll back")):
        managed = await refusal(call)
        assert isinstance(managed, Conflict) and managed.code == "plugin_managed"
        assert managed.detail == f"This workflow was installed by the plugin acme-hr; {verb} it through the plugin."


async def test_publishing_and_rolling_back_are_audited_on_the_workflow(realm: RealmHandle) -> None:
    wid = await workflow(realm, "Audited")
    await publish(realm, wid, 1, comment="first")
    await stage(realm, wid, waiting("1h"))
    await publish(realm, wid, 2)
    await roll_back(realm, wid, 1)
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT type, subject_type, details, actor_id FROM audit_events"
                " WHERE subject_id = :w AND type IN ('workflow.published', 'workflow.rolled_back') ORDER BY id"
            ),
            {"w": wid},
        )
        events = [tuple(row) for row in rows]
        rows = await session.execute(
            text("SELECT number, hash FROM workflow_revisions WHERE workflow_id = :w"), {"w": wid}
        )
        hashes = {int(n): str(h) for n, h in rows}
    admin = realm.admin.id
    assert events == [
        (
            "workflow.published",
            "workflow",
            {"revision": 1, "superseded": None, "hash": hashes[1], "state": "active", "comment": "first"},
            admin,
        ),
        (
            "workflow.published",
            "workflow",
            {"revision": 2, "superseded": 1, "hash": hashes[2], "state": "active", "comment": None},
            admin,
        ),
        (
            "workflow.rolled_back",
            "workflow",
            {"revision": 1, "superseded": 2, "hash": hashes[1], "state": "active", "comment": None},
            admin,
        ),
    ]


async def test_publishing_supersedes_only_the_same_workflows_revision(realm: RealmHandle) -> None:
    first, second = await workflow(realm, "First"), await workflow(realm, "Second")
    await publish(realm, first, 1)
    await publish(realm, second, 1)
    await stage(realm, second, waiting("1h"))
    await publish(realm, second, 2)
    assert await statuses(realm, first) == {1: "published"}
    assert await statuses(realm, second) == {1: "superseded", 2: "published"}
    await roll_back(realm, second, 1)
    assert await statuses(realm, first) == {1: "published"}
    assert await statuses(realm, second) == {1: "published", 2: "superseded"}


@pytest.mark.parametrize("call", ["publish", "rollback"])
async def test_publish_and_rollback_wait_for_the_workflows_lock(realm: RealmHandle, call: str) -> None:
    """A publish or a rollback locks the workflow's row (FOR UPDATE) before reading it: while
    another transaction holds even a key-share lock on it, neither goes on."""
    wid = await workflow(realm, "Locked")
    await publish(realm, wid, 1)
    await stage(realm, wid, waiting("1h"))
    await publish(realm, wid, 2)
    await stage(realm, wid, waiting("2h"))
    async with realm.sessions() as holder, holder.begin():
        # The weakest row lock: it blocks FOR UPDATE, not an UPDATE of the row's other columns.
        await holder.execute(text("SELECT 1 FROM workflows WHERE id = :w FOR KEY SHARE"), {"w": wid})
        async with realm.sessions() as session:
            await session.execute(text("SET lock_timeout = '300ms'"))
            with pytest.raises(Exception, match="lock timeout"):
                if call == "publish":
                    await publish_revision(session, realm.actor, wid, 3)
                else:
                    await rollback(session, realm.actor, wid, 1)
            await session.rollback()
    assert await statuses(realm, wid) == {1: "superseded", 2: "published", 3: "draft"}


async def test_the_publishers_authority_is_read_at_the_moment_an_expired_grant_counts_for_nothing(
    realm: RealmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grant that expires exactly now is gone; one that expires a microsecond later still counts:
    both for the permission to publish and for the delegation ceiling of a step."""
    moment = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(SYSTEM_CLOCK, "now", lambda: moment)
    granted = await realm.role("granted", ["realm.audit.read"])
    body = DEFINITION | {
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": granted.id, "scope": "realm"},
            DEFINITION["steps"][0],
        ]
    }
    wid = await workflow(realm, "Expiry")
    assert await stage(realm, wid, body) == 2

    async def publisher(email: str, *, expires_in: timedelta) -> Actor:
        person = await realm.user(email)
        await realm.assign(person, await realm.role(f"publish {email}", ["realm.workflows.*"]), expires_in=expires_in)
        await realm.assign(person, await realm.role(f"audit {email}", ["realm.audit.read"]), expires_in=expires_in)
        return Actor(type="user", id=person.id, realm_id=realm.id)

    async def expire_now(actor: Actor, roles: str) -> None:
        async with realm.sessions() as session, session.begin():
            await session.execute(
                text(
                    "UPDATE role_assignments SET expires_at = :t WHERE user_id = :u"
                    " AND role_id IN (SELECT id FROM roles WHERE name LIKE :n)"
                ),
                {"t": moment, "u": actor.id, "n": roles + " %"},
            )

    tick = timedelta(microseconds=1)
    expired_publish = await publisher("a@example.com", expires_in=timedelta(hours=1))
    await expire_now(expired_publish, "publish")
    refused = await refusal(publish(realm, wid, 2, expired_publish))
    assert isinstance(refused, Forbidden) and refused.detail.startswith("Publishing needs the permission")

    expired_ceiling = await publisher("b@example.com", expires_in=timedelta(hours=1))
    await expire_now(expired_ceiling, "audit")
    ceiling = await refusal(publish(realm, wid, 2, expired_ceiling))
    assert isinstance(ceiling, GrantCeilingExceeded)
    assert [i.path for i in ceiling.issues] == ["/definition/steps/0"]
    assert await statuses(realm, wid) == {1: "draft", 2: "draft"}

    # Both grants expiring a microsecond after now still hold: the same revision is published.
    await publish(realm, wid, 2, await publisher("c@example.com", expires_in=tick))
    assert await statuses(realm, wid) == {1: "draft", 2: "published"}


async def test_publishing_checks_the_references_again(realm: RealmHandle) -> None:
    """A role deleted after its revision was staged stops the publication: the references are read
    again when publishing, not trusted from staging."""
    gone = await realm.role("gone", ["realm.audit.read"])
    wid = await workflow(realm, "Stale")
    body = DEFINITION | {"steps": [{"id": "grant", "type": "assign_role", "role_id": gone.id, "scope": "realm"}]}
    assert await stage(realm, wid, body | {"steps": [*body["steps"], {"id": "done", "type": "end"}]}) == 2
    async with realm.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM roles WHERE id = :r"), {"r": gone.id})
    stale = await refusal(publish(realm, wid, 2))
    assert isinstance(stale, ValidationFailed)
    assert [issue.path.startswith("/definition/steps/0") for issue in stale.issues] == [True]
    assert await statuses(realm, wid) == {1: "draft", 2: "draft"}
