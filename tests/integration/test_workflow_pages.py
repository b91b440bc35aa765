"""The workflow pages as a signed-in browser sees them: list, new, editor, revisions, diff, decisions.

The first tests need no database: they pin how a JSON pointer is placed on a line of the text
the person typed.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from cockpit.pages.workflows.diff import side_by_side
from cockpit.pages.workflows.editor_text import line_of, parse_text, pointer_lines
from engine.directory.audit import Actor
from engine.directory.models import RealmPolicy, User
from engine.workflows.definitions import authored_json, line_diff, pretty_json
from engine.workflows.publication import approval_needed, publish_revision
from engine.workflows.revisions import decide_revision
from engine.workflows.templates import workflow_templates
from testing.factories import HTML, RealmHandle, independent_admin
from testing.pages import htmx, signed_in
from testing.runs import start
from testing.workflows import make_workflow, manual, manual_then_end, publish, stage

Client = AsyncTestClient[Litestar]

MINIMAL: dict[str, Any] = {
    "schema_version": 1,
    "triggers": [{"type": "manual"}],
    "steps": [{"id": "done", "type": "end"}],
}


# --- Pointer → line (no database) -----------------------------------------------------------------


def test_pointer_lines_place_members_on_their_key_and_items_where_they_start() -> None:
    source = (
        "{\n"  # 1
        '  "steps": [\n'  # 2
        '    {"id": "a",\n'  # 3
        '     "type": "wait"},\n'  # 4
        "    {\n"  # 5
        '      "id": "b"\n'  # 6
        "    }\n"  # 7
        "  ],\n"  # 8
        '  "a/b": {"c~d": [1, [2,\n'  # 9
        "  3]]},\n"  # 10
        '  "empty": {}, "none": []\n'  # 11
        "}"
    )
    lines = pointer_lines(source)
    assert lines[""] == 1
    assert lines["/steps"] == 2
    assert lines["/steps/0"] == 3 and lines["/steps/0/id"] == 3 and lines["/steps/0/type"] == 4
    assert lines["/steps/1"] == 5 and lines["/steps/1/id"] == 6
    assert lines["/a~1b"] == 9 and lines["/a~1b/c~0d/1/0"] == 9 and lines["/a~1b/c~0d/1/1"] == 10
    assert lines["/empty"] == 11 and lines["/none"] == 11
    # A missing member belongs to the nearest ancestor that is there.
    assert line_of(lines, "/steps/1/type") == 5
    assert line_of(lines, "/steps/0/retry/max_attempts") == 3
    assert line_of(lines, "/nothing") == 1
    assert line_of({}, "/steps") is None


def test_pointer_lines_follow_the_text_as_typed_not_the_pretty_form() -> None:
    typed = '{"triggers": [{"type": "manual"}],\n\n\n "steps": [{"id": "x", "type": "end"},\n   {"id": "y"}]}'
    lines = pointer_lines(typed)
    assert lines["/triggers/0/type"] == 1 and lines["/steps"] == 4 and lines["/steps/1"] == 5
    # The pretty-printed form of the same value puts them elsewhere.
    pretty = pointer_lines(pretty_json(json.loads(typed)))
    assert pretty["/steps/1"] != lines["/steps/1"]


def test_pointer_lines_keep_the_last_of_a_repeated_key_like_json_loads() -> None:
    typed = '{\n"k": {"old": 1},\n"k": 5\n}'
    lines = pointer_lines(typed)
    assert json.loads(typed) == {"k": 5}
    assert lines["/k"] == 3 and "/k/old" not in lines


def test_pointer_lines_of_scalars_deep_nesting_and_text_that_does_not_parse() -> None:
    assert pointer_lines("\n\n  5 ") == {"": 3}
    deep = "[" * 3000 + "]" * 3000
    assert len(pointer_lines(deep)) == 3000  # no recursion: as deep as json.loads goes
    assert pointer_lines('{"a": [1, 2') == {"": 1, "/a": 1, "/a/0": 1, "/a/1": 1}  # partial, never an error


def test_text_that_is_not_json_gives_one_issue_at_its_line_and_column() -> None:
    parsed = parse_text('{\n  "a": 1,\n}')
    assert not parsed.parsed and len(parsed.issues) == 1
    issue = parsed.issues[0]
    # A trailing comma is reported where the comma is, not on the line of the closing brace.
    assert (issue.path, issue.code, issue.line, issue.column) == ("/definition", "invalid_json", 2, 9)
    assert "trailing comma" in issue.message and "line 2, column 9" in issue.message
    other = parse_text('{\n  "a": 1\n  "b": 2\n}').issues[0]
    assert (other.line, other.column) == (3, 3) and "line 3, column 3" in other.message
    assert parse_text("").issues[0].line == 1
    assert parse_text("[" * 100_000 + "]" * 100_000).issues[0].code in ("too_deep", "too_large")


def test_side_by_side_pairs_lines_and_folds_long_unchanged_runs() -> None:
    old = manual_then_end(*({"id": f"s{i}", "type": "wait", "duration": "1h"} for i in range(6)))
    new = json.loads(json.dumps(old))
    new["steps"][5]["duration"] = "2h"
    rows = side_by_side(line_diff(old, new))
    changed = [r for r in rows if r["kind"] == "replace"]
    assert changed == [
        {
            "kind": "replace",
            "old_no": changed[0]["old_no"],
            "old": '      "duration": "1h",',
            "new_no": changed[0]["new_no"],
            "new": '      "duration": "2h",',
        }
    ]
    folds = [r for r in rows if r["kind"] == "fold"]
    assert folds and all(r["count"] > 0 for r in folds)
    shown_equal = sum(1 for r in rows if r["kind"] == "equal")
    assert shown_equal + sum(r["count"] for r in folds) + 1 == len(pretty_json(old).splitlines())


# --- Helpers --------------------------------------------------------------------------------------


async def second_admin(realm: RealmHandle, email: str = "second@example.com") -> User:
    """A second realm administrator the operator made: an independent second person to the first."""
    user, _ = await independent_admin(realm, email, display_name="Second Admin")
    return user


async def audit_types(realm: RealmHandle, workflow_id: str) -> list[str]:
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT type FROM audit_events WHERE subject_id = :w ORDER BY occurred_at, id"), {"w": workflow_id}
        )
        return list(rows.scalars())


def issues_of(page: str) -> list[tuple[str, str, int | None]]:
    """(path, code, line) of each issue listed on a page."""
    found = []
    for item in re.findall(r"<li>(.*?)</li>", page.split('<ol class="issues"', 1)[1].split("</ol>", 1)[0], re.S):
        line = re.search(r'data-line="(\d+)"', item)
        path = re.search(r'<code class="path">([^<]*)</code>', item)
        code = re.search(r'<span class="badge bad">([^<]*)</span>', item)
        assert path and code
        found.append((html.unescape(path.group(1)), code.group(1), int(line.group(1)) if line else None))
    return found


# --- The list and a new workflow ------------------------------------------------------------------


async def test_the_list_shows_state_revision_approval_and_owner_and_filters(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    grace = await realm.user("grace@example.com", display_name="Grace Hopper")
    onboarding = await make_workflow(realm, "Onboarding", body=MINIMAL, requires_approval=True, author=grace)
    await make_workflow(realm, "Offboarding")
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE workflows SET owner_id = :u WHERE id = :w"), {"u": grace.id, "w": onboarding.id}
        )
    admin = Actor(type="user", id=realm.admin.id, realm_id=realm.id, mfa_session=True)
    async with realm.sessions() as session, session.begin():
        await decide_revision(session, admin, onboarding.id, 1, approve=True, comment=None)
        await publish_revision(session, admin, onboarding.id, 1)

    url = f"/realms/{realm.slug}/workflows"
    listing = await client.get(url, headers=HTML)
    assert listing.status_code == 200
    assert "New workflow" in listing.text and 'id="workflows-table"' in listing.text
    assert 'aria-current="page"' in listing.text.split(f'href="{url}"', 1)[1][:30]
    row = listing.text.split(">Onboarding</a>", 1)[1].split("</tr>", 1)[0]
    assert '<span class="badge active" data-testid="workflow-state">active</span>' in row
    assert f'href="{url}/{onboarding.id}/revisions/1">revision 1</a>' in row
    assert "requires approval" in row and "Grace Hopper" in row
    other = listing.text.split(">Offboarding</a>", 1)[1].split("</tr>", 1)[0]
    assert (
        '<span class="badge draft" data-testid="workflow-state">draft</span>' in other
        and "none" in other
        and "requires approval" not in other
    )

    fragment = await client.get(
        url, params={"q": "onb"}, headers=HTML | {"HX-Request": "true", "HX-Target": "workflows-table"}
    )
    assert fragment.text.lstrip().startswith('<div id="workflows-table">') and "<html" not in fragment.text
    assert "Onboarding" in fragment.text and "Offboarding" not in fragment.text
    drafts = await client.get(url, params={"state": "draft"}, headers=HTML)
    assert "Offboarding" in drafts.text and ">Onboarding</a>" not in drafts.text
    nothing = await client.get(url, params={"q": "payroll"}, headers=HTML)
    assert "No workflow matches these filters." in nothing.text
    bad = await client.get(url, params={"state": "zombie"}, headers=HTML)
    assert bad.status_code == 422 and "state is draft, active or disabled" in bad.text


async def test_a_new_workflow_shows_every_error_at_once_then_opens_the_editor(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    grace = await realm.user("grace@example.com", display_name="Grace Hopper")
    url = f"/realms/{realm.slug}/workflows/new"

    form = await client.get(url, headers=HTML)
    assert form.status_code == 200
    assert f'<option value="{realm.admin.id}" selected>' in form.text  # the owner defaults to me
    assert 'name="requires_approval" value="on" >' in form.text  # the realm policy: no approval
    assert "fixed when the workflow is created" in form.text

    broken = '{\n  "schema_version": 1,\n  "steps": []\n  "triggers": []\n}'
    bad = await client.post(
        url, data={"_csrf": login.csrf, "name": "  ", "owner_id": grace.id, "definition": broken}, headers=HTML
    )
    assert bad.status_code == 422
    assert issues_of(bad.text) == [("/definition", "invalid_json", 4)]
    kept = bad.text.split('id="wf-definition"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert html.unescape(kept) == "\n" + broken  # the text stays as typed (the parser eats the first newline)

    invalid = json.dumps({"schema_version": 1, "triggers": [], "steps": [{"id": "x", "type": "nope"}]}, indent=2)
    bad = await client.post(
        url,
        data={"_csrf": login.csrf, "name": "  ", "owner_id": "usr_nobody", "definition": invalid},
        headers=HTML,
    )
    assert bad.status_code == 422 and "Check the fields marked below." in bad.text
    assert "A workflow name has 1 to 100 characters." in bad.text and "There is no such user in this realm." in bad.text
    assert ("/definition/triggers", "too_few", 3) in issues_of(bad.text)
    assert ("/definition/steps/0/type", "invalid_value", 7) in issues_of(bad.text)

    created = await client.post(
        url,
        data={
            "_csrf": login.csrf,
            "name": "Onboarding",
            "description": "New joiners",
            "owner_id": grace.id,
            "requires_approval": "on",
            "definition": json.dumps(MINIMAL),
        },
        headers=HTML,
        follow_redirects=False,
    )
    assert created.status_code == 303
    location = created.headers["location"]
    workflow_id = location.split("/workflows/", 1)[1].split("/", 1)[0]
    assert location == f"/realms/{realm.slug}/workflows/{workflow_id}/edit?done=created"
    editor = await client.get(location, headers=HTML)
    assert "Workflow created." in editor.text and "revision 1</a>" in editor.text
    async with realm.sessions() as session:
        row = (
            await session.execute(
                text("SELECT name, owner_id, requires_approval, created_by FROM workflows WHERE id = :w"),
                {"w": workflow_id},
            )
        ).one()
    assert tuple(row) == ("Onboarding", grace.id, True, realm.admin.id)
    assert await audit_types(realm, workflow_id) == ["workflow.created", "workflow.revision.staged"]

    again = await client.post(url, data={"_csrf": login.csrf, "name": "onboarding"}, headers=HTML)
    assert again.status_code == 409 and "already exists" in again.text


async def test_the_realm_policy_locks_approval_on(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/workflows/new"
    free = await client.get(url, headers=HTML)
    assert (
        'name="requires_approval" value="on" >' in free.text and "disabled" not in free.text.split("wf-definition")[0]
    )
    async with realm.sessions() as session, session.begin():
        policy = await session.get(RealmPolicy, realm.id)
        assert policy is not None
        policy.extensions = {"workflow_publish_approval": True}
    form = await client.get(url, headers=HTML)
    assert re.search(r'<input type="checkbox" name="requires_approval_locked" value="on" checked disabled', form.text)
    assert "Locked: the realm policy requires approval before publishing" in form.text
    # A form without the box (forged, or from an old page) still gets approval: the policy is a floor.
    done = await client.post(url, data={"_csrf": login.csrf, "name": "Quick"}, headers=HTML, follow_redirects=False)
    assert done.status_code == 303
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT requires_approval FROM workflows WHERE name = 'Quick'")) is True


async def test_pages_say_approval_is_needed_once_the_policy_floor_covers_an_older_workflow(
    client: Client, realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    workflow = await make_workflow(realm, body=MINIMAL, requires_approval=False)
    base = f"/realms/{realm.slug}/workflows/{workflow.id}"

    async def pages() -> dict[str, str]:
        return {
            "list": (await client.get(f"/realms/{realm.slug}/workflows", headers=HTML)).text,
            "detail": (await client.get(base, headers=HTML)).text,
            "revisions": (await client.get(f"{base}/revisions", headers=HTML)).text,
            "revision": (await client.get(f"{base}/revisions/1", headers=HTML)).text,
            "editor": (await client.get(f"{base}/edit", headers=HTML)).text,
        }

    before = await pages()
    assert "requires approval" not in before["list"] and "not required" in before["detail"]
    assert 'action="' + base + '/revisions/1/publish"' in before["revision"]
    assert "publish it from its page" in before["editor"]
    assert "approved → published" not in before["revisions"]

    async with realm.sessions() as session, session.begin():
        policy = await session.get(RealmPolicy, realm.id)
        assert policy is not None
        policy.extensions = {"workflow_publish_approval": True}
    after = await pages()
    # The workflow's own flag is unchanged; the policy is a floor over it, and every page says so.
    async with realm.sessions() as session:
        assert (
            await session.scalar(text("SELECT requires_approval FROM workflows WHERE id = :w"), {"w": workflow.id})
            is False
        )
        assert await approval_needed(session, workflow) is True
    assert "requires approval" in after["list"]
    assert "a revision is published only once someone other than its author approved it" in after["detail"]
    assert 'action="' + base + '/revisions/1/publish"' not in after["revision"]
    assert "publish it once it is approved" in after["revision"]
    assert "someone other than you approves it" in after["editor"]
    assert "approved → published" in after["revisions"]


async def test_a_new_workflow_from_a_template_opens_in_the_editor_with_what_is_left_to_choose(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/workflows/new"
    for template in workflow_templates():
        form = await client.get(url, params={"template": template.key}, headers=HTML)
        assert form.status_code == 200
        assert f'value="{template.key}" checked' in form.text
        assert f'value="{html.escape(template.name)}"' in form.text
        created = await client.post(
            url,
            data={"_csrf": login.csrf, "name": template.name, "owner_id": realm.admin.id, "template": template.key},
            headers=HTML,
            follow_redirects=False,
        )
        assert created.status_code == 303, created.text
        location = created.headers["location"]
        workflow_id = location.split("/workflows/", 1)[1].split("/", 1)[0]
        assert location.endswith(f"/edit?done=created&template={template.key}")
        # Nothing staged yet: the template is text in the editor until the author saves it.
        assert await audit_types(realm, workflow_id) == ["workflow.created"]
        editor = await client.get(location, headers=HTML)
        assert editor.status_code == 200
        assert f"Starting from the template <strong>{html.escape(template.title)}</strong>" in editor.text
        kept = editor.text.split('id="definition-text"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
        assert json.loads(html.unescape(kept)) == template.definition
        # Validation names each reference still to choose, each with its field in the builder.
        holes = {
            f"/definition/steps/{i}/{member}"
            for i, step in enumerate(template.definition["steps"])
            for member, value in step.items()
            if member in ("role_id", "group_id", "subscription_id", "approvers") and value in ("", [])
        } | {
            f"/definition/triggers/{i}/select/role_id"
            for i, trigger in enumerate(template.definition["triggers"])
            if trigger.get("select", {}).get("role_id") == ""
        }
        assert {path for path, _, _ in issues_of(editor.text)} == holes
        assert editor.text.count('class="goto-field"') >= len([h for h in holes if "/select/" not in h])

    # An unknown template, or a template and a pasted definition at once, is refused with the reason.
    unknown = await client.post(url, data={"_csrf": login.csrf, "name": "X", "template": "payroll"}, headers=HTML)
    assert unknown.status_code == 422 and "Choose one of the templates." in unknown.text
    both = await client.post(
        url,
        data={"_csrf": login.csrf, "name": "Y", "template": "onboarding", "definition": json.dumps(MINIMAL)},
        headers=HTML,
    )
    assert both.status_code == 422 and "Choose a template or paste a definition, not both" in both.text


async def test_a_refused_new_workflow_says_why_whole_and_makes_nothing(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    url = f"/realms/{realm.slug}/workflows/new"
    both = await client.post(
        url,
        data={"_csrf": login.csrf, "name": "Y", "template": "onboarding", "definition": json.dumps(MINIMAL)},
        headers=HTML,
    )
    assert both.status_code == 422
    assert '<div class="flash bad" role="alert">Check the fields marked below.</div>' in both.text
    assert (
        '<p class="field-error" role="alert">'
        "Choose a template or paste a definition, not both: a template opens in the editor.</p>"
    ) in both.text
    unknown = await client.post(url, data={"_csrf": login.csrf, "name": "X", "template": "payroll"}, headers=HTML)
    assert unknown.status_code == 422
    assert '<p class="field-error" role="alert">Choose one of the templates.</p>' in unknown.text
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT count(*) FROM workflows WHERE realm_id = :r"), {"r": realm.id}) == 0


# --- The editor -----------------------------------------------------------------------------------


async def test_the_editor_starts_from_the_latest_revision_or_a_skeleton(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    empty = await make_workflow(realm, "Empty")
    page = await client.get(f"/realms/{realm.slug}/workflows/{empty.id}/edit", headers=HTML)
    assert page.status_code == 200
    textarea = page.text.split('id="definition-text"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert json.loads(html.unescape(textarea)) == MINIMAL
    assert 'hx-trigger="keyup changed delay:500ms, load"' in page.text
    assert f'hx-post="/realms/{realm.slug}/workflows/{empty.id}/edit/validate"' in page.text
    gutter = page.text.split('id="definition-gutter" aria-hidden="true">', 1)[1].split("</pre>", 1)[0]
    assert gutter.split() == [str(i) for i in range(1, len(authored_json(MINIMAL).splitlines()) + 1)]
    assert "✓ Valid" in page.text and '<code class="step-id">done</code>' in page.text

    full = await make_workflow(realm, "Full", body=MINIMAL)
    later = manual_then_end({"id": "pause", "type": "wait", "duration": "1h"})
    await stage(realm, full, later)
    page = await client.get(f"/realms/{realm.slug}/workflows/{full.id}/edit", headers=HTML)
    textarea = page.text.split('id="definition-text"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert json.loads(html.unescape(textarea)) == later and "revision 2</a>" in page.text
    page = await client.get(f"/realms/{realm.slug}/workflows/{full.id}/edit", params={"from": 1}, headers=HTML)
    textarea = page.text.split('id="definition-text"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert json.loads(html.unescape(textarea)) == MINIMAL


async def test_live_validation_lists_each_issue_with_its_path_and_line(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    workflow = await make_workflow(realm)
    url = f"/realms/{realm.slug}/workflows/{workflow.id}/edit/validate"
    typed = (
        "{\n"
        '  "schema_version": 1,\n'
        '  "triggers": [{"type": "manual"}],\n'
        '  "steps": [\n'
        '    {"id": "grant", "type": "assign_role",\n'
        '     "scope": "realm", "role_id": "rol_00000000000000000000000000"},\n'
        '    {"id": "pause", "type": "wait",\n'
        '     "duration": "forever"},\n'
        '    {"id": "done", "type": "end", "script": "rm -rf"}\n'
        "  ]\n"
        "}"
    )
    answer = await client.post(url, data={"definition": typed}, headers=htmx(login, "editor-feedback"))
    assert answer.status_code == 200 and "<html" not in answer.text
    assert answer.text.lstrip().startswith('<section id="editor-feedback"')
    found = issues_of(answer.text)
    assert ("/definition/steps/1/duration", "invalid_value", 8) in found
    assert ("/definition/steps/2/script", "unknown_member", 9) in found
    # The preview follows the text: it parsed, so it is swapped in out of band.
    assert 'id="editor-preview"' in answer.text and 'hx-swap-oob="true"' in answer.text
    assert '<code class="step-id">pause</code>' in answer.text

    # The role reference is checked against the realm once the shape is sound.
    typed = typed.replace('"forever"', '"1h"').replace(', "script": "rm -rf"', "")
    answer = await client.post(url, data={"definition": typed}, headers=htmx(login, "editor-feedback"))
    assert issues_of(answer.text) == [("/definition/steps/0/role_id", "not_found", 6)]

    broken = '{\n  "schema_version": 1,\n  "triggers": [\n    {"type": "manual"}\n  ]\n  "steps": []\n}'
    answer = await client.post(url, data={"definition": broken}, headers=htmx(login, "editor-feedback"))
    assert answer.status_code == 200
    assert issues_of(answer.text) == [("/definition", "invalid_json", 6)]
    assert "line 6, column 3" in answer.text
    # The preview keeps the last text that parsed; only its note changes.
    assert 'id="editor-preview"' not in answer.text and "last text that did" in answer.text

    valid = await client.post(url, data={"definition": json.dumps(MINIMAL)}, headers=htmx(login, "editor-feedback"))
    assert "✓ Valid" in valid.text and 'class="issues"' not in valid.text

    async with realm.sessions() as session:
        count = await session.scalar(
            text("SELECT count(*) FROM workflow_revisions WHERE workflow_id = :w"), {"w": workflow.id}
        )
    assert count == 0  # validating changes nothing


async def test_saving_stages_a_draft_or_shows_the_api_errors_keeping_the_text(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    workflow = await make_workflow(realm)
    url = f"/realms/{realm.slug}/workflows/{workflow.id}/edit"

    typed = '{"schema_version": 1,\n "triggers": [{"type": "manual"}],\n "steps": [{"id": "BAD ID", "type": "end"}]}'
    refused = await client.post(url, data={"_csrf": login.csrf, "definition": typed}, headers=HTML)
    assert refused.status_code == 422
    assert issues_of(refused.text) == [("/definition/steps/0/id", "invalid_value", 3)]
    textarea = refused.text.split('id="definition-text"', 1)[1].split(">", 1)[1].split("</textarea>", 1)[0]
    assert html.unescape(textarea) == "\n" + typed  # the leading newline is eaten by the HTML parser
    assert '<span class="bad" data-testid="error-line">3</span>' in refused.text  # the gutter marks the line

    not_json = await client.post(url, data={"_csrf": login.csrf, "definition": "{"}, headers=HTML)
    assert not_json.status_code == 422 and issues_of(not_json.text)[0][1] == "invalid_json"

    body = manual_then_end({"id": "pause", "type": "wait", "duration": "2h"})
    saved = await client.post(
        url, data={"_csrf": login.csrf, "definition": json.dumps(body)}, headers=HTML, follow_redirects=False
    )
    assert saved.status_code == 303
    assert saved.headers["location"] == f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/1?done=staged"
    async with realm.sessions() as session:
        row = (
            await session.execute(
                text("SELECT number, status, definition, author_id FROM workflow_revisions WHERE workflow_id = :w"),
                {"w": workflow.id},
            )
        ).one()
    assert tuple(row) == (1, "draft", body, realm.admin.id)
    revision = await client.get(saved.headers["location"], headers=HTML)
    assert "Saved as a new draft revision." in revision.text and "is the first" in revision.text


async def test_saving_the_same_definition_again_makes_nothing_and_a_refusal_says_why_whole(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    workflow = await make_workflow(realm)
    url = f"/realms/{realm.slug}/workflows/{workflow.id}/edit"
    body = manual_then_end({"id": "pause", "type": "wait", "duration": "2h"})
    revisions = "SELECT count(*) FROM workflow_revisions WHERE workflow_id = :w"

    not_json = await client.post(url, data={"_csrf": login.csrf, "definition": "{"}, headers=HTML)
    assert not_json.status_code == 422
    assert (
        '<div class="flash bad" role="alert">The definition was not saved: fix the errors below.</div>' in not_json.text
    )
    for _ in range(2):
        saved = await client.post(
            url, data={"_csrf": login.csrf, "definition": json.dumps(body)}, headers=HTML, follow_redirects=False
        )
        assert saved.status_code == 303
    assert saved.headers["location"] == f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/1?done=unchanged"
    async with realm.sessions() as session:
        assert await session.scalar(text(revisions), {"w": workflow.id}) == 1
    shown = await client.get(saved.headers["location"], headers=HTML)
    assert "Nothing changed: this revision already holds exactly that definition, so no new one was made." in shown.text


# --- Revisions, diffs and decisions ---------------------------------------------------------------


async def test_the_revision_page_diffs_against_the_published_revision_or_any_other(
    client: Client, realm: RealmHandle
) -> None:
    await signed_in(client, realm)
    first = manual_then_end(
        {"id": "ask", "type": "approval", "approvers": [realm.admin.id], "expires_in": "72h"},
        {"id": "pause", "type": "wait", "duration": "1h"},
    )
    workflow = await make_workflow(realm, body=first)
    async with realm.sessions() as session, session.begin():
        await publish_revision(session, realm.actor, workflow.id, 1)
    second = manual_then_end(
        {"id": "pause", "type": "wait", "duration": "1h"},
        {"id": "ask", "type": "approval", "approvers": [realm.admin.id], "expires_in": "48h"},
        {"id": "bye", "type": "suspend_user"},
    )
    await stage(realm, workflow, second)
    await stage(realm, workflow, second | {"retry": {"max_attempts": 3, "backoff": "10s"}})

    url = f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/2"
    page = await client.get(url, headers=HTML)
    assert page.status_code == 200
    assert "Changes from revision 1 to revision 2" in page.text
    assert '<span class="badge added">1 added</span>' in page.text
    assert '<span class="badge changed">1 changed</span>' in page.text
    assert '<span class="badge moved">1 moved</span>' in page.text
    ask = page.text.split("<td><code>ask</code></td>", 1)[1].split("</tr>", 1)[0]
    assert "/expires_in" in ask and "<del>72h</del>" in ask and "<ins>48h</ins>" in ask
    assert (
        '<tr class="st-added" data-testid="diff-step" data-step="bye">'
        in page.text.split("<td><code>bye</code></td>", 1)[0][-80:]
    )
    lines = page.text.split('<table class="side-by-side"', 1)[1].split("</table>", 1)[0]
    assert '<tr class="replace">' in lines or '<tr class="insert">' in lines
    assert "&#34;48h&#34;" in lines and "&#34;72h&#34;" in lines
    assert '<option value="1" selected>' in page.text and '<option value="3" >' in page.text
    assert page.text.count('class="line" id="L') == len(pretty_json(second).splitlines())

    against = await client.get(
        url, params={"against": 3}, headers=HTML | {"HX-Request": "true", "HX-Target": "revision-diff"}
    )
    assert against.text.lstrip().startswith('<section id="revision-diff"') and "<html" not in against.text
    assert "Changes from revision 3 to revision 2" in against.text
    assert "<code>retry</code>" in against.text
    same = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/1", headers=HTML)
    assert "is the first" in same.text  # the published first revision has nothing before it
    assert (await client.get(url, params={"against": 9}, headers=HTML)).status_code == 404


async def test_the_author_cannot_approve_another_admin_approves_and_the_author_publishes(
    client: Client, realm: RealmHandle
) -> None:
    workflow = await make_workflow(realm, body=MINIMAL, requires_approval=True)
    await stage(realm, workflow, manual_then_end({"id": "pause", "type": "wait", "duration": "1h"}))
    base = f"/realms/{realm.slug}/workflows/{workflow.id}/revisions"

    login = await signed_in(client, realm)
    page = await client.get(f"{base}/1", headers=HTML)
    assert "You wrote this revision" in page.text and ">Approve</button>" in page.text
    assert ">Publish</button>" not in page.text and "requires an approved revision" in page.text

    refused = await client.post(f"{base}/1/approve", data={"_csrf": login.csrf, "comment": "fine by me"}, headers=HTML)
    assert refused.status_code == 403
    assert "<code>separation_of_duties</code>" in refused.text
    assert "The author of a revision cannot approve or reject it." in refused.text
    assert "fine by me" in refused.text  # the comment stays in its form

    early = await client.post(f"{base}/1/publish", data={"_csrf": login.csrf}, headers=HTML)
    assert early.status_code == 403 and "<code>approval_required</code>" in early.text

    second = await second_admin(realm)
    login2 = await signed_in(client, realm, second)
    approved = await client.post(
        f"{base}/1/approve",
        data={"_csrf": login2.csrf, "comment": "Looks right."},
        headers=HTML,
        follow_redirects=False,
    )
    assert approved.status_code == 303 and approved.headers["location"] == f"{base}/1?done=approved"
    shown = await client.get(approved.headers["location"], headers=HTML)
    assert "Revision approved." in shown.text and "Second Admin" in shown.text and "Looks right." in shown.text
    rejected = await client.post(f"{base}/2/reject", data={"_csrf": login2.csrf}, headers=HTML, follow_redirects=False)
    assert rejected.status_code == 303
    twice = await client.post(f"{base}/2/approve", data={"_csrf": login2.csrf}, headers=HTML)
    assert twice.status_code == 409 and "<code>conflict</code>" in twice.text

    login = await signed_in(client, realm)
    published = await client.post(f"{base}/1/publish", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert published.status_code == 303 and published.headers["location"] == f"{base}/1?done=published"
    shown = await client.get(published.headers["location"], headers=HTML)
    assert "Revision published." in shown.text and '<span class="badge published">published</span>' in shown.text
    async with realm.sessions() as session:
        state = (
            await session.execute(
                text("SELECT state, published_revision FROM workflows WHERE id = :w"), {"w": workflow.id}
            )
        ).one()
    assert tuple(state) == ("active", 1)
    assert await audit_types(realm, workflow.id) == [
        "workflow.created",
        "workflow.revision.staged",
        "workflow.revision.staged",
        "workflow.revision.approved",
        "workflow.revision.rejected",
        "workflow.published",
    ]


async def test_publish_and_roll_back_without_approval(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    workflow = await make_workflow(realm, body=MINIMAL)
    await stage(realm, workflow, manual_then_end({"id": "pause", "type": "wait", "duration": "1h"}))
    base = f"/realms/{realm.slug}/workflows/{workflow.id}/revisions"
    for number in (1, 2):
        done = await client.post(
            f"{base}/{number}/publish", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False
        )
        assert done.status_code == 303
    page = await client.get(f"{base}/1", headers=HTML)
    assert '<span class="badge superseded">superseded</span>' in page.text and "Roll back to this revision" in page.text
    back = await client.post(f"{base}/1/rollback", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert back.status_code == 303 and back.headers["location"].endswith("?done=rolled-back")
    again = await client.post(f"{base}/1/rollback", data={"_csrf": login.csrf}, headers=HTML)
    assert again.status_code == 409 and "already" in again.text
    assert (await audit_types(realm, workflow.id))[-1] == "workflow.rolled_back"


async def test_publishing_past_the_delegation_ceiling_names_the_steps(client: Client, realm: RealmHandle) -> None:
    powerful = await realm.role("user-admins", ["realm.users.write", "realm.users.suspend"])
    body = manual_then_end(
        {"id": "pause", "type": "wait", "duration": "1h"},
        {"id": "grant", "type": "assign_role", "role_id": powerful.id, "scope": "realm"},
    )
    workflow = await make_workflow(realm, body=body)
    publisher_role = await realm.role(
        "publishers", ["realm.workflows.read", "realm.workflows.write", "realm.workflows.publish"]
    )
    publisher = await realm.user("publisher@example.com")
    await realm.assign(publisher, publisher_role)
    login = await signed_in(client, realm, publisher)
    url = f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/1/publish"
    refused = await client.post(url, data={"_csrf": login.csrf}, headers=HTML)
    assert refused.status_code == 403
    assert "<code>grant_ceiling_exceeded</code>" in refused.text
    assert "definition.steps[1]" in refused.text and "<code>/definition/steps/1</code>" in refused.text
    line = pointer_lines(authored_json(body))["/steps/1"]
    assert f'<a href="#L{line}">line {line}</a>' in refused.text
    async with realm.sessions() as session:
        assert await session.scalar(text("SELECT state FROM workflows WHERE id = :w"), {"w": workflow.id}) == "draft"


# --- The overview, state and permissions ----------------------------------------------------------


async def test_the_overview_disables_enables_and_deletes(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    workflow = await make_workflow(realm, body=MINIMAL)
    url = f"/realms/{realm.slug}/workflows/{workflow.id}"
    page = await client.get(url, headers=HTML)
    assert page.status_code == 200
    assert "Open the editor" in page.text and f'href="{url}/revisions/1">revision 1</a>' in page.text
    assert "Disable</button>" in page.text and "hx-confirm" in page.text and "Delete workflow" in page.text

    off = await client.post(url + "/disable", headers=htmx(login, "workflow-state"))
    assert off.status_code == 200 and off.text.lstrip().startswith('<section id="workflow-state"')
    assert (
        '<span class="badge disabled" data-testid="workflow-state">disabled</span>' in off.text
        and "Enable</button>" in off.text
    )
    twice = await client.post(url + "/disable", headers=htmx(login, "workflow-state"))
    assert twice.status_code == 409 and "already disabled" in twice.text and "<html" not in twice.text
    on = await client.post(url + "/enable", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert on.status_code == 303 and on.headers["location"] == url

    gone = await client.post(url + "/delete", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert gone.status_code == 303 and gone.headers["location"] == f"/realms/{realm.slug}/workflows?done=deleted"
    assert "Workflow deleted." in (await client.get(gone.headers["location"], headers=HTML)).text
    assert (await client.get(url, headers=HTML)).status_code == 404
    # Deleting it again, or a workflow that never was, is a 404 and writes nothing.
    for missing in (url, f"/realms/{realm.slug}/workflows/wfl_none"):
        again = await client.post(missing + "/delete", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
        assert again.status_code == 404, missing
    assert (await audit_types(realm, workflow.id))[-4:] == [
        "workflow.disabled",
        "security.alert",  # seed 000: disabling a workflow raises one
        "workflow.enabled",
        "workflow.deleted",
    ]


async def test_deleting_a_workflow_with_runs_in_flight_is_refused_on_its_page(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    workflow_id = await publish(realm, manual({"id": "done", "type": "end"}), "Busy")
    await start(realm, workflow_id, (await realm.user("ada@example.com")).id)  # stays pending: in flight
    url = f"/realms/{realm.slug}/workflows/{workflow_id}"
    refused = await client.post(url + "/delete", data={"_csrf": login.csrf}, headers=HTML, follow_redirects=False)
    assert refused.status_code == 409 and "<html" in refused.text
    assert (
        '<div class="flash bad" role="alert">Runs of this workflow have not finished; disable it and let them end,'
        " or cancel them.</div>" in html.unescape(refused.text)
    )
    assert (await client.get(url, headers=HTML)).status_code == 200
    assert "workflow.deleted" not in await audit_types(realm, workflow_id)


async def test_the_pages_follow_the_permissions_of_the_api(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    workflow = await make_workflow(realm, body=MINIMAL)
    auditor = await realm.user("auditor@example.com")
    await realm.assign(auditor, await realm.builtin_role("realm-auditor"))
    login = await signed_in(client, realm, auditor)
    base = f"/realms/{realm.slug}/workflows"
    listing = await client.get(base, headers=HTML)
    assert listing.status_code == 200 and "New workflow" not in listing.text
    detail = await client.get(f"{base}/{workflow.id}", headers=HTML)
    assert detail.status_code == 200 and "Open the editor" not in detail.text and "Delete workflow" not in detail.text
    revision = await client.get(f"{base}/{workflow.id}/revisions/1", headers=HTML)
    assert revision.status_code == 200 and ">Approve</button>" not in revision.text
    assert "need the permission <code>realm.workflows.publish</code>" in revision.text
    assert (await client.get(f"{base}/new", headers=HTML)).status_code == 403
    assert (await client.get(f"{base}/{workflow.id}/edit", headers=HTML)).status_code == 403
    for path in ("/edit", "/edit/validate", "/disable", "/enable", "/delete", "/revisions/1/publish"):
        refused = await client.post(
            f"{base}/{workflow.id}{path}", data={"_csrf": login.csrf, "definition": "{}"}, headers=HTML
        )
        assert refused.status_code == 403, path

    editor_role = await realm.role("workflow-editors", ["realm.workflows.read", "realm.workflows.write"])
    editor = await realm.user("editor@example.com")
    await realm.assign(editor, editor_role)
    login = await signed_in(client, realm, editor)
    assert (await client.get(f"{base}/{workflow.id}/edit", headers=HTML)).status_code == 200
    approve = await client.post(f"{base}/{workflow.id}/revisions/1/approve", data={"_csrf": login.csrf}, headers=HTML)
    assert approve.status_code == 403
    no_csrf = await client.post(f"{base}/{workflow.id}/edit", data={"definition": "{}"}, headers=HTML)
    assert no_csrf.status_code == 403

    other = await make_workflow(other_realm, body=MINIMAL)
    assert (await client.get(f"{base}/{other.id}", headers=HTML)).status_code == 404
    assert (await client.get(f"{base}/{other.id}/revisions/1", headers=HTML)).status_code == 404
    assert (await client.get(f"/realms/{other_realm.slug}/workflows", headers=HTML)).status_code == 404


async def test_revisions_waiting_for_review_show_to_a_reviewer_and_never_to_their_author(
    client: Client, realm: RealmHandle
) -> None:
    author = await second_admin(realm, "author@example.com")
    onboarding = await make_workflow(realm, "Onboarding", body=MINIMAL, requires_approval=True, author=author)
    await make_workflow(realm, "Offboarding", body=MINIMAL, requires_approval=False, author=author)
    home, listing = f"/realms/{realm.slug}/", f"/realms/{realm.slug}/workflows"

    # The realm's administrator did not write revision 1 of Onboarding: it waits for their review.
    await signed_in(client, realm)
    page = (await client.get(home, headers=HTML)).text
    assert re.search(r'id="kpi-reviews-waiting".*?data-testid="kpi-value">1<', page, re.S)
    page = (await client.get(listing, headers=HTML)).text
    assert page.count('data-testid="review-waiting"') == 1
    assert f'href="/realms/{realm.slug}/workflows/{onboarding.id}/revisions/1"' in page

    # Its author sees nothing to review.
    await signed_in(client, realm, author)
    page = (await client.get(home, headers=HTML)).text
    assert re.search(r'id="kpi-reviews-waiting".*?data-testid="kpi-value">0<', page, re.S)
    assert 'data-testid="review-waiting"' not in (await client.get(listing, headers=HTML)).text

    # Once approved and published, nothing waits for anyone.
    admin = Actor(type="user", id=realm.admin.id, realm_id=realm.id, mfa_session=True)
    async with realm.sessions() as session, session.begin():
        await decide_revision(session, admin, onboarding.id, 1, approve=True, comment=None)
        await publish_revision(session, admin, onboarding.id, 1)
    await signed_in(client, realm)
    page = (await client.get(home, headers=HTML)).text
    assert re.search(r'id="kpi-reviews-waiting".*?data-testid="kpi-value">0<', page, re.S)
