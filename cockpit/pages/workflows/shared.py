"""What the workflow pages share: their permissions, messages after a change, names and values as shown."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from cockpit.names import Named, resolve_names
from cockpit.state import AnyRequest, DbSession
from engine.workflows.models import WorkflowRevision

READ = {"permission": "realm.workflows.read"}
WRITE = {"permission": "realm.workflows.write"}
PUBLISH = {"permission": "realm.workflows.publish"}
RUN = {"permission": "realm.workflows.run"}  # what starting a run needs; its preview too

FLASHES = {
    "created": "Workflow created.",
    "deleted": "Workflow deleted.",
    "staged": "Saved as a new draft revision.",
    "unchanged": "Nothing changed: this revision already holds exactly that definition, so no new one was made.",
    "approved": "Revision approved.",
    "rejected": "Revision rejected.",
    "published": "Revision published.",
    "rolled-back": "Rolled back: this revision is published again.",
}


def flash_of(request: AnyRequest) -> str | None:
    return FLASHES.get(request.query_params.get("done") or "")


async def display_names(db_session: DbSession, realm: Any, ids: Iterable[str | None]) -> dict[str, Named]:
    """Names of the objects among ``ids`` (users, roles, groups, …) with links: one statement."""
    return await resolve_names(db_session, realm.id, ids, slug=realm.slug)


def as_authored(revision: WorkflowRevision) -> Any:
    """The definition in its author's key order (revisions saved before that was kept: sorted)."""
    return revision.authored if revision.authored is not None else revision.definition


def compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        return repr(value)
