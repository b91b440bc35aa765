"""An independent second person: a reviewer whose authority does not come from the author.

Two-person review (a workflow revision approved before it is published; a role that requires
approval granted only once an approver agrees) means nothing when the author can make the
second person. So a reviewer is a user — never a service principal, whose credentials whoever
made it holds — in a session with a verified second factor, who is not the author and is
independent of them:

- the author did not create the reviewer, nor did anyone the author created (and so on down:
  an account the author made is the author's hand);
- the reviewer holds the authority to decide without anything the author (or an account they
  made) did within the last ``COCKPIT_REVIEW_INDEPENDENCE_DAYS`` days (default 30): a role
  assignment granted, a group membership added, a role given to a group, a group moved under
  another, a role's permissions changed. A link made exactly that many days ago still counts
  as the author's; one made a moment earlier no longer does.

A refusal answers 403 ``reviewer_not_independent`` and is audited with its reason, in a
transaction of its own (the refused change itself rolls back). This goes beyond seed 000, which
only keeps the author from approving their own revision: see docs/security.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from engine.directory.audit import Actor, record_audit
from engine.directory.authz import Authority, Grant
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.config import get_settings
from engine.platform.errors import Forbidden

SERVICE_PRINCIPAL = "service_principal"
NO_MFA_SESSION = "no_mfa_session"
CREATED_BY_AUTHOR = "created_by_author"
AUTHORITY_FROM_AUTHOR = "authority_from_author"

REASONS = {
    SERVICE_PRINCIPAL: "a service principal is never a second person",
    NO_MFA_SESSION: "deciding needs a session with a verified second factor",
    CREATED_BY_AUTHOR: "the author (or an account the author made) created this account",
    AUTHORITY_FROM_AUTHOR: "the authority to decide comes from what the author made within the last {days} days",
}


class ReviewerNotIndependent(Forbidden):
    code = "reviewer_not_independent"


# The author and every account made by it or by an account it made; then the reviewer's grants
# with every link such an account made at or after :cutoff left out.
_INDEPENDENT_AUTHORITY_SQL = text(
    """
    WITH RECURSIVE made_by_author(id) AS (
        SELECT CAST(:author AS varchar)
        UNION
        SELECT p.id
          FROM (SELECT id, created_by FROM users WHERE realm_id = :realm
                UNION ALL
                SELECT id, created_by FROM service_principals WHERE realm_id = :realm) p
          JOIN made_by_author m ON p.created_by = m.id
    ),
    member_groups(id) AS (
        SELECT gm.group_id
          FROM group_members gm
         WHERE gm.user_id = :pid AND gm.realm_id = :realm
           AND NOT COALESCE(gm.created_at >= :cutoff AND gm.added_by IN (SELECT id FROM made_by_author), false)
        UNION
        SELECT g.parent_id
          FROM groups g JOIN member_groups mg ON g.id = mg.id
         WHERE g.parent_id IS NOT NULL
           AND NOT COALESCE(
               g.parent_set_at >= :cutoff AND g.parent_set_by IN (SELECT id FROM made_by_author), false
           )
    )
    SELECT 'created', CAST(NULL AS varchar[]), CAST(NULL AS varchar)
     WHERE :pid IN (SELECT id FROM made_by_author)
    UNION ALL
    SELECT 'grant', r.permissions, ra.organization_id
      FROM role_assignments ra JOIN roles r ON r.id = ra.role_id
     WHERE ra.realm_id = :realm
       AND (ra.user_id = :pid OR ra.service_principal_id = :pid)
       AND (ra.expires_at IS NULL OR ra.expires_at > :now)
       AND NOT COALESCE(ra.created_at >= :cutoff AND ra.granted_by IN (SELECT id FROM made_by_author), false)
       AND NOT COALESCE(
           r.permissions_set_at >= :cutoff AND r.permissions_set_by IN (SELECT id FROM made_by_author), false
       )
    UNION ALL
    SELECT 'grant', r.permissions, CASE WHEN r.boundary = 'organization' THEN g.organization_id ELSE NULL END
      FROM member_groups mg
      JOIN groups g ON g.id = mg.id
      JOIN group_roles gr ON gr.group_id = g.id
      JOIN roles r ON r.id = gr.role_id
     WHERE g.realm_id = :realm
       AND NOT COALESCE(gr.created_at >= :cutoff AND gr.granted_by IN (SELECT id FROM made_by_author), false)
       AND NOT COALESCE(
           r.permissions_set_at >= :cutoff AND r.permissions_set_by IN (SELECT id FROM made_by_author), false
       )
    """
)


def independence_window() -> timedelta:
    return timedelta(days=get_settings().review_independence_days)


async def dependence_on(
    session: AsyncSession,
    realm_id: str,
    author_id: str,
    reviewer_id: str,
    decides: Callable[[Authority], bool],
    *,
    now: datetime | None = None,
) -> str | None:
    """Why the user ``reviewer_id`` is not independent of ``author_id`` (a reason of
    :data:`REASONS`), or None. ``decides`` says whether an authority is enough to decide."""
    now = now or SYSTEM_CLOCK.now()
    rows = await session.execute(
        _INDEPENDENT_AUTHORITY_SQL,
        {"realm": realm_id, "author": author_id, "pid": reviewer_id, "now": now, "cutoff": now - independence_window()},
    )
    grants: list[Grant] = []
    for kind, permissions, organization_id in rows:
        if kind == "created":
            return CREATED_BY_AUTHOR
        grants.append(Grant(frozenset(permissions or ()), organization_id))
    if not decides(Authority("user", reviewer_id, grants)):
        return AUTHORITY_FROM_AUTHOR
    return None


async def require_independent(
    session: AsyncSession,
    actor: Actor,
    author_id: str | None,
    decides: Callable[[Authority], bool],
    *,
    refused_event: str,
    subject_type: str,
    subject_id: str,
    details: dict[str, Any],
    named: str | None = None,
) -> None:
    """Refuse (403 ``reviewer_not_independent``, audited as ``refused_event``) a reviewer who is not
    an independent second person to ``author_id``; the caller has already refused the author.

    The reviewer is the acting ``actor``, or the user ``named`` as the one to decide later (a
    role assignment's approver, checked when the request is made and again when they decide).
    """
    reason: str | None = None
    reviewer = named or actor.id
    if named is None and actor.type != "user":
        reason = SERVICE_PRINCIPAL
    elif named is None and not actor.mfa_session:
        reason = NO_MFA_SESSION
    elif author_id is not None and reviewer is not None:
        reason = await dependence_on(session, actor.realm_id, author_id, reviewer, decides)
    if reason is None:
        return
    await _audit_refusal(
        session,
        actor,
        refused_event,
        subject_type=subject_type,
        subject_id=subject_id,
        details=details | {"reason": reason, "author_id": author_id, "reviewer_id": reviewer},
    )
    explanation = REASONS[reason].format(days=get_settings().review_independence_days)
    who = "You are" if named is None else "The approver is"
    raise ReviewerNotIndependent(f"{who} not an independent second person here: {explanation}.")


async def _audit_refusal(
    session: AsyncSession, actor: Actor, event: str, *, subject_type: str, subject_id: str, details: dict[str, Any]
) -> None:
    """The refusal's audit event, committed on its own: the refused change rolls back, this stays."""
    bind: Any = session.bind
    engine: AsyncEngine = bind if isinstance(bind, AsyncEngine) else bind.engine
    async with AsyncSession(engine) as own, own.begin():
        await record_audit(
            own,
            actor,
            event,
            category="authorization",
            subject_type=subject_type,
            subject_id=subject_id,
            details=details,
        )
