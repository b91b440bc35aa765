"""What an audit event and an outbox event keep of the change that wrote them, read back from a real
database, and the wake-up an outbox event sends when its transaction commits."""

from __future__ import annotations

import psycopg
from sqlalchemy import text

from engine.directory.audit import Actor, emit_event, record_audit
from engine.platform.database import libpq_conninfo
from testing.factories import RealmHandle


async def test_an_audit_event_keeps_who_acted_on_what_under_which_request(realm: RealmHandle) -> None:
    """Every column read back; the correlation id is the actor's, or else its request's; no details
    are stored as an empty object; the category is ``directory`` unless told."""
    person = await realm.user()
    traced = Actor(type="user", id=realm.admin.id, realm_id=realm.id, request_id="req_one", correlation_id="wrn_cause")
    async with realm.sessions() as session, session.begin():
        first = await record_audit(
            session, traced, "user.updated", subject_type="user", subject_id=person.id, details={"field": "name"}
        )
        second = await record_audit(
            session, Actor.system(realm.id, request_id="req_two"), "realm.checked", category="security"
        )
    assert first is not None and second is not None
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT id, realm_id, actor_type, actor_id, category, type, subject_type, subject_id,"
                    " request_id, correlation_id, details FROM audit_events WHERE id IN (:a, :b) ORDER BY id"
                ),
                {"a": first.id, "b": second.id},
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        (
            first.id,
            realm.id,
            "user",
            realm.admin.id,
            "directory",
            "user.updated",
            "user",
            person.id,
            "req_one",
            "wrn_cause",
            {"field": "name"},
        ),
        (second.id, realm.id, "system", None, "security", "realm.checked", None, None, "req_two", "req_two", {}),
    ]


async def test_an_outbox_event_keeps_its_subject_organization_payload_and_correlation(realm: RealmHandle) -> None:
    person = await realm.user()
    org = await realm.organization()
    traced = Actor(type="user", id=realm.admin.id, realm_id=realm.id, request_id="req_one", correlation_id="wrn_cause")
    requested = Actor(type="user", id=realm.admin.id, realm_id=realm.id, request_id="req_two")
    async with realm.sessions() as session, session.begin():
        first = await emit_event(
            session,
            traced,
            "organization.membership.added",
            subject_id=person.id,
            organization_id=org.id,
            payload={"user_id": person.id},
        )
        second = await emit_event(session, requested, "user.suspended", subject_id=person.id)
        # read in the same transaction, as the dispatcher's batch and the triggers do
        inside = (
            await session.execute(
                text("SELECT count(*) FROM outbox_events WHERE id IN (:a, :b)"), {"a": first.id, "b": second.id}
            )
        ).scalar_one()
    assert inside == 2
    assert first.id.startswith("obx_") and second.id.startswith("obx_")
    async with realm.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT id, realm_id, type, subject_id, organization_id, payload, correlation_id"
                    " FROM outbox_events WHERE id IN (:a, :b) ORDER BY id"
                ),
                {"a": first.id, "b": second.id},
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        (first.id, realm.id, "organization.membership.added", person.id, org.id, {"user_id": person.id}, "wrn_cause"),
        (second.id, realm.id, "user.suspended", person.id, None, {}, "req_two"),
    ]


async def test_an_outbox_event_wakes_the_dispatcher_when_its_transaction_commits(
    realm: RealmHandle, database_url: str
) -> None:
    with psycopg.connect(libpq_conninfo(database_url), autocommit=True) as listener:
        listener.execute("LISTEN cockpit_outbox")
        async with realm.sessions() as session, session.begin():
            await emit_event(session, realm.actor, "user.created", subject_id=realm.admin.id)
        woken = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.channel for n in woken] == ["cockpit_outbox"]


def test_the_system_acts_for_no_principal_and_a_run_acts_for_none_of_its_own() -> None:
    system = Actor.system("rlm_x", request_id="req_1")
    assert (system.type, system.id, system.realm_id, system.request_id) == ("system", None, "rlm_x", "req_1")
    assert system.principal_id is None
    assert Actor(type="user", id="usr_1", realm_id="rlm_x").principal_id == "usr_1"
    assert Actor(type="service_principal", id="spn_1", realm_id="rlm_x").principal_id == "spn_1"
    assert Actor(type="workflow_run", id="wrn_1", realm_id="rlm_x").principal_id is None


def test_an_actor_under_another_request_is_the_same_actor_with_that_request_id() -> None:
    actor = Actor(type="user", id="usr_1", realm_id="rlm_x", request_id="req_1", correlation_id="wrn_1")
    moved = actor.with_request("req_2")
    assert moved == Actor(type="user", id="usr_1", realm_id="rlm_x", request_id="req_2", correlation_id="wrn_1")
    assert actor.request_id == "req_1"
