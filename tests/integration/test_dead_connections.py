"""A connection the server ended (PostgreSQL restarted, a session terminated) is thrown away.

The guard sends its credential statement on the asyncpg connection directly, past SQLAlchemy; a
connection that died under it must not go back to the pool, or every later request that draws it
fails. The request that meets the dead connection may fail; the next one is answered.
"""

from __future__ import annotations

from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from testing.factories import RealmHandle, bearer


async def terminate_the_app_s_connections(sessions: async_sessionmaker[AsyncSession]) -> int:
    async with sessions() as session:
        ended = await session.scalar(
            text(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'cockpit' AND pid <> pg_backend_pid()"
            )
        )
    return int(ended or 0)


async def test_requests_are_answered_again_after_the_server_ended_their_connections(
    realm: RealmHandle, client: AsyncTestClient[Litestar], sessions: async_sessionmaker[AsyncSession]
) -> None:
    headers = bearer(await realm.token(realm.admin))
    # A read (a connection in autocommit, the guard's statement on its driver).
    for path in (f"/api/v1/realms/{realm.slug}/users", f"/api/v1/realms/{realm.slug}/roles"):
        assert (await client.get(path, headers=headers)).status_code == 200
        assert await terminate_the_app_s_connections(sessions) >= 1
        # The request that draws the dead connection may fail; it must be the only one.
        await client.get(path, headers=headers)
        answers = [(await client.get(path, headers=headers)).status_code for _ in range(3)]
        assert answers == [200, 200, 200], path
    # A write (a session in a transaction, the guard's statement on its driver) the same way.
    write = f"/api/v1/realms/{realm.slug}/organizations"
    assert (await client.post(write, json={"name": "Before"}, headers=headers)).status_code == 201
    assert await terminate_the_app_s_connections(sessions) >= 1
    await client.post(write, json={"name": "Meets the dead connection"}, headers=headers)
    answers = [(await client.post(write, json={"name": f"After {n}"}, headers=headers)).status_code for n in range(3)]
    assert answers == [201, 201, 201]
