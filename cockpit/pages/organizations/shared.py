"""What the organization pages share: permissions (checked in the organization of the URL) and
messages after a change."""

from __future__ import annotations

from cockpit.state import AnyRequest

READ = {"permission": "realm.organizations.read", "org_param": "org_id"}
MEMBERS_WRITE = {"permission": "org.members.write", "org_param": "org_id"}
GROUPS_WRITE = {"permission": "org.groups.write", "org_param": "org_id"}

FLASHES = {
    "created": "Organization created.",
    "updated": "Organization saved.",
    "member-added": "Member added.",
    "member-removed": "Member removed.",
    "group-created": "Group created.",
    "group-updated": "Group saved.",
}


def flash_of(request: AnyRequest) -> str | None:
    return FLASHES.get(request.query_params.get("done") or "")
