"""A realm policy as read (engine/directory/policy.py): the defaults without a row, and a stored value
that is not an object read as the defaults."""

from __future__ import annotations

from datetime import UTC, datetime

from engine.directory.models import RealmPolicy
from engine.directory.policy import policy_view
from engine.directory.read_models import Policy, PolicyExtensionValues

WHEN = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def test_without_a_row_the_defaults_and_nobody_changed_them() -> None:
    assert policy_view(None) == Policy(
        extensions=PolicyExtensionValues(workflow_publish_approval=False), updated_at=None, updated_by=None
    )


def test_a_stored_value_that_is_not_an_object_reads_as_the_defaults() -> None:
    row = RealmPolicy(realm_id="rlm_x", extensions=["workflow_publish_approval"], updated_at=WHEN, updated_by="usr_x")
    assert policy_view(row) == Policy(
        extensions=PolicyExtensionValues(workflow_publish_approval=False), updated_at=WHEN, updated_by="usr_x"
    )


def test_a_stored_extension_is_read_as_a_boolean_and_unknown_ones_are_left_out() -> None:
    row = RealmPolicy(realm_id="rlm_x", extensions={"workflow_publish_approval": 1, "other": True}, updated_at=WHEN)
    assert policy_view(row).extensions == PolicyExtensionValues(workflow_publish_approval=True)
