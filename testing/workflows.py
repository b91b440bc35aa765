"""Workflows for tests, written through the engine's own services as the realm's administrator."""

from __future__ import annotations

from typing import Any

from engine.directory.audit import Actor
from engine.directory.models import User
from engine.workflows.catalog import create_workflow
from engine.workflows.models import Workflow
from engine.workflows.publication import publish_revision
from engine.workflows.revisions import stage_revision
from testing.factories import RealmHandle


def manual(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A definition started by hand, made of ``steps`` (and ``extra`` top-level members: ``retry``…)."""
    return {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": list(steps), **extra}


def manual_then_end(*steps: dict[str, Any]) -> dict[str, Any]:
    """A definition started by hand: ``steps``, then an ``end`` step (``done``)."""
    return manual(*steps, {"id": "done", "type": "end"})


async def publish(realm: RealmHandle, definition: dict[str, Any], name: str = "W") -> str:
    """A new workflow whose first revision is ``definition``, published; its id."""
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session, realm.actor, name=name, definition=definition, has_definition=True, requires_approval=False
        )
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)
    return workflow.id


async def make_workflow(
    realm: RealmHandle,
    name: str = "Onboarding",
    *,
    body: dict[str, Any] | None = None,
    requires_approval: bool = False,
    author: User | None = None,
) -> Workflow:
    """A new workflow, its first revision a draft (``body``) or none; nothing published."""
    actor = Actor(type="user", id=(author or realm.admin).id, realm_id=realm.id)
    async with realm.sessions() as session, session.begin():
        workflow, _ = await create_workflow(
            session,
            actor,
            name=name,
            requires_approval=requires_approval,
            definition=body,
            has_definition=body is not None,
        )
    return workflow


async def stage(realm: RealmHandle, workflow: Workflow, body: dict[str, Any], author: User | None = None) -> int:
    """``body`` staged as the workflow's next revision by ``author``; the revision's number."""
    actor = Actor(type="user", id=(author or realm.admin).id, realm_id=realm.id)
    async with realm.sessions() as session, session.begin():
        staged = await stage_revision(session, actor, workflow.id, body)
        return staged.revision.number
