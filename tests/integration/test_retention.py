"""retention.cleanup on a real database: old finished runs go in bounded batches, nothing else does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from engine.platform.clock import FixedClock
from engine.runs.retention import cleanup_finished_runs, last_retention_cleanup
from testing.factories import RealmHandle
from testing.runs import existing, finish_runs, start
from testing.workflows import publish

END = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


async def attempts_of(realm: RealmHandle, ids: list[str]) -> int:
    async with realm.sessions() as session:
        return int(
            (
                await session.execute(text("SELECT count(*) FROM step_attempts WHERE run_id = ANY(:ids)"), {"ids": ids})
            ).scalar_one()
        )


async def test_old_finished_runs_go_in_batches_with_their_attempts(realm: RealmHandle) -> None:
    old = await finish_runs(realm, 5, days_ago=200)
    recent = await finish_runs(realm, 2, days_ago=10)
    wid = await publish(realm, END, name="Unfinished")
    unfinished = [await start(realm, wid, (await realm.user()).id)]
    assert await attempts_of(realm, old) == 5

    async with realm.sessions() as session:
        assert await last_retention_cleanup(session) is None  # never ran

    now = datetime.now(UTC)
    done = await cleanup_finished_runs(realm.sessions, retention_days=180, clock=FixedClock(now), batch_size=2)
    assert (done.deleted, done.batches) == (5, 3)  # 2 + 2 + 1
    assert await existing(realm, old) == set()
    assert await attempts_of(realm, old) == 0
    assert await existing(realm, recent + unfinished) == set(recent + unfinished)
    async with realm.sessions() as session:
        status = await last_retention_cleanup(session)
    assert status is not None and status.deleted == 5 and status.ran_at == now and status.retention_days == 180

    # A shorter retention reaches the recent ones; the unfinished run is never touched.
    again = await cleanup_finished_runs(realm.sessions, retention_days=5, clock=FixedClock(now))
    assert again.deleted == 2
    assert await existing(realm, unfinished) == set(unfinished)


async def test_a_locked_run_is_skipped_not_waited_for_and_reruns_lose_only_the_link(realm: RealmHandle) -> None:
    old = await finish_runs(realm, 3, days_ago=400)
    async with realm.sessions() as session, session.begin():
        # a run repeating the first old one (recent): it stays, its link becomes NULL
        await session.execute(
            text(
                "INSERT INTO workflow_runs (id, realm_id, workflow_id, revision, revision_id, subject_id, trigger_type,"
                " trigger_key, input, input_version, publisher_id, depth, state, step_index, context, created_at,"
                " updated_at, finished_at, rerun_of)"
                " SELECT 'wrn_' || lpad('1', 26, '0'), realm_id, workflow_id, revision, revision_id, subject_id,"
                " 'manual', 'rerun-key', input, input_version, publisher_id, 0, 'succeeded', 1, '{}', now(), now(),"
                " now(), id FROM workflow_runs WHERE id = :r"
            ),
            {"r": old[0]},
        )
    holder = realm.sessions()
    try:
        await holder.begin()
        await holder.execute(text("SELECT id FROM workflow_runs WHERE id = :r FOR UPDATE"), {"r": old[2]})
        first = await cleanup_finished_runs(realm.sessions, retention_days=180)
        assert first.deleted == 2  # the locked run was skipped, and the pass did not wait for it
        assert await existing(realm, old) == {old[2]}
    finally:
        await holder.rollback()
        await holder.close()
    second = await cleanup_finished_runs(realm.sessions, retention_days=180)
    assert second.deleted == 1
    async with realm.sessions() as session:
        link = (
            await session.execute(text("SELECT rerun_of FROM workflow_runs WHERE id = 'wrn_' || lpad('1', 26, '0')"))
        ).scalar_one()
    assert link is None
    assert second.cutoff < datetime.now(UTC) - timedelta(days=179)
