"""A role assignment as the API answers it: every member of the stored grant, the run that made it
included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from engine.directory.models import RoleAssignment
from engine.directory.role_assignments import assignment_view


def test_the_answer_carries_every_member_of_the_grant_and_the_run_that_made_it() -> None:
    created = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    grant = RoleAssignment(
        id="ras_1",
        realm_id="rlm_1",
        role_id="rol_1",
        user_id="usr_1",
        service_principal_id=None,
        organization_id="org_1",
        expires_at=created + timedelta(days=30),
        granted_by="usr_2",
        approver_id="usr_3",
        source_run_id="wrn_1",
        created_at=created,
    )
    assert msgspec.to_builtins(assignment_view(grant)) == {
        "id": "ras_1",
        "role_id": "rol_1",
        "user_id": "usr_1",
        "service_principal_id": None,
        "organization_id": "org_1",
        "expires_at": "2027-01-01T12:00:00Z",
        "granted_by": "usr_2",
        "approver_id": "usr_3",
        "source_run_id": "wrn_1",
        "created_at": "2026-12-02T12:00:00Z",
    }
