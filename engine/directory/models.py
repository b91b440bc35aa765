"""Tables of the directory (SQLModel): realms, principals, organizations, groups, roles, tokens,
sign-in, webhook subscriptions, templates, the audit trail and the outbox.

Every table of the product is registered by ``engine/tables.py``; Alembic revisions under
``migrations/`` must match them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    String,
    UniqueConstraint,
    event,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlmodel import Field, SQLModel

from engine.platform.names import fold
from engine.platform.tables import epoch_column, jsonb_column, tz_column, utcnow

# --- Directory (SPEC §2) -------------------------------------------------------------------------
#
# Every realm-scoped table carries ``realm_id`` and every query filters on it: no row crosses
# realms. Timestamps are timezone-aware. Ids are prefixed and sortable (engine/platform/ids.py).


class Realm(SQLModel, table=True):
    __tablename__ = "realms"

    id: str = Field(primary_key=True, max_length=40)
    slug: str = Field(max_length=63, unique=True)
    name: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    # Moves (triggers, migration 0007) on every change to the realm's roles and groups: cached
    # authority and role or group definitions are fresh while it stays put.
    authz_epoch: int = Field(default=0, sa_column=epoch_column())


class RealmPolicy(SQLModel, table=True):
    """Realm policy; ``extensions`` holds ``workflow_publish_approval`` (default false)."""

    __tablename__ = "realm_policies"

    realm_id: str = Field(primary_key=True, foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    extensions: dict[str, Any] = Field(sa_column=jsonb_column(default="'{}'::jsonb"))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    updated_by: str | None = Field(default=None, max_length=40)


class User(SQLModel, table=True):
    __tablename__ = "users"
    __table_args__ = (
        Index("uq_users_realm_id_email", "realm_id", text("lower(email)"), unique=True),
        # Pickers and filters find people by any part of a name or an email: a rare match through
        # the trigram indexes, a common one by walking the realm's users in id order until a page
        # is full.
        Index("ix_users_realm_id_id", "realm_id", "id"),
        Index(
            "ix_users_display_name_trgm",
            "display_name",
            postgresql_using="gin",
            postgresql_ops={"display_name": "gin_trgm_ops"},
        ),
        Index("ix_users_email_trgm", "email", postgresql_using="gin", postgresql_ops={"email": "gin_trgm_ops"}),
        CheckConstraint("status IN ('active', 'suspended')", name="status"),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    email: str = Field(max_length=254)
    display_name: str = Field(max_length=200)
    status: str = Field(default="active", max_length=20)
    guest: bool = Field(default=False)
    password_hash: str | None = Field(default=None, max_length=200)
    totp_secret_enc: str | None = Field(default=None, max_length=500)
    totp_enabled_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    totp_last_step: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    # Who made it (a user or service principal; None: the operator or the system). Never changes:
    # a reviewer someone created is never independent of them (engine/directory/independence.py).
    created_by: str | None = Field(default=None, max_length=40)
    updated_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    # Moves (triggers, migration 0007) on every change to this user's status, assignments, groups
    # and memberships: the user's cached authority is fresh while it and the realm's stay put.
    authz_epoch: int = Field(default=0, sa_column=epoch_column())


class ServicePrincipal(SQLModel, table=True):
    __tablename__ = "service_principals"
    __table_args__ = (UniqueConstraint("realm_id", "name"),)

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    name: str = Field(max_length=200)
    description: str = Field(default="", max_length=500)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    created_by: str | None = Field(default=None, max_length=40)


class Organization(SQLModel, table=True):
    __tablename__ = "organizations"
    __table_args__ = (
        UniqueConstraint("realm_id", "name"),
        CheckConstraint("state IN ('active', 'inactive')", name="state"),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    name: str = Field(max_length=200)
    state: str = Field(default="active", max_length=20)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class Membership(SQLModel, table=True):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("organization_id", "user_id"),)

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    organization_id: str = Field(foreign_key="organizations.id", max_length=40, ondelete="CASCADE")
    user_id: str = Field(foreign_key="users.id", max_length=40, index=True, ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class Role(SQLModel, table=True):
    __tablename__ = "roles"
    __table_args__ = (
        UniqueConstraint("realm_id", "name"),
        # Names people cannot tell apart (``REALM-ADMİN``, ``realm-admin``) are one name, even when
        # two creations race: ``name_key`` is the folded name, set from ``name`` on every write.
        UniqueConstraint("realm_id", "name_key"),
        CheckConstraint("boundary IN ('realm', 'organization')", name="boundary"),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    name: str = Field(max_length=100)
    name_key: str = Field(
        default="", max_length=400
    )  # fold(name): engine/platform/names.py, kept by _fill_role_name_key
    description: str = Field(default="", max_length=500)
    permissions: list[str] = Field(sa_column=Column(ARRAY(String(100)), nullable=False))
    boundary: str = Field(default="realm", max_length=20)
    requires_approval: bool = Field(default=False)
    builtin: bool = Field(default=False)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    # Who last changed its permissions, and when (None: as created).
    permissions_set_by: str | None = Field(default=None, max_length=40)
    permissions_set_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


@event.listens_for(Role, "before_insert")
@event.listens_for(Role, "before_update")
def _fill_role_name_key(_mapper: Any, _connection: Any, role: Role) -> None:
    """Every write of a role through the ORM keeps its folded name beside its name."""
    role.name_key = fold(role.name)


class RoleAssignment(SQLModel, table=True):
    """A role held by a user or a service principal, realm-wide or in one organization."""

    __tablename__ = "role_assignments"
    __table_args__ = (
        CheckConstraint("(user_id IS NULL) <> (service_principal_id IS NULL)", name="one_principal"),
        Index("ix_role_assignments_expires_at", "expires_at", postgresql_where=text("expires_at IS NOT NULL")),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    role_id: str = Field(foreign_key="roles.id", max_length=40, index=True, ondelete="CASCADE")
    user_id: str | None = Field(default=None, foreign_key="users.id", max_length=40, index=True, ondelete="CASCADE")
    service_principal_id: str | None = Field(
        default=None, foreign_key="service_principals.id", max_length=40, index=True, ondelete="CASCADE"
    )
    organization_id: str | None = Field(default=None, foreign_key="organizations.id", max_length=40, ondelete="CASCADE")
    expires_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    granted_by: str | None = Field(default=None, max_length=40)
    approver_id: str | None = Field(default=None, max_length=40)
    source_run_id: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class Group(SQLModel, table=True):
    __tablename__ = "groups"
    __table_args__ = (UniqueConstraint("organization_id", "name"),)

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    organization_id: str = Field(foreign_key="organizations.id", max_length=40, ondelete="CASCADE")
    parent_id: str | None = Field(default=None, foreign_key="groups.id", max_length=40, ondelete="RESTRICT")
    name: str = Field(max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    # Who last moved it under another parent, and when (None: where it was created).
    parent_set_by: str | None = Field(default=None, max_length=40)
    parent_set_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class GroupRole(SQLModel, table=True):
    __tablename__ = "group_roles"

    group_id: str = Field(primary_key=True, foreign_key="groups.id", max_length=40, ondelete="CASCADE")
    role_id: str = Field(primary_key=True, foreign_key="roles.id", max_length=40, ondelete="CASCADE")
    granted_by: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class GroupMember(SQLModel, table=True):
    __tablename__ = "group_members"

    group_id: str = Field(primary_key=True, foreign_key="groups.id", max_length=40, ondelete="CASCADE")
    user_id: str = Field(primary_key=True, foreign_key="users.id", max_length=40, index=True, ondelete="CASCADE")
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    added_by: str | None = Field(default=None, max_length=40)
    source_run_id: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class WebhookSubscription(SQLModel, table=True):
    """Secrets are encrypted with the operator key; a rotated secret stays valid for 24 h."""

    __tablename__ = "webhook_subscriptions"
    __table_args__ = (CheckConstraint("state IN ('active', 'paused', 'disabled', 'deleted')", name="state"),)

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    destination: str = Field(max_length=2000)
    secret_enc: str = Field(max_length=500)
    previous_secret_enc: str | None = Field(default=None, max_length=500)
    previous_secret_expires_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    state: str = Field(default="active", max_length=20)
    allow_private_network: bool = Field(default=False)
    event_types: list[str] | None = Field(default=None, sa_column=Column(ARRAY(String(100)), nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))


class WebhookDelivery(SQLModel, table=True):
    """One outbox event on its way to one subscription (at least once, in order per subscription).

    ``state`` is ``pending`` until the endpoint answers 2xx (``succeeded``) or the tries run out
    or the subscription is disabled or deleted (``failed``). A pending delivery whose
    ``lease_until`` lies ahead is being sent right now by one dispatcher; only the oldest pending
    delivery of a subscription is ever sent, so a subscription's events arrive in order.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint("state IN ('pending', 'succeeded', 'failed')", name="state"),
        # The dispatcher's heads: each subscription's oldest pending delivery.
        Index("ix_webhook_deliveries_pending", "subscription_id", "id", postgresql_where=text("state = 'pending'")),
        Index("ix_webhook_deliveries_subscription_id_id", "subscription_id", "id"),
        Index("ix_webhook_deliveries_realm_failed", "realm_id", postgresql_where=text("state = 'failed'")),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    subscription_id: str = Field(foreign_key="webhook_subscriptions.id", max_length=40, ondelete="CASCADE")
    event_id: str = Field(max_length=40)
    event_type: str = Field(max_length=100)
    payload: dict[str, Any] = Field(sa_column=jsonb_column(default="'{}'::jsonb"))
    state: str = Field(default="pending", max_length=20)
    attempts: int = Field(default=0)
    next_attempt_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    lease_until: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    last_attempt_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    last_status_code: int | None = Field(default=None)
    last_error: str | None = Field(default=None, max_length=2000)
    last_latency_ms: int | None = Field(default=None)
    redelivery_of: str | None = Field(default=None, max_length=40)
    requested_by: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    finished_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class Template(SQLModel, table=True):
    """A realm's override of a server template (``workflow_notice``)."""

    __tablename__ = "templates"
    __table_args__ = (UniqueConstraint("realm_id", "name"),)

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    name: str = Field(max_length=100)
    subject: str = Field(max_length=300)
    body: str = Field(max_length=10_000)
    updated_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    updated_by: str | None = Field(default=None, max_length=40)


