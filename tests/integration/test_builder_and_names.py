"""Names instead of ids, the step builder and its pickers, as a signed-in browser sees them.

Real PostgreSQL and the real app over HTTP; the statement count of the name lookup is read from
the driver's own cursor events.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import event

from cockpit.names import resolve_names
from cockpit.pages.workflows.editor_text import parse_text
from engine.directory.models import Group, User, WebhookSubscription
from engine.platform.ids import new_id
from engine.workflows.lookup import get_revision
from testing.factories import HTML, RealmHandle
from testing.pages import htmx, signed_in
from testing.workflows import make_workflow, manual_then_end, stage

Client = AsyncTestClient[Litestar]


async def directory_objects(realm: RealmHandle) -> dict[str, Any]:
    """One of each kind a definition names, with names a person would recognise."""
    role = await realm.role("Payroll readers", ["realm.users.read"])
    org = await realm.organization("Acme Finance")
    async with realm.sessions() as session, session.begin():
        group = Group(id=new_id("grp"), realm_id=realm.id, organization_id=org.id, name="Accountants")
        hook = WebhookSubscription(
            id=new_id("whk"), realm_id=realm.id, destination="https://hooks.example.com/hr", secret_enc="x"
        )
        session.add_all([group, hook])
    approver = await realm.user("ada@example.com", display_name="Ada Lovelace")
    return {"role": role, "org": org, "group": group, "hook": hook, "user": approver}


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


# --- The resolver ---------------------------------------------------------------------------------


async def test_resolve_names_answers_every_kind_in_one_statement_and_never_another_realms(
    realm: RealmHandle, other_realm: RealmHandle
) -> None:
    objects = await directory_objects(realm)
    foreign = await other_realm.role("Foreign role", [])
    workflow = await make_workflow(realm, "Joiner")
    ids = [o.id for o in objects.values()] + [workflow.id, foreign.id, "rol_" + "0" * 26, None, "not an id"]
    statements: list[str] = []
    async with realm.sessions() as session:
        bind = (await session.connection()).sync_connection
        assert bind is not None

        def count(*args: Any) -> None:
            statements.append(args[2])

        event.listen(bind, "before_cursor_execute", count)
        names = await resolve_names(session, realm.id, ids, slug=realm.slug)
        event.remove(bind, "before_cursor_execute", count)
    assert len(statements) == 1
    s = realm.slug
    org, group = objects["org"], objects["group"]
    assert names[objects["role"].id] == ("role", "Payroll readers", f"/realms/{s}/roles/{objects['role'].id}")
    assert names[org.id] == ("organization", "Acme Finance", f"/realms/{s}/organizations/{org.id}")
    assert names[group.id] == ("group", "Accountants", f"/realms/{s}/organizations/{org.id}/groups/{group.id}")
    assert names[objects["hook"].id].name == "https://hooks.example.com/hr"
    assert names[objects["user"].id] == (
        "user",
        "Ada Lovelace <ada@example.com>",
        f"/realms/{s}/users/{objects['user'].id}",
    )
    assert names[workflow.id] == ("workflow", "Joiner", f"/realms/{s}/workflows/{workflow.id}")
    assert foreign.id not in names and "rol_" + "0" * 26 not in names


# --- Names on the workflow pages ------------------------------------------------------------------


async def test_revision_page_diff_and_structure_show_names_linked(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    o = await directory_objects(realm)
    first = manual_then_end({"id": "grant", "type": "assign_role", "role_id": o["role"].id, "scope": "realm"})
    workflow = await make_workflow(realm, body=first)
    second = manual_then_end(
        {"id": "ask", "type": "approval", "approvers": [o["user"].id], "expires_in": "72h"},
        {"id": "grant", "type": "assign_role", "role_id": o["role"].id, "scope": "realm"},
        {"id": "team", "type": "add_to_group", "group_id": o["group"].id},
    )
    number = await stage(realm, workflow, second)
    page = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}/revisions/{number}", headers=HTML)
    assert page.status_code == 200
    body = page.text
    for obj, name in ((o["role"], "Payroll readers"), (o["group"], "Accountants")):
        assert re.search(rf'<a class="ref" href="[^"]*{obj.id}" title="{obj.id}" data-ref="{obj.id}">{name}</a>', body)
    assert "Ada Lovelace &lt;ada@example.com&gt;</a>" in body
    # The diff's positions count from 1, like the timeline: "grant" moved from the first to the second.
    row = re.search(r'data-step="grant">.*?<td class="nowrap">(.*?)</td>', body, re.S)
    assert row is not None and text_of(row.group(1)).split() == ["#1", "→", "#2"]
    editor = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}/edit", headers=HTML)
    structure = editor.text.split('id="editor-preview"', 1)[1]
    assert "Accountants</a>" in structure and "Payroll readers</a>" in structure
    detail = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}", headers=HTML)
    assert f'href="/realms/{realm.slug}/users/{realm.admin.id}"' in detail.text
    del login


async def test_definitions_come_back_in_the_authors_key_order(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    typed = (
        '{\n  "steps": [{"type": "end", "id": "done"}],\n  "triggers": [{"type": "manual"}],\n  "schema_version": 1\n}'
    )
    workflow = await make_workflow(realm, body=None)
    saved = await client.post(
        f"/realms/{realm.slug}/workflows/{workflow.id}/edit",
        data={"_csrf": login.csrf, "definition": typed},
        headers=HTML,
        follow_redirects=False,
    )
    assert saved.status_code == 303
    api = await client.get(f"{realm.api}/workflows/{workflow.id}/revisions/1", headers=realm.headers)
    assert list(api.json()["definition"]) == ["steps", "triggers", "schema_version"]
    assert list(api.json()["definition"]["steps"][0]) == ["type", "id"]
    editor = await client.get(f"/realms/{realm.slug}/workflows/{workflow.id}/edit", headers=HTML)
    shown = html.unescape(editor.text.split('id="definition-text"', 1)[1])
    assert shown.index('"steps"') < shown.index('"triggers"') < shown.index('"schema_version"')
    # The hash is still the canonical form's: the same definition in another order is the same revision.
    async with realm.sessions() as session:
        revision = await get_revision(session, realm.id, workflow.id, 1)
        assert revision.canonical.index('"schema_version"') < revision.canonical.index('"steps"')


def test_a_trailing_comma_is_reported_on_its_own_line() -> None:
    text = '{\n  "schema_version": 1,\n  "steps": [\n    {"id": "done", "type": "end"},\n  ]\n}'
    (issue,) = parse_text(text).issues
    assert issue.line == 4 and issue.code == "invalid_json" and "trailing comma" in issue.message


# --- The audit log --------------------------------------------------------------------------------


async def test_audit_log_shows_names_and_filters_by_email_or_name(client: Client, realm: RealmHandle) -> None:
    await signed_in(client, realm)
    workflow = await make_workflow(realm, "Leaver")
    url = f"/realms/{realm.slug}/audit"
    page = await client.get(url, headers=HTML, params={"actor_id": realm.admin.email})
    assert page.status_code == 200
    rows = re.findall(r'data-testid="audit-event".*?</tr>', page.text, re.S)
    assert rows, "the administrator's events are found by email"
    assert all(f'data-ref="{realm.admin.id}"' in row for row in rows)
    assert (
        f'href="/realms/{realm.slug}/workflows/{workflow.id}" title="{workflow.id}" data-ref="{workflow.id}">Leaver</a>'
        in page.text
    )
    by_name = await client.get(url, headers=HTML, params={"subject_id": "leaver"})
    assert 'data-testid="audit-event"' in by_name.text and "workflow.created" in by_name.text
    nobody = await client.get(url, headers=HTML, params={"actor_id": "nobody@example.com"})
    assert 'data-testid="filter-unmatched"' in nobody.text and "nobody@example.com" in nobody.text
    assert 'data-testid="audit-event"' not in nobody.text


# --- The builder ----------------------------------------------------------------------------------


def textarea_of(page: str) -> str:
    match = re.search(r'<textarea id="definition-text"[^>]*>\n?(.*?)</textarea>', page, re.S)
    assert match is not None
    return html.unescape(match.group(1))


async def test_builder_adds_a_step_and_sets_a_reference_and_the_json_follows(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    o = await directory_objects(realm)
    workflow = await make_workflow(realm, body=manual_then_end())
    u = f"/realms/{realm.slug}/workflows/{workflow.id}/edit"
    editor = await client.get(u, headers=HTML)
    text = textarea_of(editor.text)
    # Every step type of the contract is on the menu.
    menu = re.search(r'<select id="add-step-type".*?</select>', editor.text, re.S)
    assert menu is not None
    contract = json.loads((await client.get("/api/v1/contracts/workflows/definition.v1.json")).text)
    assert (
        re.findall(r'<option value="(\w+)"', menu.group(0)) == contract["$defs"]["step"]["properties"]["type"]["enum"]
    )

    headers = htmx(login, "builder")
    added = await client.post(
        f"{u}/builder", data={"definition": text, "op": "add_step", "value": "assign_role"}, headers=headers
    )
    assert added.status_code == 200
    new_text = textarea_of(added.text)
    steps = json.loads(new_text)["steps"]
    assert [s["type"] for s in steps] == ["assign_role", "end"] and steps[0]["role_id"] == ""
    # The empty reference is an issue that points at the field as well as the line.
    assert 'href="#b-steps-0-role_id"' in added.text and 'id="b-steps-0-role_id-error"' in added.text
    assert re.search(r'data-line="\d+"', added.text)

    chosen = await client.post(
        f"{u}/builder",
        data={"definition": new_text, "op": "set", "pointer": "/steps/0/role_id", "value": o["role"].id},
        headers=headers,
    )
    final = json.loads(textarea_of(chosen.text))
    assert final["steps"][0]["role_id"] == o["role"].id
    assert "✓ Valid" in chosen.text and "Payroll readers</a>" in chosen.text
    # The key order the builder writes is the author's: id, type, then members.
    assert list(final["steps"][0])[:2] == ["id", "type"]

    # A value of the wrong kind, or text that does not parse: the text is left as it was, with the reason.
    wrong = await client.post(
        f"{u}/builder",
        data={"definition": textarea_of(chosen.text), "op": "set", "pointer": "/steps/0/nope", "value": "1"},
        headers=headers,
    )
    assert wrong.status_code == 422 and 'data-testid="builder-error"' in wrong.text
    broken = await client.post(
        f"{u}/builder", data={"definition": "{", "op": "add_step", "value": "end"}, headers=headers
    )
    assert broken.status_code == 422 and textarea_of(broken.text) == "{"


async def test_a_builder_change_answers_with_its_preview_and_posts_back_to_the_same_workflow(
    client: Client, realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    workflow = await make_workflow(realm, body=manual_then_end())
    u = f"/realms/{realm.slug}/workflows/{workflow.id}/edit"
    text = textarea_of((await client.get(u, headers=HTML)).text)
    added = await client.post(
        f"{u}/builder", data={"definition": text, "op": "add_step", "value": "wait"}, headers=htmx(login, "builder")
    )
    assert added.status_code == 200
    steps = json.loads(textarea_of(added.text))["steps"]
    assert [s["type"] for s in steps] == ["wait", "end"]
    # The preview follows the new text, out of band, and says it is the text as typed.
    assert '<p id="preview-note" class="muted small" hx-swap-oob="true">The text as typed.</p>' in added.text
    preview = added.text.split('<div id="editor-preview" class="preview" hx-swap-oob="true">', 1)[1]
    assert all(f'<code class="step-id">{s["id"]}</code>' in preview for s in steps)
    # The builder that comes back keeps acting on this workflow.
    assert f'hx-post="{u}/builder"' in added.text and "workflows//edit" not in added.text


async def test_builder_edits_lists_choices_and_removes(client: Client, realm: RealmHandle) -> None:
    login = await signed_in(client, realm)
    o = await directory_objects(realm)
    workflow = await make_workflow(realm, body=manual_then_end())
    u = f"/realms/{realm.slug}/workflows/{workflow.id}/edit/builder"
    headers = htmx(login, "builder")

    async def change(text: str, op: str, pointer: str = "", value: Any = "") -> str:
        answer = await client.post(
            u, data={"definition": text, "op": op, "pointer": pointer, "value": value}, headers=headers
        )
        assert answer.status_code == 200, answer.text
        return textarea_of(answer.text)

    text = json.dumps(manual_then_end())
    text = await change(text, "add_step", value="approval")
    text = await change(text, "add_item", "/steps/0/approvers", o["user"].id)
    text = await change(text, "set", "/steps/0/expires_in", "72h")
    text = await change(text, "add_trigger", value="event")
    text = await change(text, "set", "/triggers/1/event_types", ["user.created", "organization.membership.added"])
    text = await change(text, "remove", "/triggers/0")
    value = json.loads(text)
    assert value["steps"][0]["approvers"] == [o["user"].id] and value["steps"][0]["expires_in"] == "72h"
    assert value["triggers"] == [{"type": "event", "event_types": ["user.created", "organization.membership.added"]}]
    text = await change(text, "down", "/steps/0")
    assert [s["type"] for s in json.loads(text)["steps"]] == ["end", "approval"]


# --- The pickers ----------------------------------------------------------------------------------


async def test_picker_searches_by_name_in_the_realm_pages_and_needs_permission(
    client: Client, realm: RealmHandle, other_realm: RealmHandle
) -> None:
    login = await signed_in(client, realm)
    for i in range(23):
        await realm.role(f"Team role {i:02}", [])
    await other_realm.role("Team role from elsewhere", [])
    url = f"/realms/{realm.slug}/pick/role"
    first = await client.get(url, params={"q": "team ROLE"}, headers=htmx(login, "x"))
    assert first.status_code == 200
    options = re.findall(r'data-value="(rol_\w+)"', first.text)
    assert len(options) == 20 and "elsewhere" not in first.text
    assert "Team role 00" in first.text and "offset=20" in first.text
    rest = await client.get(url, params={"q": "team role", "offset": 20}, headers=htmx(login, "x"))
    assert len(re.findall(r'data-value="(rol_\w+)"', rest.text)) == 3 and "offset=" not in rest.text
    none = await client.get(url, params={"q": "zzz"}, headers=htmx(login, "x"))
    assert "No role matches" in none.text
    users = await client.get(f"/realms/{realm.slug}/pick/user", params={"q": "ADMIN@"}, headers=htmx(login, "x"))
    assert realm.admin.id in users.text
    assert (await client.get(f"/realms/{realm.slug}/pick/realm", headers=htmx(login, "x"))).status_code == 404
    # Another realm's picker answers as if it were not there.
    assert (await client.get(f"/realms/{other_realm.slug}/pick/role", headers=htmx(login, "x"))).status_code in (
        403,
        404,
    )

    # A workflow writer who may not read users is told which permission is missing; nothing is listed.
    writer_role = await realm.role("writers", ["realm.workflows.read", "realm.workflows.write", "realm.roles.read"])
    writer: User = await realm.user("writer@example.com")
    await realm.assign(writer, writer_role)
    writer_login = await signed_in(client, realm, writer)
    refused = await client.get(f"/realms/{realm.slug}/pick/user", headers=htmx(writer_login, "x"))
    assert refused.status_code == 403 and "realm.users.read" in refused.text and "usr_" not in refused.text
    allowed = await client.get(url, params={"q": "team"}, headers=htmx(writer_login, "x"))
    assert allowed.status_code == 200 and "Team role 01" in allowed.text
