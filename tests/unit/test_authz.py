from __future__ import annotations

import pytest

from engine.directory.authz import PERMISSIONS, Authority, Grant, check_assignment, covers, is_valid_pattern, require
from engine.platform.errors import Forbidden, GrantCeilingExceeded, ValidationFailed

ORG_A = "org_" + "a" * 26
ORG_B = "org_" + "b" * 26


def authority(pid: str, *grants: tuple[list[str], str | None]) -> Authority:
    return Authority("user", pid, [Grant(frozenset(perms), org) for perms, org in grants])


@pytest.mark.parametrize(
    ("held", "wanted", "expected"),
    [
        ("realm.users.read", "realm.users.read", True),
        ("realm.users.read", "realm.users.write", False),
        ("realm.*", "realm.users.write", True),
        ("realm.*", "org.members.write", False),
        ("org.*", "org.groups.write", True),
        ("*", "org.groups.write", True),
        ("*", "realm.*", True),
        ("realm.*", "realm.*", True),
        ("realm.users.read", "realm.*", False),
        ("realm.users.*", "realm.users.suspend", True),
        ("realm.users.*", "realm.userslist", False),
        ("realm.*", "*", False),
    ],
)
def test_covers(held: str, wanted: str, expected: bool) -> None:
    assert covers(held, wanted) is expected


def test_valid_patterns_name_the_catalog_or_a_wildcard_covering_it() -> None:
    assert all(is_valid_pattern(name) for name in PERMISSIONS)
    assert is_valid_pattern("realm.*") and is_valid_pattern("org.*") and is_valid_pattern("*")
    assert is_valid_pattern("realm.workflows.*")
    assert not is_valid_pattern("realm.nothing")
    assert not is_valid_pattern("billing.*")
    assert not is_valid_pattern("realm.users.read.*")
    assert not is_valid_pattern("")


def test_realm_grants_hold_everywhere_and_organization_grants_only_in_their_organization() -> None:
    who = authority("usr_1", (["realm.users.read"], None), (["org.members.write"], ORG_A))
    assert who.holds("realm.users.read")
    assert who.holds("realm.users.read", ORG_A) and who.holds("realm.users.read", ORG_B)
    assert who.holds("org.members.write", ORG_A)
    assert not who.holds("org.members.write", ORG_B)
    assert not who.holds("org.members.write")  # not realm-wide
    with pytest.raises(Forbidden):
        require(who, "org.members.write", ORG_B)
    require(who, "org.members.write", ORG_A)


def test_can_assign_is_the_grant_ceiling_in_that_scope() -> None:
    who = authority("usr_1", (["realm.users.*"], None), (["org.*"], ORG_A))
    assert who.can_assign(["realm.users.read", "realm.users.suspend"], None)
    assert not who.can_assign(["realm.users.read", "realm.roles.write"], None)
    assert who.can_assign(["org.groups.write", "realm.users.read"], ORG_A)
    assert not who.can_assign(["org.groups.write"], ORG_B)
    assert not who.can_assign(["org.groups.write"], None)
    assert who.can_assign(["org.*"], ORG_A) and not who.can_assign(["*"], ORG_A)
    assert who.can_assign([], ORG_B)


ADMIN = authority("usr_admin", (["realm.*", "org.*"], None))
OTHER_ADMIN = authority("usr_other", (["realm.*", "org.*"], None))
WEAK = authority("usr_weak", (["realm.users.read"], None))
ROLE = ["realm.users.read", "realm.users.write"]


def assign(
    granter: Authority, approver: Authority | None, *, subject: str = "usr_subject", approval: bool = True
) -> None:
    check_assignment(
        granter,
        role_name="payroll",
        role_permissions=ROLE,
        requires_approval=approval,
        organization_id=None,
        subject_id=subject,
        approver=approver,
    )


