"""The shapes of the JSON API's answers, as the OpenAPI document states them.

Each struct mirrors one view of the engine member for member, in the same order, with the same
nulls; members that a view adds only sometimes default to ``UNSET`` and are left out when
absent. Handlers build their answers with :func:`typed`, which converts a view to its struct
(a view that does not fit its struct is a bug, and fails loudly) — so the document and the
bytes on the wire come from one declaration. Values that are free-form by nature (a definition,
a step's input and result, an audit event's details) stay free-form.

One module, over 600 lines, on purpose: it declares and decides nothing else, and a struct's
class name is its schema's name in the OpenAPI document, so one namespace keeps every name
unique and every shape findable in one place.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TypeVar

import msgspec

from engine.platform.read_models import Shape

T = TypeVar("T")


def typed(shape: type[T], view: Any) -> T:
    """The engine's view as its declared shape (same members, same order, same values)."""
    return msgspec.convert(view, shape, strict=True)


# --- Directory ------------------------------------------------------------------------------------


class User(Shape):
    id: str
    email: str
    display_name: str
    status: str
    guest: bool
    mfa_enrolled: bool
    created_at: datetime
    updated_at: datetime


class UserPage(Shape):
    items: list[User]
    next_cursor: str | None


class ServicePrincipal(Shape):
    id: str
    name: str
    description: str
    created_at: datetime


class ServicePrincipalPage(Shape):
    items: list[ServicePrincipal]
    next_cursor: str | None


class SignInLink(Shape):
    """``url`` and ``path`` carry the one-time token: in this answer only."""

    id: str
    user_id: str
    url: str
    path: str
    expires_at: datetime


class Organization(Shape):
    id: str
    name: str
    state: str
    created_at: datetime


class OrganizationPage(Shape):
    items: list[Organization]
    next_cursor: str | None


class OrganizationMembership(Shape):
    id: str
    organization_id: str
    user_id: str
    created_at: datetime


class OrganizationMember(OrganizationMembership):
    """A membership with the member's name and status (as lists show it)."""

    email: str
    display_name: str
    status: str


class OrganizationMemberPage(Shape):
    items: list[OrganizationMember]
    next_cursor: str | None


class Group(Shape):
    id: str
    organization_id: str
    name: str
    parent_id: str | None
    role_ids: list[str]
    created_at: datetime


class GroupPage(Shape):
    items: list[Group]
    next_cursor: str | None


class GroupMembership(Shape):
    group_id: str
    user_id: str
    added_by: str | None
    source_run_id: str | None
    created_at: datetime


class GroupMember(GroupMembership):
    """A group membership with the member's name and status (as lists show it)."""

    email: str
    display_name: str
    status: str


class GroupMemberPage(Shape):
    items: list[GroupMember]
    next_cursor: str | None


class Permission(Shape):
    name: str
    level: str
    description: str


class PermissionCatalog(Shape):
    items: list[Permission]


class Role(Shape):
    id: str
    name: str
    description: str
    permissions: list[str]
    boundary: str
    requires_approval: bool
    builtin: bool
    created_at: datetime


class RolePage(Shape):
    items: list[Role]
    next_cursor: str | None


class RoleAssignment(Shape):
    id: str
    role_id: str
    user_id: str | None
    service_principal_id: str | None
    organization_id: str | None
    expires_at: datetime | None
    granted_by: str | None
    approver_id: str | None
    source_run_id: str | None
    created_at: datetime


class RoleAssignmentPage(Shape):
    items: list[RoleAssignment]
    next_cursor: str | None


class Webhook(Shape):
    id: str
    destination: str
    state: str
    allow_private_network: bool
    event_types: list[str] | None
    egress_permitted: bool
    previous_secret_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


class WebhookWithSecret(Webhook):
    """A subscription with its signing secret: the answer to a create or a rotation, once."""

    secret: str


class WebhookPage(Shape):
    items: list[Webhook]
    next_cursor: str | None


class WebhookDelivery(Shape):
    id: str
    subscription_id: str
    event_id: str
    event_type: str
    state: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    last_latency_ms: int | None
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    redelivery_of: str | None
    created_at: datetime
    finished_at: datetime | None


class WebhookDeliveryPage(Shape):
    items: list[WebhookDelivery]
    next_cursor: str | None


class NoticeTemplate(Shape):
    name: str
    subject: str
    body: str
    variables: list[str]
    overridden: bool
    updated_at: datetime | None
    updated_by: str | None


class PolicyExtensionValues(Shape):
    workflow_publish_approval: bool


class Policy(Shape):
    extensions: PolicyExtensionValues
    updated_at: datetime | None
    updated_by: str | None


class TokenOwner(Shape):
    type: str
    id: str | None


class ApiToken(Shape):
    id: str
    name: str
    audience: str
    owner: TokenOwner
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked: bool
    revoked_at: datetime | None


class ApiTokenPage(Shape):
    items: list[ApiToken]
    next_cursor: str | None


class MintedToken(Shape):
    """``token`` is the bearer token itself: in this answer only."""

    id: str
    name: str
    audience: str
    created_at: datetime
    expires_at: datetime | None
    token: str


class AuditParty(Shape):
    type: str | None
    id: str | None


class AuditEvent(Shape):
    """``details`` is free-form: what the event type records."""

    id: str
    occurred_at: datetime
    actor: AuditParty
    category: str
    type: str
    subject: AuditParty
    request_id: str | None
    correlation_id: str | None
    details: dict[str, Any]


class AuditEventPage(Shape):
    items: list[AuditEvent]
    next_cursor: str | None
