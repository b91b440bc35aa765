from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text

from engine.directory import notice_templates, policy
from testing.factories import RealmHandle


async def _audit(realm: RealmHandle, type_: str) -> list[tuple[str | None, dict]]:  # type: ignore[type-arg]
    async with realm.sessions() as session:
        rows = await session.execute(
            text("SELECT actor_id, details FROM audit_events WHERE realm_id = :r AND type = :t ORDER BY id"),
            {"r": realm.id, "t": type_},
        )
        return [(a, d) for a, d in rows]


async def test_the_default_template_and_an_override(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    url = realm.api + "/templates/workflow_notice"
    default = (await client.get(url, headers=realm.headers)).json()
    assert default["name"] == "workflow_notice" and default["overridden"] is False
    assert default["variables"] == ["realm", "workflow", "notice", "time"]
    assert "{{notice}}" in default["body"]

    saved = await client.put(
        url,
        json={"subject": "[{{realm}}] {{notice}}", "body": "Hi!\n{{notice}} ({{workflow}}, {{ time }})"},
        headers=realm.headers,
    )
    assert saved.status_code == 200, saved.text
    again = (await client.get(url, headers=realm.headers)).json()
    assert again["overridden"] is True and again["subject"] == "[{{realm}}] {{notice}}"
    assert await _audit(realm, "template.updated") == [
        (realm.admin.id, {"name": "workflow_notice", "changed": ["subject", "body"]})
    ]

    reset = await client.delete(url, headers=realm.headers)
    assert reset.status_code == 204
    assert (await client.get(url, headers=realm.headers)).json()["overridden"] is False


async def test_a_second_save_changes_the_stored_wording_and_a_reset_is_audited(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    url = realm.api + "/templates/workflow_notice"
    assert (await client.get(url, headers=realm.headers)).json()["updated_by"] is None
    first = await client.put(url, json={"subject": "{{notice}}", "body": "{{notice}}"}, headers=realm.headers)
    assert first.status_code == 200, first.text
    second = await client.put(
        url, json={"subject": "{{notice}}", "body": "{{realm}}: {{notice}}"}, headers=realm.headers
    )
    assert second.status_code == 200, second.text
    shown = (await client.get(url, headers=realm.headers)).json()
    assert (shown["subject"], shown["body"], shown["overridden"]) == ("{{notice}}", "{{realm}}: {{notice}}", True)
    assert shown["updated_by"] == realm.admin.id and shown["updated_at"] >= first.json()["updated_at"]
    assert second.json() == shown

    assert (await client.delete(url, headers=realm.headers)).status_code == 204
    async with realm.sessions() as session:
        rows = await session.execute(
            text(
                "SELECT category, subject_type, subject_id, details FROM audit_events"
                " WHERE realm_id = :r AND type = 'template.updated' ORDER BY id"
            ),
            {"r": realm.id},
        )
        audited = [tuple(row) for row in rows]
    template_id = audited[0][2]
    assert template_id and template_id.startswith("tpl_")
    assert audited == [
        ("configuration", "template", template_id, {"name": "workflow_notice", "changed": ["subject", "body"]}),
        ("configuration", "template", template_id, {"name": "workflow_notice", "changed": ["body"]}),
        ("configuration", "template", template_id, {"name": "workflow_notice", "reset": True}),
    ]
    again = (await client.get(url, headers=realm.headers)).json()
    assert (again["overridden"], again["updated_by"], again["updated_at"]) == (False, None, None)


async def test_only_the_four_placeholders_are_accepted(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    url = realm.api + "/templates/workflow_notice"
    cases = [
        (
            {"subject": "Hi {{user}}", "body": "{{notice}"},
            {("/subject", "invalid_placeholder"), ("/body", "template_syntax")},
        ),
        ({"subject": "ok {{realm}}", "body": "{% if notice %}x{% endif %}"}, {("/body", "invalid_placeholder")}),
        ({"subject": "ok", "body": "{{ realm|upper }}"}, {("/body", "invalid_placeholder")}),
        ({"subject": "ok", "body": "{{ realm.__class__ }}"}, {("/body", "invalid_placeholder")}),
        ({"subject": "two\nlines", "body": " "}, {("/subject", "invalid"), ("/body", "too_short")}),
    ]
    for body, expected in cases:
        response = await client.put(url, json=body, headers=realm.headers)
        assert response.status_code == 422, body
        assert {(e["path"], e["code"]) for e in response.json()["errors"]} == expected, body
    assert (await client.get(url, headers=realm.headers)).json()["overridden"] is False
    assert await _audit(realm, "template.updated") == []


async def test_unknown_templates_are_404(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    assert (await client.get(realm.api + "/templates/welcome_mail", headers=realm.headers)).status_code == 404
    put = await client.put(
        realm.api + "/templates/welcome_mail", json={"subject": "a", "body": "b"}, headers=realm.headers
    )
    assert put.status_code == 404


async def test_render_notice_uses_the_realms_wording_and_escapes_values(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text("UPDATE realms SET name = 'Acme <Ops>' WHERE id = :r"), {"r": realm.id})
    at = datetime(2026, 10, 11, 9, 0, tzinfo=UTC)
    async with realm.sessions() as session:
        default = await notice_templates.render_notice(session, realm.id, "Onboarding", "welcome", at)
    assert default.subject == "Acme <Ops>: Welcome! Your account is ready to use."
    assert "Acme &lt;Ops&gt;" in default.body and "2026-10-11 09:00 UTC" in default.body

    await client.put(
        realm.api + "/templates/workflow_notice",
        json={"subject": "{{workflow}}: {{notice}}", "body": "<p>{{notice}}</p> from {{realm}} at {{time}}"},
        headers=realm.headers,
    )
    async with realm.sessions() as session:
        custom = await notice_templates.render_notice(session, realm.id, "Leaver <script>", "offboarding", at)
    assert custom.subject == "Leaver <script>: Your access is being removed as you leave."
    assert custom.body == (
        "<p>Your access is being removed as you leave.</p> from Acme &lt;Ops&gt; at 2026-10-11 09:00 UTC"
    )


async def test_policy_round_trip_and_audit(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    url = realm.api + "/policy"
    assert (await client.get(url, headers=realm.headers)).json()["extensions"] == {"workflow_publish_approval": False}
    changed = await client.patch(url, json={"extensions": {"workflow_publish_approval": True}}, headers=realm.headers)
    assert changed.status_code == 200, changed.text
    assert changed.json()["extensions"] == {"workflow_publish_approval": True}
    assert (await client.get(url, headers=realm.headers)).json()["extensions"] == {"workflow_publish_approval": True}
    assert await _audit(realm, "policy.updated") == [
        (
            realm.admin.id,
            {
                "before": {"extensions": {"workflow_publish_approval": False}},
                "after": {"extensions": {"workflow_publish_approval": True}},
            },
        )
    ]
    async with realm.sessions() as session:
        assert await policy.publish_approval_required(session, realm.id) is True


async def test_policy_refuses_unknown_members_and_wrong_types(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    url = realm.api + "/policy"
    unknown = await client.patch(url, json={"extensions": {"auto_publish": True}}, headers=realm.headers)
    assert unknown.status_code == 422
    assert unknown.json()["errors"][0]["path"] == "/extensions/auto_publish"
    top = await client.patch(url, json={"extensions": {}, "mode": "strict"}, headers=realm.headers)
    assert top.status_code == 422 and top.json()["errors"][0]["path"] == "/mode"
    wrong = await client.patch(url, json={"extensions": {"workflow_publish_approval": "yes"}}, headers=realm.headers)
    assert wrong.status_code == 422
    assert wrong.json()["errors"][0]["path"] == "/extensions/workflow_publish_approval"
    assert await _audit(realm, "policy.updated") == []


async def test_publish_approval_fails_closed_without_a_readable_policy(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        assert await policy.publish_approval_required(session, realm.id) is False
        await session.execute(text("UPDATE realm_policies SET extensions = '{}' WHERE realm_id = :r"), {"r": realm.id})
        assert await policy.publish_approval_required(session, realm.id) is False  # unset: the default
        await session.execute(
            text(
                'UPDATE realm_policies SET extensions = \'{"workflow_publish_approval": "maybe"}\' WHERE realm_id = :r'
            ),
            {"r": realm.id},
        )
    async with realm.sessions() as session, session.begin():
        assert await policy.publish_approval_required(session, realm.id) is True
        await session.execute(text("DELETE FROM realm_policies WHERE realm_id = :r"), {"r": realm.id})
    async with realm.sessions() as session:
        assert await policy.publish_approval_required(session, realm.id) is True


async def test_two_policy_changes_at_once_take_turns(realm: RealmHandle) -> None:
    """The second change waits for the first (the row is locked), so its audit's "before" is the
    first one's "after"."""
    async with realm.sessions() as first, first.begin():
        await policy.update_policy(first, realm.actor, {"workflow_publish_approval": True})

        async def second() -> None:
            async with realm.sessions() as session, session.begin():
                await policy.update_policy(session, realm.actor, {"workflow_publish_approval": False})

        waiting = asyncio.create_task(second())
        async with realm.sessions() as watcher:
            for _ in range(600):  # until the second change waits on the lock (a bound, not a timing)
                blocked = await watcher.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                )
                if blocked:
                    break
                await watcher.rollback()  # pg_stat_activity is read once per transaction: a new one each time
                await asyncio.sleep(0.05)
            assert blocked == 1
    await waiting
    audited = await _audit(realm, "policy.updated")
    assert [details["before"]["extensions"] for _, details in audited] == [
        {"workflow_publish_approval": False},
        {"workflow_publish_approval": True},
    ]


async def test_a_change_to_a_realm_without_a_policy_row_makes_one(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(text("DELETE FROM realm_policies WHERE realm_id = :r"), {"r": realm.id})
    async with realm.sessions() as session, session.begin():
        view = await policy.update_policy(session, realm.actor, {"workflow_publish_approval": True})
    assert view.extensions.workflow_publish_approval is True and view.updated_by == realm.admin.id
    async with realm.sessions() as session:
        assert await policy.get_policy(session, realm.id) == view
        assert await policy.publish_approval_required(session, realm.id) is True


async def test_a_change_that_changes_nothing_answers_the_policy_and_is_not_audited(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        await session.execute(
            text("UPDATE realm_policies SET extensions = '{\"legacy\": true}' WHERE realm_id = :r"), {"r": realm.id}
        )
    async with realm.sessions() as session, session.begin():
        same = await policy.update_policy(session, realm.actor, {"workflow_publish_approval": False})
    assert same.extensions.workflow_publish_approval is False
    assert await _audit(realm, "policy.updated") == []
    async with realm.sessions() as session, session.begin():
        await policy.update_policy(session, realm.actor, {"workflow_publish_approval": True})
    async with realm.sessions() as session:
        stored = await session.scalar(
            text("SELECT extensions FROM realm_policies WHERE realm_id = :r"), {"r": realm.id}
        )
    assert stored == {"legacy": True, "workflow_publish_approval": True}  # what it does not know is kept


async def test_a_policy_change_is_audited_about_the_realm_as_configuration(realm: RealmHandle) -> None:
    async with realm.sessions() as session, session.begin():
        await policy.update_policy(session, realm.actor, {"workflow_publish_approval": True})
    async with realm.sessions() as session:
        row = (
            await session.execute(
                text("SELECT category, subject_type, subject_id FROM audit_events WHERE type = 'policy.updated'")
            )
        ).one()
    assert tuple(row) == ("configuration", "realm", realm.id)
