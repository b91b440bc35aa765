"""A user account: creating one (``user.created`` in the same transaction) and finding one by email.

Emails and display names are stored NFKC-normalized.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory.audit import Actor, emit_event, record_audit
from engine.directory.authz import Authority, needs_permission
from engine.directory.models import User
from engine.platform import crypto, names
from engine.platform.errors import Conflict, Issue, ValidationFailed
from engine.platform.ids import new_id

PASSWORD_MIN_CHARACTERS = 12
PASSWORD_MAX_CHARACTERS = 200


def password_issues(path: str, password: str | None) -> list[Issue]:
    """What is wrong with a new password (none given: nothing): 12 to 200 characters."""
    if password is None:
        return []
    if len(password) < PASSWORD_MIN_CHARACTERS:
        return [Issue(path, "too_short", f"a password has at least {PASSWORD_MIN_CHARACTERS} characters")]
    if len(password) > PASSWORD_MAX_CHARACTERS:
        return [Issue(path, "too_long", f"a password has at most {PASSWORD_MAX_CHARACTERS} characters")]
    return []


def normalize_email(email: str) -> str:
    """NFKC (a fullwidth ``ｂob@…`` is ``bob@…``), without surrounding white space."""
    return names.normalize(email)


async def user_by_email(session: AsyncSession, realm_id: str, email: str) -> User | None:
    result = await session.execute(
        select(User).where(
            col(User.realm_id) == realm_id, func.lower(col(User.email)) == normalize_email(email).lower()
        )
    )
    return result.scalar_one_or_none()


@needs_permission("realm.users.write")
async def create_user(
    session: AsyncSession,
    actor: Actor,
    *,
    email: str,
    display_name: str,
    guest: bool = False,
    password: str | None = None,
    authority: Authority | None,
) -> User:
    """A user, with its ``user.created`` outbox event and audit event in the same transaction.

    Email and display name are stored NFKC-normalized; invisible and bidirectional-control
    characters are refused in both, and an email mixing Latin with Cyrillic or Greek too.
    """
    issues = names.hidden_character_issues("/email", email) or names.mixed_script_issues("/email", email)
    issues += names.hidden_character_issues("/display_name", display_name, allow=names.JOINERS)
    issues += password_issues("/password", password)
    if issues:
        raise ValidationFailed("The request is not valid.", issues=issues)
    email = normalize_email(email)
    display_name = names.normalize(display_name)
    if await user_by_email(session, actor.realm_id, email):
        raise Conflict("A user with this email already exists in the realm.")
    user = User(
        id=new_id("usr"),
        realm_id=actor.realm_id,
        email=email,
        display_name=display_name,
        guest=guest,
        password_hash=crypto.hash_password(password) if password else None,
        created_by=actor.principal_id,
    )
    session.add(user)
    await session.flush()
    await emit_event(session, actor, "user.created", subject_id=user.id, payload={"user_id": user.id})
    await record_audit(
        session, actor, "user.created", subject_type="user", subject_id=user.id, details={"email": email}
    )
    return user
