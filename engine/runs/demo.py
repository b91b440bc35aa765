"""The demo realm's workflow: one published onboarding workflow and the first runs of it.

Seeded at first start right after the demo realm (``engine.directory.seed``), in the same
transaction; the runs are carried to their end by the engine's runner.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor
from engine.directory.seed import DemoRealm
from engine.runs import service as runs
from engine.workflows import service as workflows

DEMO_WORKFLOW_NAME = "Engineering onboarding"
# Who joined engineering lately: the demo's first runs are about them.
_JOINERS = ("margaret@demo.example", "ken@demo.example")


async def seed_demo_workflow(session: AsyncSession, demo: DemoRealm) -> tuple[str, list[str]]:
    """One published onboarding workflow, written as an administrator would, and runs of it.

    The runs are only started here; the first start lets the engine carry them to their end,
    so what the newcomer sees is what the product did.
    """
    engineering = demo.organizations["Acme Engineering"]
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {
                "id": "grant-engineering-access",
                "type": "assign_role",
                "role_id": demo.roles["engineering-member"].id,
                "scope": "organization",
                "organization_id": engineering.id,
            },
            {"id": "join-engineering-team", "type": "add_to_group", "group_id": demo.groups["Engineering"].id},
            {"id": "done", "type": "end"},
        ],
    }
    actor = Actor(type="user", id=demo.admin.id, realm_id=demo.realm.id)
    workflow, _ = await workflows.create_workflow(
        session,
        actor,
        name=DEMO_WORKFLOW_NAME,
        description=(
            "Welcomes a new engineer: the engineering-member role in Acme Engineering, "
            "then the Engineering team. Start it by hand for the person who joined."
        ),
        definition=definition,
        has_definition=True,
        requires_approval=False,
    )
    await workflows.publish_revision(session, actor, workflow.id, 1)
    run_ids = []
    for email in _JOINERS:
        run = await runs.start_manual_run(
            session, actor, workflow.id, subject_id=demo.users[email].id, organization_id=engineering.id
        )
        run_ids.append(run.id)
    return workflow.id, run_ids
