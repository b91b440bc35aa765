"""The demo realm's workflow: one published onboarding workflow and the first runs of it.

Seeded at first start right after the demo realm (``engine.seeding.demo_realm``), in the same
transaction; the runs are carried by the engine's runner to the approval they ask for, the
demo approver approves the first one, and the runner carries that one to its end. The other
waits for its approval, so the newcomer sees both a finished run and a request to decide.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory.audit import Actor
from engine.platform.clock import SYSTEM_CLOCK
from engine.runs import approval_models, approvals
from engine.runs import service as runs
from engine.seeding.demo_realm import DemoRealm
from engine.workflows.catalog import create_workflow
from engine.workflows.publication import publish_revision

DEMO_WORKFLOW_NAME = "Engineering onboarding"
# Who joined engineering lately: the demo's first runs are about them.
_JOINERS = ("margaret@demo.example", "ken@demo.example")
DEMO_APPROVER = "approver@demo.example"


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
                "id": "approve-access",
                "type": "approval",
                "approvers": [demo.users[DEMO_APPROVER].id],
                "expires_in": "72h",
            },
            {
                "id": "grant-engineering-access",
                "type": "assign_role",
                "role_id": demo.roles["engineering-member"].id,
                "scope": "organization",
                "organization_id": engineering.id,
            },
            {"id": "join-engineering-team", "type": "add_to_group", "group_id": demo.groups["Engineering"].id},
            {"id": "send-welcome", "type": "notify", "notice": "welcome"},
            {"id": "done", "type": "end"},
        ],
    }
    actor = Actor(type="user", id=demo.admin.id, realm_id=demo.realm.id)
    workflow, _ = await create_workflow(
        session,
        actor,
        name=DEMO_WORKFLOW_NAME,
        description=(
            "Welcomes a new engineer once Avery Approver agrees: the engineering-member role in "
            "Acme Engineering, the Engineering team, then a welcome notice. Start it by hand for "
            "the person who joined."
        ),
        definition=definition,
        has_definition=True,
        requires_approval=False,
    )
    await publish_revision(session, actor, workflow.id, 1)
    run_ids = []
    for email in _JOINERS:
        run = await runs.start_manual_run(
            session, actor, workflow.id, subject_id=demo.users[email].id, organization_id=engineering.id
        )
        run_ids.append(run.id)
    return workflow.id, run_ids


async def approve_demo_request(session: AsyncSession, run_id: str) -> bool:
    """The demo approver approves the run's pending approval (False when none is pending yet)."""
    pending = [a for a in await approvals.for_run(session, run_id) if a.status == approval_models.PENDING]
    if not pending:
        return False
    approval = pending[0]
    actor = Actor(type="user", id=approval.approvers[0], realm_id=approval.realm_id)
    await approvals.decide(session, actor, approval.id, approve=True, comment="Welcome aboard.", now=SYSTEM_CLOCK.now())
    return True
