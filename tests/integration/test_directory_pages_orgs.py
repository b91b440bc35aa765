"""Organization, group and role pages, driven like a browser would (session cookie + CSRF field)."""

from __future__ import annotations

import re
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory.models import User
from testing.factories import HTML, BrowserLogin, RealmHandle, browser_session, independent_admin
from testing.workflows import manual, publish

HTMX = HTML | {"HX-Request": "true"}


async def sign_in(client: AsyncTestClient[Litestar], realm: RealmHandle, user: User) -> BrowserLogin:
    login = await browser_session(realm, user, mfa=True)
    client.cookies.set("cockpit_session", login.cookie)
    return login


async def fetch(realm: RealmHandle, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with realm.sessions() as session:
        return [tuple(row) for row in (await session.execute(text(sql), params)).all()]


async def test_organizations_list_search_and_create(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    login = await sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/organizations"
    await realm.organization("Alpha Works")
    await realm.organization("Beta Labs")
    listed = await client.get(base, headers=HTML)
    assert listed.status_code == 200
    assert "Alpha Works" in listed.text and "Beta Labs" in listed.text and 'name="_csrf"' in listed.text
    found = await client.get(
        base, params={"q": "beta"}, headers=HTML | {"HX-Request": "true", "HX-Target": "orgs-table"}
    )
    assert found.status_code == 200 and "Beta Labs" in found.text and "Alpha Works" not in found.text
    assert "<html" not in found.text  # the table alone

    created = await client.post(base, data={"_csrf": login.csrf, "name": "Gamma"}, headers=HTML, follow_redirects=False)
    assert created.status_code == 303
    page = await client.get(created.headers["location"], headers=HTML)
    assert page.status_code == 200 and "Gamma" in page.text and "Organization created." in page.text

    duplicate = await client.post(base, data={"_csrf": login.csrf, "name": "Gamma"}, headers=HTML)
    assert duplicate.status_code == 409 and "already exists" in duplicate.text
    blank = await client.post(base, data={"_csrf": login.csrf, "name": " "}, headers=HTML)
    assert blank.status_code == 422 and 'class="field-error"' in blank.text

    forged = await client.post(base, data={"name": "Forged"}, headers=HTML)
    assert forged.status_code == 403
    assert await fetch(realm, "SELECT name FROM organizations WHERE name = 'Forged'") == []


async def test_a_refused_new_organization_keeps_the_typed_name_and_says_why(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/organizations"
    await realm.organization("Gamma Works")
    duplicate = await client.post(base, data={"_csrf": login.csrf, "name": "Gamma Works"}, headers=HTML)
    assert duplicate.status_code == 409
    assert '<div class="flash bad" role="alert">An organization with this name already exists in the realm.</div>' in (
        duplicate.text
    )
    assert '<input id="new-name" type="text" name="name" value="Gamma Works" required' in duplicate.text
    assert await fetch(realm, "SELECT count(*) FROM organizations WHERE name = 'Gamma Works'") == [(1,)]


async def test_organization_page_adds_and_removes_members(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    org = await realm.organization("Sales")
    user = await realm.user("seller@example.com", display_name="Sam Seller")
    base = f"/realms/{realm.slug}/organizations/{org.id}"
    page = await client.get(base, headers=HTML)
    assert page.status_code == 200 and "No members yet." in page.text and "seller@example.com" in page.text  # picker

    added = await client.post(
        base + "/members",
        data={"_csrf": login.csrf, "email": "seller@example.com"},
        headers=HTML,
        follow_redirects=False,
    )
    assert added.status_code == 303
    page = await client.get(base, headers=HTML)
    assert "Sam Seller" in page.text
    outbox = await fetch(realm, "SELECT type, subject_id FROM outbox_events WHERE organization_id = :o", o=org.id)
    assert outbox == [("organization.membership.added", user.id)]

    unknown = await client.post(
        base + "/members",
        data={"_csrf": login.csrf, "email": "nobody@example.com"},
        headers=HTMX | {"HX-Target": "org-members"},
    )
    assert unknown.status_code == 422 and "No user with the email nobody@example.com" in unknown.text
    assert 'id="org-members"' in unknown.text and "<html" not in unknown.text
    again = await client.post(
        base + "/members",
        data={"_csrf": login.csrf, "email": "seller@example.com"},
        headers=HTMX | {"HX-Target": "org-members"},
    )
    assert again.status_code == 409 and "already a member" in again.text

    no_csrf = await client.post(f"{base}/members/{user.id}/remove", headers=HTML)
    assert no_csrf.status_code == 403
    removed = await client.post(
        f"{base}/members/{user.id}/remove", data={"_csrf": login.csrf}, headers=HTMX | {"HX-Target": "org-members"}
    )
    assert removed.status_code == 200 and "Member removed." in removed.text and "No members yet." in removed.text
    assert await fetch(realm, "SELECT id FROM memberships WHERE organization_id = :o", o=org.id) == []


async def test_organization_forms_answer_where_they_went_and_why_they_were_refused(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    org = await realm.organization("Sales")
    role = await realm.role("sellers", ["org.members.write"], boundary="organization")
    await realm.user("seller@example.com")
    stranger = await realm.user("stranger@example.com")
    base = f"/realms/{realm.slug}/organizations/{org.id}"

    renamed = await client.post(
        base, data={"_csrf": login.csrf, "name": "Sales EU", "state": "active"}, headers=HTML, follow_redirects=False
    )
    assert renamed.status_code == 303 and renamed.headers["location"] == f"{base}?done=updated"
    assert await fetch(realm, "SELECT name FROM organizations WHERE id = :o", o=org.id) == [("Sales EU",)]

    added = await client.post(
        base + "/members",
        data={"_csrf": login.csrf, "email": "seller@example.com"},
        headers=HTML,
        follow_redirects=False,
    )
    assert added.status_code == 303 and added.headers["location"] == f"{base}?done=member-added"
    shown = await client.get(added.headers["location"], headers=HTML)
    assert '<div class="flash ok" role="status">Member added.</div>' in shown.text

    not_member = await client.post(
        f"{base}/members/{stranger.id}/remove", data={"_csrf": login.csrf}, headers=HTMX | {"HX-Target": "org-members"}
    )
    assert not_member.status_code == 404
    assert '<div class="flash bad" role="alert">The user is not a member of this organization.</div>' in not_member.text

    made = await client.post(
        base + "/groups",
        data={"_csrf": login.csrf, "name": "Team", "role_ids": ["", role.id]},
        headers=HTML,
        follow_redirects=False,
    )
    assert made.status_code == 303, made.text
    team = made.headers["location"].split("/groups/")[1].split("?")[0]
    assert await fetch(realm, "SELECT role_id FROM group_roles WHERE group_id = :g", g=team) == [(role.id,)]
    unnamed = await client.post(
        base + "/groups", data={"_csrf": login.csrf, "name": "", "parent_id": team}, headers=HTML
    )
    assert unnamed.status_code == 422
    assert f'<option value="{team}" selected>Team</option>' in unnamed.text
    assert '<div class="flash bad" role="alert">' in unnamed.text.split('id="create-group"', 1)[1]
    assert '<p class="field-error" role="alert">must be at least 1 character(s)</p>' in unnamed.text
    assert await fetch(realm, "SELECT count(*) FROM groups WHERE organization_id = :o", o=org.id) == [(1,)]


async def test_groups_are_created_joined_and_show_inherited_roles(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    org = await realm.organization("Ops")
    role = await realm.role("ops-members", ["org.members.write"], boundary="organization")
    member = await realm.user("op@example.com", display_name="Olive Op")
    await realm.member(org, member)
    base = f"/realms/{realm.slug}/organizations/{org.id}"

    parent = await client.post(
        base + "/groups",
        data={"_csrf": login.csrf, "name": "Engineering", "role_ids": [role.id]},
        headers=HTML,
        follow_redirects=False,
    )
    assert parent.status_code == 303
    parent_id = parent.headers["location"].split("/groups/")[1].split("?")[0]
    child = await client.post(
        base + "/groups",
        data={"_csrf": login.csrf, "name": "Platform", "parent_id": parent_id},
        headers=HTML,
        follow_redirects=False,
    )
    child_page = await client.get(child.headers["location"], headers=HTML)
    assert child_page.status_code == 200 and "Group created." in child_page.text
    assert "ops-members" in child_page.text and "inherited from" in child_page.text
    assert "Engineering" in child_page.text and "op@example.com" in child_page.text  # the add picker

    child_url = child.headers["location"].split("?")[0]
    joined = await client.post(
        child_url + "/members",
        data={"_csrf": login.csrf, "user_id": member.id},
        headers=HTMX | {"HX-Target": "group-members"},
    )
    assert joined.status_code == 200 and "Olive Op" in joined.text and "Member added." in joined.text
    org_page = await client.get(base, headers=HTML)
    assert "Platform" in org_page.text and "Engineering" in org_page.text

    cycle = await client.post(
        f"{base}/groups/{parent_id}",
        data={
            "_csrf": login.csrf,
            "name": "Engineering",
            "parent_id": child_url.rsplit("/", 1)[1],
            "role_ids": [role.id],
        },
        headers=HTML,
    )
    assert cycle.status_code == 422 and "descendants" in cycle.text
    assert await fetch(realm, "SELECT parent_id FROM groups WHERE id = :g", g=parent_id) == [(None,)]

    left = await client.post(
        f"{child_url}/members/{member.id}/remove", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )
    assert left.status_code == 303
    assert await fetch(realm, "SELECT user_id FROM group_members") == []


async def test_refused_organization_and_group_forms_keep_what_was_typed_say_why_and_change_nothing(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    org = await realm.organization("Sales")
    base = f"/realms/{realm.slug}/organizations/{org.id}"
    renamed = await client.post(base, data={"_csrf": login.csrf, "name": "", "state": "inactive"}, headers=HTML)
    assert renamed.status_code == 422 and '<option value="inactive" selected>' in renamed.text
    assert await fetch(realm, "SELECT name, state FROM organizations WHERE id = :o", o=org.id) == [("Sales", "active")]

    stranger = await realm.user("stranger@example.com")
    not_member = await client.post(
        f"{base}/members/{stranger.id}/remove", data={"_csrf": login.csrf}, headers=HTMX | {"HX-Target": "org-members"}
    )
    assert not_member.status_code == 404 and 'id="org-members"' in not_member.text

    orphan = await client.post(
        base + "/groups", data={"_csrf": login.csrf, "name": "Kept Group", "parent_id": "grp_missing"}, headers=HTML
    )
    assert orphan.status_code in (404, 422) and 'value="Kept Group"' in orphan.text
    assert await fetch(realm, "SELECT id FROM groups WHERE name = 'Kept Group'") == []

    made = await client.post(
        base + "/groups", data={"_csrf": login.csrf, "name": "Team"}, headers=HTML, follow_redirects=False
    )
    group_url = made.headers["location"].split("?")[0]
    group_id = group_url.rsplit("/", 1)[1]
    await realm.member(org, stranger)  # someone to pick, so the form is there
    nobody = await client.post(
        group_url + "/members", data={"_csrf": login.csrf}, headers=HTMX | {"HX-Target": "group-members"}
    )
    assert nobody.status_code == 422 and "Pick a member of the organization." in nobody.text
    cycle = await client.post(
        group_url, data={"_csrf": login.csrf, "name": "Team Two", "parent_id": group_id}, headers=HTML
    )
    assert cycle.status_code == 422 and 'value="Team Two"' in cycle.text
    assert await fetch(realm, "SELECT name, parent_id FROM groups WHERE id = :g", g=group_id) == [("Team", None)]
    renamed_group = await client.post(
        group_url, data={"_csrf": login.csrf, "name": "Team Two"}, headers=HTML, follow_redirects=False
    )
    assert renamed_group.status_code == 303 and renamed_group.headers["location"] == f"{group_url}?done=group-updated"
    assert await fetch(realm, "SELECT name FROM groups WHERE id = :g", g=group_id) == [("Team Two",)]


async def test_group_forms_keep_the_parent_drop_empty_roles_and_say_why_a_member_change_was_refused(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    org = await realm.organization("Ops")
    role = await realm.role("ops-members", ["org.members.write"], boundary="organization")
    member = await realm.user("op@example.com", display_name="Olive Op")
    stranger = await realm.user("stranger@example.com")
    await realm.member(org, member)
    await realm.member(org, stranger)
    base = f"/realms/{realm.slug}/organizations/{org.id}"
    made = [
        await client.post(
            base + "/groups", data={"_csrf": login.csrf, "name": name}, headers=HTML, follow_redirects=False
        )
        for name in ("Team", "Other")
    ]
    team_url, other_url = (m.headers["location"].split("?")[0] for m in made)
    team, other = team_url.rsplit("/", 1)[1], other_url.rsplit("/", 1)[1]

    saved = await client.post(
        team_url,
        data={"_csrf": login.csrf, "name": "Team", "role_ids": ["", role.id]},
        headers=HTML,
        follow_redirects=False,
    )
    assert saved.status_code == 303 and saved.headers["location"] == f"{team_url}?done=group-updated"
    assert await fetch(realm, "SELECT role_id FROM group_roles WHERE group_id = :g", g=team) == [(role.id,)]

    unnamed = await client.post(team_url, data={"_csrf": login.csrf, "name": "", "parent_id": other}, headers=HTML)
    assert unnamed.status_code == 422
    assert f'<option value="{other}" selected>Other</option>' in unnamed.text
    assert await fetch(realm, "SELECT name, parent_id FROM groups WHERE id = :g", g=team) == [("Team", None)]

    box = HTMX | {"HX-Target": "group-members"}
    nobody = await client.post(team_url + "/members", data={"_csrf": login.csrf}, headers=box)
    assert nobody.status_code == 422
    assert '<p class="field-error" role="alert">Pick a member of the organization.</p>' in nobody.text

    not_in = await client.post(f"{team_url}/members/{stranger.id}/remove", data={"_csrf": login.csrf}, headers=box)
    assert not_in.status_code == 404 and 'id="group-members"' in not_in.text
    assert '<div class="flash bad" role="alert">The user is not in this group.</div>' in not_in.text

    joined = await client.post(
        team_url + "/members", data={"_csrf": login.csrf, "user_id": member.id}, headers=HTML, follow_redirects=False
    )
    assert joined.status_code == 303 and joined.headers["location"] == f"{team_url}?done=member-added"
    left = await client.post(
        f"{team_url}/members/{member.id}/remove", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )
    assert left.status_code == 303 and left.headers["location"] == f"{team_url}?done=member-removed"
    shown = await client.get(left.headers["location"], headers=HTML)
    assert '<div class="flash ok" role="status">Member removed.</div>' in shown.text
    assert await fetch(realm, "SELECT user_id FROM group_members") == []


async def test_roles_page_creates_a_role_with_checked_permissions(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/roles"
    listed = await client.get(base, headers=HTML)
    assert listed.status_code == 200
    assert "realm-admin" in listed.text and "built-in" in listed.text
    assert 'value="realm.workflows.publish"' in listed.text  # a checkbox per catalog permission

    created = await client.post(
        base,
        data={
            "_csrf": login.csrf,
            "name": "auditors-plus",
            "boundary": "realm",
            "requires_approval": "on",
            "permissions": ["realm.audit.read", "realm.users.read"],
        },
        headers=HTML,
        follow_redirects=False,
    )
    assert created.status_code == 303
    page = await client.get(created.headers["location"], headers=HTML)
    assert "auditors-plus" in page.text and "requires approval" in page.text and "Role created." in page.text
    rows = await fetch(realm, "SELECT permissions, requires_approval FROM roles WHERE name = 'auditors-plus'")
    assert rows == [(["realm.audit.read", "realm.users.read"], True)]

    none_ticked = await client.post(
        base, data={"_csrf": login.csrf, "name": "empty", "boundary": "realm"}, headers=HTML
    )
    assert none_ticked.status_code == 422 and "at least one permission" in none_ticked.text
    assert (
        await client.post(base, data={"name": "x", "permissions": ["realm.audit.read"]}, headers=HTML)
    ).status_code == 403


async def test_role_page_assigns_and_revokes_with_the_engines_rules(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    org = await realm.organization("North")
    role = await realm.role("north-lead", ["org.members.write"], boundary="organization", requires_approval=True)
    subject = await realm.user("lead@example.com")
    # An independent second person (the operator made them), who decides from an MFA session.
    approver, _ = await independent_admin(realm, "boss@example.com")
    base = f"/realms/{realm.slug}/roles/{role.id}"
    page = await client.get(base, headers=HTML)
    assert page.status_code == 200 and "Nobody holds this role directly." in page.text and "North" in page.text
    target = HTMX | {"HX-Target": "role-assignments"}

    no_approver = await client.post(
        base + "/assignments",
        data={"_csrf": login.csrf, "user_email": "lead@example.com", "organization_id": org.id},
        headers=target,
    )
    assert no_approver.status_code == 422 and "independent approver" in no_approver.text
    self_approved = await client.post(
        base + "/assignments",
        data={
            "_csrf": login.csrf,
            "user_email": "lead@example.com",
            "organization_id": org.id,
            "approver_email": realm.admin.email,
        },
        headers=target,
    )
    assert self_approved.status_code == 403 and "someone other than the granter" in self_approved.text
    bad_time = await client.post(
        base + "/assignments",
        data={
            "_csrf": login.csrf,
            "user_email": "lead@example.com",
            "organization_id": org.id,
            "expires_at": "soon",
            "approver_email": "boss@example.com",
        },
        headers=target,
    )
    assert bad_time.status_code == 422 and 'class="field-error"' in bad_time.text
    assigned = await client.post(
        base + "/assignments",
        data={
            "_csrf": login.csrf,
            "user_email": "lead@example.com",
            "organization_id": org.id,
            "expires_at": "2099-01-31T17:00",
            "approver_email": "boss@example.com",
        },
        headers=target,
    )
    assert assigned.status_code == 200 and "Approval requested" in assigned.text
    # The named approver approves on the approvals endpoints; the assignment exists from then on.
    [(approval_id,)] = await fetch(realm, "SELECT id FROM workflow_approvals WHERE subject_id = :u", u=subject.id)
    boss = await sign_in(client, realm, approver)
    decided = await client.post(f"{realm.api}/approvals/{approval_id}/approve", headers={"X-CSRF-Token": boss.csrf})
    assert decided.status_code == 200, decided.text
    client.cookies.set("cockpit_session", login.cookie)
    rows = await fetch(
        realm,
        "SELECT id, user_id, organization_id, approver_id, expires_at FROM role_assignments WHERE role_id = :r",
        r=role.id,
    )
    assert len(rows) == 1 and rows[0][1:4] == (subject.id, org.id, approver.id)
    assert rows[0][4].year == 2099 and rows[0][4].hour == 17

    assert (await client.post(f"{base}/assignments/{rows[0][0]}/revoke", headers=HTML)).status_code == 403
    revoked = await client.post(
        f"{base}/assignments/{rows[0][0]}/revoke", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )
    assert revoked.status_code == 303
    assert await fetch(realm, "SELECT id FROM role_assignments WHERE role_id = :r", r=role.id) == []
    audit = await fetch(
        realm,
        "SELECT type FROM audit_events WHERE category = 'authorization' AND subject_id = :u ORDER BY id",
        u=subject.id,
    )
    assert audit == [("role.assignment.requested",), ("role.assigned",), ("role.revoked",)]


async def test_refused_role_forms_keep_what_was_typed_say_why_and_change_nothing(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/roles"
    untouched = await client.post(
        base, data={"_csrf": login.csrf, "name": "readers-two", "description": "Reads the audit log"}, headers=HTML
    )
    assert untouched.status_code == 422 and "at least one permission" in untouched.text
    assert "Reads the audit log" in untouched.text
    assert await fetch(realm, "SELECT id FROM roles WHERE name = 'readers-two'") == []

    held = await realm.role("held", ["realm.audit.read"])
    other = await realm.role("other", ["realm.audit.read"])
    holder = await realm.user("holder@example.com")
    assignment = await realm.assign(holder, other)
    target = HTMX | {"HX-Target": "role-assignments"}
    wrong_role = await client.post(
        f"{base}/{held.id}/assignments/{assignment.id}/revoke", data={"_csrf": login.csrf}, headers=target
    )
    assert wrong_role.status_code == 422 and 'id="role-assignments"' in wrong_role.text
    assert "This assignment is of another role." in wrong_role.text  # why, not only that it failed
    assert await fetch(realm, "SELECT role_id FROM role_assignments WHERE id = :a", a=assignment.id) == [(other.id,)]

    in_use = await client.post(f"{base}/{other.id}/delete", data={"_csrf": login.csrf}, headers=HTML)
    assert in_use.status_code == 409 and "The role is in use (1 assignment(s), 0 group(s))" in in_use.text
    assert await fetch(realm, "SELECT name FROM roles WHERE id = :r", r=other.id) == [("other",)]
    deleted = await client.post(
        f"{base}/{held.id}/delete", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
    )
    assert deleted.status_code == 303 and deleted.headers["location"] == f"{base}?done=deleted"
    assert "Role deleted." in (await client.get(deleted.headers["location"], headers=HTML)).text
    assert await fetch(realm, "SELECT name FROM roles WHERE id = :r", r=held.id) == []


async def test_role_forms_default_the_boundary_keep_ticks_point_at_the_field_and_force_a_delete(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    login = await sign_in(client, realm, realm.admin)
    base = f"/realms/{realm.slug}/roles"
    no_boundary = await client.post(
        base,
        data={"_csrf": login.csrf, "name": "plain-readers", "permissions": ["realm.audit.read"]},
        headers=HTML,
        follow_redirects=False,
    )
    assert no_boundary.status_code == 303, no_boundary.text
    assert await fetch(realm, "SELECT boundary FROM roles WHERE name = 'plain-readers'") == [("realm",)]
    unnamed = await client.post(
        base, data={"_csrf": login.csrf, "name": "", "permissions": ["realm.users.read"]}, headers=HTML
    )
    assert unnamed.status_code == 422
    assert 'value="realm.users.read" checked' in unnamed.text  # the ticked permission stays ticked
    assert 'value="realm.audit.read" checked' not in unnamed.text

    role = await realm.role("plain-role", ["realm.audit.read"])
    await realm.user("holder@example.com")
    role_url = f"{base}/{role.id}"
    target = HTMX | {"HX-Target": "role-assignments"}
    nobody = await client.post(
        f"{role_url}/assignments", data={"_csrf": login.csrf, "user_email": "nobody@example.com"}, headers=target
    )
    assert nobody.status_code == 422
    assert re.search(r'id="assign-user"[^>]*aria-invalid="true"', nobody.text)  # beside the user field
    assert (
        '<p class="field-error" role="alert">No user with the email nobody@example.com in this realm.</p>'
        in nobody.text
    )
    assigned = await client.post(
        f"{role_url}/assignments",
        data={"_csrf": login.csrf, "user_email": "holder@example.com"},
        headers=HTML,
        follow_redirects=False,
    )
    assert assigned.status_code == 303 and assigned.headers["location"] == f"{role_url}?done=assigned"
    assert "Role assigned." in (await client.get(assigned.headers["location"], headers=HTML)).text
    [(assignment_id,)] = await fetch(realm, "SELECT id FROM role_assignments WHERE role_id = :r", r=role.id)
    revoked = await client.post(
        f"{role_url}/assignments/{assignment_id}/revoke",
        data={"_csrf": login.csrf},
        headers=HTML,
        follow_redirects=False,
    )
    assert revoked.status_code == 303 and revoked.headers["location"] == f"{role_url}?done=revoked"
    assert "Assignment revoked." in (await client.get(revoked.headers["location"], headers=HTML)).text

    await publish(
        realm, manual({"id": "grant", "type": "assign_role", "role_id": role.id, "scope": "realm"}), "Granter"
    )
    refused = await client.post(f"{role_url}/delete", data={"_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 409 and "Granter" in refused.text and 'name="force" value="true"' in refused.text
    assert await fetch(realm, "SELECT name FROM roles WHERE id = :r", r=role.id) == [("plain-role",)]
    forced = await client.post(
        f"{role_url}/delete", data={"_csrf": login.csrf, "force": "true"}, headers=HTML, follow_redirects=False
    )
    assert forced.status_code == 303 and forced.headers["location"] == f"{base}?done=deleted"
    assert await fetch(realm, "SELECT name FROM roles WHERE id = :r", r=role.id) == []


async def test_pages_need_the_same_permissions_as_the_api(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    reader = await realm.user("reader@example.com")
    await realm.assign(reader, await realm.role("org-reader", ["realm.organizations.read"]))
    login = await sign_in(client, realm, reader)
    org = await realm.organization("Visible")
    page = await client.get(f"/realms/{realm.slug}/organizations/{org.id}", headers=HTML)
    assert page.status_code == 200 and "Visible" in page.text
    assert "Add member" not in page.text and "New group" not in page.text  # no write forms without the permission
    refused = await client.post(
        f"/realms/{realm.slug}/organizations/{org.id}/members",
        data={"_csrf": login.csrf, "email": "reader@example.com"},
        headers=HTML,
    )
    assert refused.status_code == 403
    assert (await client.get(f"/realms/{realm.slug}/roles", headers=HTML)).status_code == 403
