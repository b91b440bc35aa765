"""What each realm API route needs, and the routes the app registers (the authorization matrix)."""

from __future__ import annotations

import re

from litestar import Litestar
from litestar.routes import HTTPRoute

ACCOUNT = "account"  # any credential of a user of the realm (self-service)


# (method, path) -> the permission the route needs (admin audience), or ACCOUNT.
MATRIX: dict[tuple[str, str], str] = {
    ("POST", "/users"): "realm.users.write",
    ("GET", "/users"): "realm.users.read",
    ("GET", "/users/{user_id}"): "realm.users.read",
    ("PATCH", "/users/{user_id}"): "realm.users.write",
    ("POST", "/users/{user_id}/suspend"): "realm.users.suspend",
    ("POST", "/users/{user_id}/reactivate"): "realm.users.suspend",
    ("POST", "/users/{user_id}/reset-mfa"): "realm.users.write",
    ("POST", "/service-principals"): "realm.users.write",
    ("GET", "/service-principals"): "realm.users.read",
    ("GET", "/service-principals/{sp_id}"): "realm.users.read",
    ("POST", "/sign-in-links"): "realm.users.write",
    ("GET", "/permissions"): "realm.roles.read",
    ("POST", "/organizations"): "realm.organizations.write",
    ("GET", "/organizations"): "realm.organizations.read",
    ("GET", "/organizations/{org_id}"): "realm.organizations.read",
    ("PATCH", "/organizations/{org_id}"): "realm.organizations.write",
    ("POST", "/organizations/{org_id}/members"): "org.members.write",
    ("GET", "/organizations/{org_id}/members"): "realm.organizations.read",
    ("DELETE", "/organizations/{org_id}/members/{user_id}"): "org.members.write",
    ("POST", "/organizations/{org_id}/groups"): "org.groups.write",
    ("GET", "/organizations/{org_id}/groups"): "realm.organizations.read",
    ("GET", "/organizations/{org_id}/groups/{group_id}"): "realm.organizations.read",
    ("PATCH", "/organizations/{org_id}/groups/{group_id}"): "org.groups.write",
    ("POST", "/organizations/{org_id}/groups/{group_id}/members"): "org.groups.write",
    ("GET", "/organizations/{org_id}/groups/{group_id}/members"): "realm.organizations.read",
    ("DELETE", "/organizations/{org_id}/groups/{group_id}/members/{user_id}"): "org.groups.write",
    ("POST", "/roles"): "realm.roles.write",
    ("GET", "/roles"): "realm.roles.read",
    ("GET", "/roles/{role_id}"): "realm.roles.read",
    ("PATCH", "/roles/{role_id}"): "realm.roles.write",
    ("DELETE", "/roles/{role_id}"): "realm.roles.write",
    ("POST", "/role-assignments"): "realm.roles.write",
    ("GET", "/role-assignments"): "realm.roles.read",
    ("GET", "/role-assignments/{assignment_id}"): "realm.roles.read",
    ("DELETE", "/role-assignments/{assignment_id}"): "realm.roles.write",
    ("POST", "/webhooks"): "realm.webhooks.write",
    ("GET", "/webhooks"): "realm.webhooks.read",
    ("GET", "/webhooks/{webhook_id}"): "realm.webhooks.read",
    ("PATCH", "/webhooks/{webhook_id}"): "realm.webhooks.write",
    ("DELETE", "/webhooks/{webhook_id}"): "realm.webhooks.write",
    ("POST", "/webhooks/{webhook_id}/rotate-secret"): "realm.webhooks.write",
    ("GET", "/webhooks/{webhook_id}/deliveries"): "realm.webhooks.read",
    ("POST", "/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): "realm.webhooks.write",
    ("GET", "/templates/{name}"): "realm.workflows.read",
    ("PUT", "/templates/{name}"): "realm.templates.write",
    ("DELETE", "/templates/{name}"): "realm.templates.write",
    ("GET", "/policy"): "realm.workflows.read",
    ("PATCH", "/policy"): "realm.policy.write",
    ("GET", "/audit-events"): "realm.audit.read",
    ("POST", "/tokens"): ACCOUNT,
    ("GET", "/tokens"): ACCOUNT,
    ("DELETE", "/tokens/{token_id}"): ACCOUNT,
    ("GET", "/approvals"): ACCOUNT,
    ("GET", "/approvals/{approval_id}"): ACCOUNT,
    ("POST", "/approvals/{approval_id}/approve"): ACCOUNT,
    ("POST", "/approvals/{approval_id}/reject"): ACCOUNT,
    ("POST", "/approvals/{approval_id}/delegate"): ACCOUNT,
    ("GET", "/notices"): "realm.workflows.read",
    ("POST", "/service-principals/{sp_id}/tokens"): "realm.tokens.write",
    ("GET", "/service-principals/{sp_id}/tokens"): "realm.tokens.write",
    ("POST", "/workflows/validate"): "realm.workflows.write",
    ("POST", "/workflows"): "realm.workflows.write",
    ("GET", "/workflows"): "realm.workflows.read",
    ("GET", "/workflows/{workflow_id}"): "realm.workflows.read",
    ("PATCH", "/workflows/{workflow_id}"): "realm.workflows.write",
    ("DELETE", "/workflows/{workflow_id}"): "realm.workflows.publish",
    ("POST", "/workflows/{workflow_id}/enable"): "realm.workflows.publish",
    ("POST", "/workflows/{workflow_id}/disable"): "realm.workflows.write",
    ("POST", "/workflows/{workflow_id}/revisions"): "realm.workflows.write",
    ("GET", "/workflows/{workflow_id}/revisions"): "realm.workflows.read",
    ("GET", "/workflows/{workflow_id}/revisions/{n}"): "realm.workflows.read",
    ("GET", "/workflows/{workflow_id}/revisions/{n}/diff"): "realm.workflows.read",
    ("POST", "/workflows/{workflow_id}/revisions/{n}/approve"): "realm.workflows.publish",
    ("POST", "/workflows/{workflow_id}/revisions/{n}/reject"): "realm.workflows.publish",
    ("POST", "/workflows/{workflow_id}/revisions/{n}/publish"): "realm.workflows.publish",
    ("POST", "/workflows/{workflow_id}/rollback"): "realm.workflows.publish",
    ("POST", "/workflows/{workflow_id}/runs"): "realm.workflows.run",
    ("POST", "/workflows/{workflow_id}/preview"): "realm.workflows.run",
    ("GET", "/workflow-runs"): "realm.workflows.read",
    ("GET", "/workflow-runs/{run_id}"): "realm.workflows.read",
    ("POST", "/workflow-runs/{run_id}/cancel"): "realm.workflows.run",
    ("POST", "/workflow-runs/{run_id}/resolve"): "realm.workflows.run",
    ("GET", "/workflows/{workflow_id}/diagnostics"): "realm.workflows.read",
    ("GET", "/needs-attention"): "realm.workflows.read",
    ("POST", "/workflow-runs/{run_id}/rerun"): "realm.workflows.run",
    ("POST", "/workflow-runs/{run_id}/retry-now"): "realm.workflows.run",
    ("POST", "/workflow-runs/bulk"): "realm.workflows.run",
}


PREFIX = "/api/v1/realms/{realm}"


DUMMY = {
    "user_id": "usr_" + "0" * 26,
    "sp_id": "spn_" + "0" * 26,
    "org_id": "org_" + "0" * 26,
    "role_id": "rol_" + "0" * 26,
    "assignment_id": "ras_" + "0" * 26,
    "group_id": "grp_" + "0" * 26,
    "webhook_id": "whk_" + "0" * 26,
    "token_id": "tok_" + "0" * 26,
    "workflow_id": "wfl_" + "0" * 26,
    "run_id": "wrn_" + "0" * 26,
    "approval_id": "wap_" + "0" * 26,
    "n": "1",
    "name": "workflow_notice",
}


def realm_routes(app: Litestar) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        path = re.sub(r"\{(\w+):[^}]+\}", r"{\1}", route.path)
        if not path.startswith(PREFIX):
            continue
        for method in route.methods:
            if method in {"HEAD", "OPTIONS"}:
                continue
            found.add((method, path[len(PREFIX) :] or "/"))
    return found