class AuditEvent(SQLModel, table=True):
    """Append-only: what happened, who did it, to what, under which request."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_realm_id_id", "realm_id", "id"),
        Index("ix_audit_events_realm_id_type_id", "realm_id", "type", "id"),
        # Everything one request or one run caused (the list's filter by correlation id).
        Index(
            "ix_audit_events_realm_correlation_id",
            "realm_id",
            "correlation_id",
            "id",
            postgresql_where=text("correlation_id IS NOT NULL"),
        ),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    occurred_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    actor_type: str = Field(max_length=30)
    actor_id: str | None = Field(default=None, max_length=40)
    category: str = Field(max_length=30)
    type: str = Field(max_length=100)
    subject_type: str | None = Field(default=None, max_length=40)
    subject_id: str | None = Field(default=None, max_length=40)
    request_id: str | None = Field(default=None, max_length=100)
    correlation_id: str | None = Field(default=None, max_length=100)
    details: dict[str, Any] = Field(sa_column=jsonb_column(default="'{}'::jsonb"))


class OutboxEvent(SQLModel, table=True):
    """Domain events written in the transaction of the change; dispatched later."""

    __tablename__ = "outbox_events"
    __table_args__ = (
        Index("ix_outbox_events_pending", "id", postgresql_where=text("dispatched_at IS NULL")),
        Index("ix_outbox_events_realm_id_id", "realm_id", "id"),
    )

    id: str = Field(primary_key=True, max_length=40)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    type: str = Field(max_length=100)
    event_version: int = Field(default=1)
    subject_id: str | None = Field(default=None, max_length=40)
    organization_id: str | None = Field(default=None, max_length=40)
    payload: dict[str, Any] = Field(sa_column=jsonb_column(default="'{}'::jsonb"))
    correlation_id: str | None = Field(default=None, max_length=100)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    dispatched_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class BrowserSession(SQLModel, table=True):
    """A signed-in browser. Only the SHA-256 of the cookie value is stored."""

    __tablename__ = "sessions"

    id: str = Field(primary_key=True, max_length=40)
    token_hash: str = Field(max_length=64, unique=True)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    user_id: str = Field(foreign_key="users.id", max_length=40, index=True, ondelete="CASCADE")
    mfa: bool = Field(default=False)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    last_seen_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    expires_at: datetime = Field(sa_column=tz_column())
    revoked_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    client_address: str | None = Field(default=None, max_length=100)
    user_agent: str | None = Field(default=None, max_length=300)


class ApiToken(SQLModel, table=True):
    """A bearer token (``pat_…``). Only its SHA-256 is stored."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint("(user_id IS NULL) <> (service_principal_id IS NULL)", name="one_principal"),
        CheckConstraint("audience IN ('admin', 'account')", name="audience"),
    )

    id: str = Field(primary_key=True, max_length=40)
    token_hash: str = Field(max_length=64, unique=True)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, index=True, ondelete="CASCADE")
    user_id: str | None = Field(default=None, foreign_key="users.id", max_length=40, index=True, ondelete="CASCADE")
    service_principal_id: str | None = Field(
        default=None, foreign_key="service_principals.id", max_length=40, index=True, ondelete="CASCADE"
    )
    name: str = Field(default="", max_length=200)
    audience: str = Field(max_length=20)
    created_by: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    expires_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    last_used_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))
    revoked_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class SignInLink(SQLModel, table=True):
    """A one-time sign-in link (15 minutes, counts as MFA). Only its SHA-256 is stored."""

    __tablename__ = "sign_in_links"

    id: str = Field(primary_key=True, max_length=40)
    token_hash: str = Field(max_length=64, unique=True)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    user_id: str = Field(foreign_key="users.id", max_length=40, ondelete="CASCADE")
    created_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
    expires_at: datetime = Field(sa_column=tz_column())
    used_at: datetime | None = Field(default=None, sa_column=tz_column(nullable=True))


class SignInFailure(SQLModel, table=True):
    """Failed sign-ins, for throttling per account and per client address. ``kind``: which step
    failed (``password`` or ``second_factor``); a correct password forgives only the first."""

    __tablename__ = "sign_in_failures"
    __table_args__ = (
        Index("ix_sign_in_failures_realm_id_email_at", "realm_id", "email", "occurred_at"),
        Index("ix_sign_in_failures_client_address_at", "client_address", "occurred_at"),
        CheckConstraint("kind IN ('password', 'second_factor')", name="kind"),
    )

    id: int | None = Field(default=None, primary_key=True)
    realm_id: str = Field(foreign_key="realms.id", max_length=40, ondelete="CASCADE")
    email: str = Field(max_length=254)
    client_address: str = Field(max_length=100)
    kind: str = Field(default="password", max_length=20, sa_column_kwargs={"server_default": "password"})
    occurred_at: datetime = Field(default_factory=utcnow, sa_column=tz_column(server_default=True))
