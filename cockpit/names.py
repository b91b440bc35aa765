"""Names instead of ids on every page: one lookup per page, a link to each object's page.

A page collects the ids it shows and calls :func:`resolve_names` once; templates render each id
through the ``ui.ref`` macro (``templates/partials/_macros.html``): the name, linked to the
object's page when the viewer may open it (the macro asks the target route; ``ui.link`` does
the same for any other link to a person, role or organization),
with the id on hover. An id the realm does not know (deleted, or of another
realm) is shown as the id alone, never linked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import quote

from sqlalchemy.ext.asyncio import AsyncSession

from engine.runs.name_lookup import NamedObject, ids_in, lookup_names

__all__ = ["Named", "ids_in", "resolve_names", "url_of"]


class Named(NamedTuple):
    """What an id names: ``kind, name, url = names[id]``."""

    kind: str
    name: str
    url: str | None


def url_of(slug: str, found: NamedObject) -> str | None:
    realm = f"/realms/{quote(slug)}"
    match found.kind:
        case "user":
            return f"{realm}/users/{found.id}"
        case "organization":
            return f"{realm}/organizations/{found.id}"
        case "group":
            return f"{realm}/organizations/{found.parent_id}/groups/{found.id}" if found.parent_id else None
        case "role":
            return f"{realm}/roles/{found.id}"
        case "subscription":
            return f"{realm}/webhooks#webhook-{found.id}"
        case "workflow":
            return f"{realm}/workflows/{found.id}"
        case "run":
            return f"{realm}/runs/{found.id}"
        case "approval":
            return f"{realm}/runs/{found.parent_id}" if found.parent_id else None
        case _:
            return None


async def resolve_names(
    session: AsyncSession, realm_id: str, ids: Iterable[str | None], *, slug: str
) -> dict[str, Named]:
    """``{id: (kind, name, url)}`` for the ids of this realm among ``ids`` (one statement)."""
    found = await lookup_names(session, realm_id, ids)
    return {key: Named(item.kind, item.name, url_of(slug, item)) for key, item in found.items()}
