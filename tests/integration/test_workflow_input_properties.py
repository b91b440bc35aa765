"""Any input whatever to the definition endpoints gives a result or a 422, never a 500."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from litestar.testing import AsyncTestClient

from testing.factories import RealmHandle

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)

step_like = st.fixed_dictionaries(
    {"id": st.text(max_size=10), "type": st.sampled_from(["assign_role", "wait", "end", "approval", "notify", "x"])},
    optional={
        "role_id": st.text(max_size=30),
        "duration": st.text(max_size=6),
        "approvers": st.lists(st.text(max_size=30), max_size=3),
        "retry": json_values,
        "script": json_values,
    },
)
definition_like = st.fixed_dictionaries(
    {"schema_version": st.integers(0, 2), "steps": st.lists(step_like, max_size=4)},
    optional={"triggers": st.lists(json_values, max_size=3), "retry": json_values, "expression": json_values},
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(json_values, definition_like))
async def test_validate_and_create_never_answer_500(
    client: AsyncTestClient[Litestar], realm: RealmHandle, body: Any
) -> None:
    validate = await client.post(realm.api + "/workflows/validate", json={"definition": body}, headers=realm.headers)
    assert validate.status_code == 200, validate.text
    assert isinstance(validate.json()["valid"], bool)
    created = await client.post(
        realm.api + "/workflows", json={"name": "Property", "definition": body}, headers=realm.headers
    )
    assert created.status_code in {201, 409, 422}, created.text
    if created.status_code == 201:
        assert validate.json()["valid"] is True
        await client.delete(f"{realm.api}/workflows/{created.json()['id']}", headers=realm.headers)
    raw = await client.post(
        realm.api + "/workflows/validate",
        content=b"{not json",
        headers={**realm.headers, "content-type": "application/json"},
    )
    assert raw.status_code in {400, 422}


async def test_deep_nesting_huge_numbers_and_odd_line_breaks_are_422_not_500(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    deep = b'{"definition": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    for path in ("/workflows/validate", "/workflows"):
        response = await client.post(
            realm.api + path, content=deep, headers={**realm.headers, "content-type": "application/json"}
        )
        assert response.status_code in {400, 422}, (path, response.status_code, response.text[:200])
    for name in ("line\u2028separator", "next\u0085line", "vertical\vtab"):
        refused = await client.post(realm.api + "/workflows", json={"name": name}, headers=realm.headers)
        assert refused.status_code == 422, name
    trimmed = await client.post(realm.api + "/workflows", json={"name": " " + "n" * 100}, headers=realm.headers)
    assert trimmed.status_code == 201 and trimmed.json()["name"] == "n" * 100


async def test_nul_characters_are_refused_not_stored(client: AsyncTestClient[Litestar], realm: RealmHandle) -> None:
    bad = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "done", "type": "end", "x\u0000": "\u0000"}],
    }
    validate = await client.post(realm.api + "/workflows/validate", json={"definition": bad}, headers=realm.headers)
    assert validate.status_code == 200 and validate.json()["valid"] is False
    for body in ({"name": "a\u0000b"}, {"name": "ok", "description": "\u0000"}, {"name": "ok2", "definition": bad}):
        response = await client.post(realm.api + "/workflows", json=body, headers=realm.headers)
        assert response.status_code == 422, (body, response.text)
    user = await client.post(
        realm.api + "/users", json={"email": "n@example.com", "display_name": "N\u0000"}, headers=realm.headers
    )
    assert user.status_code == 422  # anywhere else, the safety net answers 422 too


async def test_a_nul_in_a_named_id_is_reported_at_its_path_before_any_look_up(
    client: AsyncTestClient[Litestar], realm: RealmHandle
) -> None:
    """PostgreSQL cannot take a NUL: a definition naming ids that hold one is answered with where
    they are, and its ids are never looked up in the realm."""
    bad = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [
            {"id": "grant", "type": "assign_role", "role_id": "rol_\u0000", "scope": "realm"},
            {"id": "ask", "type": "approval", "approvers": ["usr_\u0000"], "expires_in": "1h"},
            {"id": "done", "type": "end"},
        ],
    }
    validate = await client.post(realm.api + "/workflows/validate", json={"definition": bad}, headers=realm.headers)
    assert validate.status_code == 200, validate.text
    assert [(e["path"], e["code"]) for e in validate.json()["errors"]] == [
        ("/definition/steps/0/role_id", "invalid_character"),
        ("/definition/steps/1/approvers/0", "invalid_character"),
    ]
