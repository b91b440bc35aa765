"""The fast path's caches (engine/runs/fastpath.py), and the reads that fill them.

What never changes, or changes rarely, is kept in memory by each runner's ``FastPath``:

- a revision is immutable once written: cached by id;
- the publisher's and the subject's authority, and the roles and groups the grant ceiling reads,
  are cached with the authorization epochs they were read at (``realms.authz_epoch``,
  ``users.authz_epoch``). When either moved, the entry is read again, in the transaction that
  asks. An authority also expires with its earliest expiring grant.

Cache entries read inside a transaction become visible to later transactions only once it commits
(``Staged``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.directory.authz import AUTHORITY_SQL, Authority, Grant
from engine.platform.db import positional
from engine.runs.runstore import batched

CACHE_LIMIT = 10_000  # entries per cache; a full cache starts again empty
_AUTHORITY = positional(AUTHORITY_SQL)


@dataclass(frozen=True)
class Revision:
    number: int
    hash: str
    definition: dict[str, Any]


@dataclass(frozen=True)
class CachedRole:
    epoch: int  # the realm's authorization epoch it was read at
    realm_id: str
    name: str
    permissions: tuple[str, ...]
    boundary: str
    requires_approval: bool


@dataclass(frozen=True)
class CachedGroup:
    epoch: int
    realm_id: str
    organization_id: str
    name: str
    roles: tuple[tuple[str, tuple[str, ...], str], ...]  # (name, permissions, boundary), ancestors' included


@dataclass(frozen=True)
class CachedAuthority:
    realm_epoch: int
    user_epoch: int
    read_at: datetime  # the run clock's time it was read at
    valid_until: datetime | None  # its earliest expiring grant
    authority: Authority


class Staged:
    """Cache entries read in one transaction: visible to it at once, to others once it commits.

    A worker may run several passes at once, each in its own transaction: each has its own.
    """

    def __init__(self) -> None:
        self.entries: list[tuple[dict[Any, Any], Any, Any]] = []

    def remember(self, cache: dict[Any, Any], key: Any, value: Any) -> None:
        self.entries.append((cache, key, value))

    def recall(self, cache: dict[Any, Any], key: Any) -> Any:
        for staged_cache, staged_key, value in reversed(self.entries):
            if staged_cache is cache and staged_key == key:
                return value
        return cache.get(key)

    def committed(self) -> None:
        for cache, key, value in self.entries:
            if len(cache) >= CACHE_LIMIT:
                cache.clear()
            cache[key] = value
        self.entries.clear()


class Caches:
    """A runner's caches, and the reads that fill them (through ``Staged``, in a transaction)."""

    def __init__(self) -> None:
        self.revisions: dict[str, Revision] = {}
        self.roles: dict[str, CachedRole] = {}
        self.groups: dict[str, CachedGroup] = {}
        self.authorities: dict[tuple[str, str], CachedAuthority] = {}

    async def _revision(self, conn: Any, revision_id: str) -> Revision | None:
        revision = self.revisions.get(revision_id)
        if revision is None:
            q = batched.REVISION_BY_ID
            row = await conn.fetchrow(q.sql, *q.args({"revision_id": revision_id}))
            if row is None:
                return None
            revision = Revision(row["number"], row["hash"], json.loads(row["definition"]))
            if len(self.revisions) >= CACHE_LIMIT:
                self.revisions.clear()
            self.revisions[revision_id] = revision  # immutable and committed: no need to wait
        return revision

    async def _authority(self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime) -> Authority:
        """The accountable publisher's authority."""
        return await self._user_authority(
            conn, staged, run["realm_id"], run["publisher_id"], run["realm_epoch"], run["publisher_epoch"], now
        )

    async def _user_authority(
        self, conn: Any, staged: Staged, realm_id: str, user_id: str, realm_epoch: int, user_epoch: int, now: datetime
    ) -> Authority:
        """A user's authority, cached while the realm's and the user's authorization epochs stay put."""
        key = (realm_id, user_id)
        cached: CachedAuthority | None = staged.recall(self.authorities, key)
        if (
            cached is not None
            and cached.realm_epoch == realm_epoch
            and cached.user_epoch == user_epoch
            and cached.read_at <= now
            and (cached.valid_until is None or now < cached.valid_until)
        ):
            return cached.authority
        rows = await conn.fetch(_AUTHORITY.sql, *_AUTHORITY.args({"realm": realm_id, "pid": user_id, "now": now}))
        authority = Authority(
            principal_type="user",
            principal_id=user_id,
            grants=[Grant(frozenset(row[0] or ()), row[1]) for row in rows],
        )
        expiries = [row[2] for row in rows if row[2] is not None]
        staged.remember(
            self.authorities,
            key,
            CachedAuthority(realm_epoch, user_epoch, now, min(expiries, default=None), authority),
        )
        return authority

    async def _role(self, conn: Any, staged: Staged, role_id: Any, epoch: int) -> CachedRole | None:
        if not isinstance(role_id, str):
            return None
        cached: CachedRole | None = staged.recall(self.roles, role_id)
        if cached is not None and cached.epoch == epoch:
            return cached
        q = batched.ROLE_BY_ID
        row = await conn.fetchrow(q.sql, *q.args({"role_id": role_id}))
        if row is None:
            return None
        permissions = tuple(row["permissions"] or ())
        role = CachedRole(epoch, row["realm_id"], row["name"], permissions, row["boundary"], row["requires_approval"])
        staged.remember(self.roles, role_id, role)
        return role

    async def _group(self, conn: Any, staged: Staged, group_id: Any, epoch: int) -> CachedGroup | None:
        if not isinstance(group_id, str):
            return None
        cached: CachedGroup | None = staged.recall(self.groups, group_id)
        if cached is not None and cached.epoch == epoch:
            return cached
        q = batched.GROUP_WITH_ROLES
        row = await conn.fetchrow(q.sql, *q.args({"group_id": group_id}))
        if row is None:
            return None
        roles = tuple((name, tuple(perms or ()), boundary) for name, perms, boundary in json.loads(row["roles"]))
        group = CachedGroup(epoch, row["realm_id"], row["organization_id"], row["name"], roles)
        staged.remember(self.groups, group_id, group)
        return group

    async def _subject_authority(self, conn: Any, staged: Staged, run: Mapping[str, Any], now: datetime) -> Authority:
        """What the subject holds (nothing, when it is not a user)."""
        if run["subject_epoch"] is None:
            return Authority("user", run["subject_id"])
        return await self._user_authority(
            conn, staged, run["realm_id"], run["subject_id"], run["realm_epoch"], run["subject_epoch"], now
        )