def test_the_ceiling_comes_first() -> None:
    with pytest.raises(GrantCeilingExceeded) as caught:
        assign(WEAK, OTHER_ADMIN)
    assert caught.value.code == "grant_ceiling_exceeded" and "realm.users.write" in caught.value.detail
    assign(ADMIN, None, approval=False)


def test_a_missing_approver_is_a_validation_error_at_approver_id() -> None:
    with pytest.raises(ValidationFailed) as caught:
        assign(ADMIN, None)
    assert [(i.path, i.code) for i in caught.value.issues] == [("/approver_id", "approver_required")]


def test_the_approver_is_neither_the_granter_nor_the_subject() -> None:
    with pytest.raises(Forbidden):
        assign(ADMIN, ADMIN)
    with pytest.raises(Forbidden):
        assign(ADMIN, OTHER_ADMIN, subject=OTHER_ADMIN.principal_id)
    with pytest.raises(Forbidden):
        assign(ADMIN, OTHER_ADMIN, subject=ADMIN.principal_id)


def test_the_approver_could_assign_the_role_themselves() -> None:
    with pytest.raises(Forbidden) as caught:
        assign(ADMIN, WEAK)
    assert not isinstance(caught.value, GrantCeilingExceeded)
    org_only = authority("usr_org", (["realm.users.read", "realm.users.write"], ORG_A))
    with pytest.raises(Forbidden):
        assign(ADMIN, org_only)  # holds the role in one organization, not realm-wide
    assign(ADMIN, OTHER_ADMIN)


# --- The one rule: may this actor act on that target? ---------------------------------------------


def test_the_rule_compares_every_scope_not_only_the_realm() -> None:
    from engine.directory.authz import authority_gaps, may_act_on

    user_admin = authority("usr_actor", (["realm.users.write", "realm.users.read"], None))
    org_admin = authority("usr_target", (["org.*"], ORG_A))
    assert not may_act_on(user_admin, org_admin)
    assert authority_gaps(user_admin, org_admin) == [f"org.* in {ORG_A}"]
    # Holding it in that organization, or realm-wide, is enough; in another organization is not.
    assert may_act_on(authority("a", (["org.*"], ORG_A)), org_admin)
    assert may_act_on(authority("a", (["org.*"], None)), org_admin)
    assert not may_act_on(authority("a", (["org.*"], ORG_B)), org_admin)
    # A realm-wide grant of the target needs a realm-wide grant of the actor.
    assert not may_act_on(authority("a", (["org.*"], ORG_A), (["org.*"], ORG_B)), authority("t", (["org.*"], None)))


def test_the_rule_expands_wildcards_both_ways() -> None:
    from engine.directory.authz import PERMISSIONS, authority_gaps, may_act_on

    every_org_permission = [p for p in PERMISSIONS if p.startswith("org.")]
    assert may_act_on(authority("a", (every_org_permission, ORG_A)), authority("t", (["org.*"], ORG_A)))
    assert may_act_on(authority("a", (["*"], None)), authority("t", (["realm.*", "org.*"], None)))
    partial = authority("a", (["realm.users.*"], None))
    gaps = authority_gaps(partial, authority("t", (["realm.*"], None)))
    assert "realm.roles.write" in gaps and "realm.users.write" not in gaps
    assert authority_gaps(authority("a"), authority("t", (["realm.*"], None))) == ["realm.*"]
    assert may_act_on(authority("a"), authority("t"))  # nobody holds less than nothing


def test_the_grant_ceiling_is_the_same_rule_with_the_role_as_target() -> None:
    from engine.directory.authz import require_grant_ceiling

    who = authority("a", (["org.groups.write"], ORG_A))
    require_grant_ceiling(who, "helper", ["org.groups.write"], ORG_A, "revoke")
    with pytest.raises(GrantCeilingExceeded, match="revoke realm-admin"):
        require_grant_ceiling(who, "realm-admin", ["realm.*", "org.*"], ORG_A, "revoke")
