"""Picker searches and name lookups at directory scale: latency against a round trip, with plans.

    uv run python bench/pickers.py                       # 100,000 users, 5,000 roles, groups, orgs
    uv run python bench/pickers.py --users 20000 --queries 200

Uses the PostgreSQL server of ``--server`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``),
creates a scratch database ``cockpit_bench_pickers_<random>``, migrates it, seeds it in SQL (one
``INSERT … SELECT generate_series`` per table: a realm with ``--users`` users, ``--roles`` roles,
as many organizations and groups, and a second realm of the same size that must never show), and
drops it at the end. Then, through the product's own functions on one connection:

- **baseline**: ``SELECT 1``, the round trip every statement pays;
- **picker**: :func:`engine.directory.search.search_directory` for users, roles and groups with
  queries drawn from the seeded names (common prefixes, rare whole names, no match), first page;
- **names**: :func:`engine.runs.name_lookup.lookup_names` for 50 ids of mixed kinds (what a revision
  page or an audit page names), one statement;
- **audit filter**: :func:`engine.runs.name_lookup.match_names` for an email and for a role name.

Each reports p50 and p95 in milliseconds and p50 as a multiple of the baseline's p50, measured
in the same run; last, the plans of the user search (``EXPLAIN (ANALYZE, BUFFERS)``).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text

from engine.directory.search import search_directory
from engine.platform.database import libpq_conninfo, with_database
from engine.platform.db import make_engine, make_sessionmaker
from engine.platform.migrate import upgrade
from engine.runs.name_lookup import lookup_names, match_names

SEED = """
INSERT INTO realms (id, slug, name) VALUES (:r, :slug, 'bench');
INSERT INTO users (id, realm_id, email, display_name, status, guest, authz_epoch)
  SELECT 'usr_' || lpad(:tag || to_char(i, 'FM0000000'), 26, '0'), :r,
         'person' || i || '@' || :slug || '.example',
         (ARRAY['Ada','Grace','Alan','Edsger','Barbara','Ken'])[1 + i % 6] || ' ' || 'Person' || i,
         'active', false, 0
  FROM generate_series(1, :users) AS i;
INSERT INTO roles (id, realm_id, name, name_key, description, permissions, boundary, requires_approval, builtin)
  SELECT 'rol_' || lpad(:tag || to_char(i, 'FM0000000'), 26, '0'), :r, 'Role ' || i, 'role ' || i, '',
         ARRAY[]::varchar[], 'realm', false, false
  FROM generate_series(1, :roles) AS i;
INSERT INTO organizations (id, realm_id, name, state)
  SELECT 'org_' || lpad(:tag || to_char(i, 'FM0000000'), 26, '0'), :r, 'Org ' || i, 'active'
  FROM generate_series(1, :roles) AS i;
INSERT INTO groups (id, realm_id, organization_id, name)
  SELECT 'grp_' || lpad(:tag || to_char(i, 'FM0000000'), 26, '0'), :r,
         'org_' || lpad(:tag || to_char(i, 'FM0000000'), 26, '0'), 'Team ' || i
  FROM generate_series(1, :roles) AS i;
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(n: int, work: Callable[[int], Awaitable[Any]]) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        await work(i)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def run(url: str, args: argparse.Namespace) -> None:
    engine = make_engine(url, pool_size=2)
    sessions = make_sessionmaker(engine)
    realms = []
    async with sessions() as session, session.begin():
        for n, tag in enumerate(("1", "2")):
            realm_id = f"rlm_{tag * 26}"
            slug = f"bench{n}"
            for statement in SEED.strip().split(";\n"):
                await session.execute(
                    text(statement),
                    {"r": realm_id, "slug": slug, "tag": tag, "users": args.users, "roles": args.roles},
                )
            realms.append(realm_id)
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    realm = realms[0]
    rng = random.Random(7)
    user_queries = ["ada", "grace person1", f"person{args.users // 2}@", "zzz-nobody", "PERSON9"]
    role_queries = ["role 1", f"role {args.roles - 1}", "role", "nothing"]
    mixed_ids = [f"usr_{('1' + f'{rng.randint(1, args.users):07d}').rjust(26, '0')}" for _ in range(20)]
    mixed_ids += [f"rol_{('1' + f'{rng.randint(1, args.roles):07d}').rjust(26, '0')}" for _ in range(15)]
    mixed_ids += [f"grp_{('1' + f'{rng.randint(1, args.roles):07d}').rjust(26, '0')}" for _ in range(15)]
    results: dict[str, list[float]] = {}
    async with sessions() as session:
        results["baseline: SELECT 1"] = await timed(args.queries, lambda i: session.execute(text("SELECT 1")))
        results["picker: users"] = await timed(
            args.queries, lambda i: search_directory(session, realm, "user", user_queries[i % len(user_queries)])
        )
        results["picker: roles"] = await timed(
            args.queries, lambda i: search_directory(session, realm, "role", role_queries[i % len(role_queries)])
        )
        results["picker: groups"] = await timed(
            args.queries,
            lambda i: search_directory(
                session, realm, "group", role_queries[i % len(role_queries)].replace("role", "team")
            ),
        )
        results["names: 50 ids, one statement"] = await timed(
            args.queries, lambda i: lookup_names(session, realm, mixed_ids)
        )
        results["audit filter: an email"] = await timed(
            args.queries, lambda i: match_names(session, realm, f"person{1 + i % args.users}@bench0.example")
        )
        results["audit filter: a role name"] = await timed(
            args.queries, lambda i: match_names(session, realm, f"role {1 + i % args.roles}")
        )
        found = await lookup_names(session, realm, mixed_ids)
        assert len(found) == len(set(mixed_ids)), "every seeded id resolves"
        other, _ = await search_directory(session, realm, "user", "person1@bench1")
        assert not other, "another realm's users never show"
        base = statistics.median(results["baseline: SELECT 1"])
        print(f"{'what':38} {'p50 ms':>8} {'p95 ms':>8} {'× base':>7}")
        for name, samples in results.items():
            p50 = statistics.median(samples)
            print(f"{name:38} {p50:8.2f} {percentile(samples, 0.95):8.2f} {p50 / base:7.1f}")
        for q in user_queries:
            pattern = f"%{q}%"
            plan = await session.execute(
                text(
                    "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, display_name, email FROM users "
                    "WHERE realm_id = :r AND (display_name ILIKE :p OR email ILIKE :p OR id = :q) "
                    "ORDER BY id LIMIT 21"
                ),
                {"r": realm, "p": pattern, "q": q},
            )
            print(f"\nPlan of the user picker for {q!r}:")
            for (line,) in plan:
                print("  " + line)
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--roles", type=int, default=5_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    name = f"cockpit_bench_pickers_{secrets.token_hex(4)}"
    with psycopg.connect(libpq_conninfo(args.server), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = with_database(args.server, name)
        upgrade(url)
        asyncio.run(run(url, args))
    finally:
        if not args.keep:
            with psycopg.connect(libpq_conninfo(args.server), autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    main()
