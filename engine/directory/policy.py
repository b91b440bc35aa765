"""The realm policy: switches that shape how the realm works.

Now one extension, ``workflow_publish_approval``: workflows created while it is on need an
approved revision before they can be published. It is read when a workflow is created and
copied into the workflow's ``requires_approval``; changing it later changes no workflow.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from engine.directory import read_models
from engine.directory.audit import Actor, record_audit
from engine.directory.models import RealmPolicy
from engine.platform.clock import SYSTEM_CLOCK

EXTENSION_DEFAULTS: dict[str, bool] = {"workflow_publish_approval": False}


def _extensions(row: RealmPolicy | None) -> dict[str, bool]:
    stored = row.extensions if row is not None and isinstance(row.extensions, dict) else {}
    return {name: bool(stored.get(name, default)) for name, default in EXTENSION_DEFAULTS.items()}


def policy_view(row: RealmPolicy | None) -> read_models.Policy:
    return read_models.Policy(
        extensions=read_models.PolicyExtensionValues(**_extensions(row)),
        updated_at=row.updated_at if row else None,
        updated_by=row.updated_by if row else None,
    )


async def get_policy(session: AsyncSession, realm_id: str) -> read_models.Policy:
    return policy_view(await session.get(RealmPolicy, realm_id))


async def publish_approval_required(session: AsyncSession, realm_id: str) -> bool:
    """Should a workflow created now require approval? Fails closed: when the policy cannot be
    read (no row, or a value that is not a boolean) the answer is yes.
    """
    row = await session.get(RealmPolicy, realm_id)
    if row is None or not isinstance(row.extensions, dict):
        return True
    value = row.extensions.get("workflow_publish_approval", False)
    return value if isinstance(value, bool) else True


async def update_policy(session: AsyncSession, actor: Actor, extensions: dict[str, bool]) -> read_models.Policy:
    """Set the given extensions (unknown names are refused by the caller's body schema)."""
    unknown = set(extensions) - set(EXTENSION_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown policy extensions: {sorted(unknown)}")
    row = await session.get(RealmPolicy, actor.realm_id, with_for_update=True)
    before = _extensions(row)
    after = before | extensions
    if row is None:
        row = RealmPolicy(realm_id=actor.realm_id, extensions=after)
        session.add(row)
    elif after == before:
        return policy_view(row)
    else:
        row.extensions = {**(row.extensions or {}), **after}
    row.updated_at = SYSTEM_CLOCK.now()
    row.updated_by = actor.id
    await session.flush()
    await record_audit(
        session,
        actor,
        "policy.updated",
        category="configuration",
        subject_type="realm",
        subject_id=actor.realm_id,
        details={"before": {"extensions": before}, "after": {"extensions": after}},
    )
    return policy_view(row)
