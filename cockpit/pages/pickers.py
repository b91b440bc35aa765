"""Picker searches: the options a builder picker lists as someone types.

``GET /realms/{realm}/pick/{kind}?q=…&offset=…`` answers a fragment of ``<li role="option">``
items (name, a detail that tells two apart, the id written on choice) and, when more match, a
"More" item that fetches the next page in place. Realm-scoped like every page; the route needs
``realm.workflows.write`` (pickers serve the definition editor) and each kind needs its own read
permission too (users: ``realm.users.read``, roles: ``realm.roles.read``, groups and
organizations: ``realm.organizations.read``, subscriptions: ``realm.webhooks.read``). Without it
the answer says which permission is missing; nothing is listed. One statement per page of 20.
"""

from __future__ import annotations

from litestar import Controller, get
from litestar.params import FromPath, FromQuery
from litestar.response import Template

from cockpit.auth import CurrentPrincipal
from cockpit.pages.common import page
from cockpit.state import AnyRequest, DbSession
from engine.directory.search import PICKER_KINDS, Candidate, search_directory
from engine.platform.errors import NotFound

PAGE_SIZE = 20
READ_PERMISSION = {
    "user": "realm.users.read",
    "role": "realm.roles.read",
    "group": "realm.organizations.read",
    "organization": "realm.organizations.read",
    "subscription": "realm.webhooks.read",
}


class PickerPages(Controller):
    path = "/realms/{realm:str}/pick"
    include_in_schema = False

    @get("/{kind:str}", operation_id="pickerOptions", opt={"permission": "realm.workflows.write", "reads_only": True})
    async def options(
        self,
        request: AnyRequest,
        kind: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        offset: FromQuery[int] = 0,
    ) -> Template:
        if kind not in PICKER_KINDS:
            raise NotFound(f"There is no picker for {kind!r}.")
        needed = READ_PERMISSION[kind]
        allowed = principal.authority is not None and principal.authority.holds(needed)
        query = (q or "").strip()[:200]
        offset = max(0, min(offset, 10_000))
        candidates: list[Candidate] = []
        more = False
        if allowed:
            candidates, more = await search_directory(
                db_session, principal.realm.id, kind, query, offset=offset, limit=PAGE_SIZE
            )
        return page(
            request,
            "partials/_picker_options.html",
            status_code=200 if allowed else 403,
            kind=kind,
            q=query,
            offset=offset,
            next_offset=offset + PAGE_SIZE if more else None,
            candidates=candidates,
            allowed=allowed,
            needed=needed,
        )
