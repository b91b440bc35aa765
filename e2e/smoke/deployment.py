"""The cockpit the smoke suite runs against, and what the suite made there (to remove at the end)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

CLEANUP_DEADLINE_S = 60


RUNNING = {"pending", "running", "waiting", "awaiting_approval", "compensating"}


@dataclass
class Person:
    id: str
    email: str
    display_name: str


@dataclass
class Deployment:
    """The cockpit under test, its realm, and an API client holding the administrator's token."""

    url: str
    realm: str
    prefix: str
    api: httpx.Client
    users: list[str] = field(default_factory=list)
    assignments: list[str] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)

    def call(self, method: str, path: str, expected: int | tuple[int, ...] = (200, 201), **kwargs: Any) -> Any:
        response = self.api.request(method, path, **kwargs)
        codes = (expected,) if isinstance(expected, int) else expected
        assert response.status_code in codes, f"{method} {path} → {response.status_code}: {response.text}"
        return response.json() if response.content else None

    def name(self, what: str) -> str:
        return f"{self.prefix}-{what}"

    def email(self, who: str) -> str:
        return f"{self.prefix}-{who}@smoke.example"

    def user(self, who: str, display_name: str, *, password: str | None = None) -> Person:
        fields = {"email": self.email(who), "display_name": display_name}
        body = self.call("POST", "/users", json=fields | ({"password": password} if password else {}))
        self.users.append(body["id"])
        return Person(body["id"], body["email"], body["display_name"])

    def builtin_role(self, name: str) -> str:
        roles = self.call("GET", "/roles", params={"limit": 200})["items"]
        return next(r["id"] for r in roles if r["name"] == name)

    def role(self, what: str, permissions: list[str]) -> str:
        body = self.call(
            "POST", "/roles", json={"name": self.name(what), "permissions": permissions, "boundary": "realm"}
        )
        self.roles.append(body["id"])
        role_id: str = body["id"]
        return role_id

    def administrator(self, who: str, display_name: str) -> Person:
        person = self.user(who, display_name)
        assignment = self.call(
            "POST", "/role-assignments", json={"role_id": self.builtin_role("realm-admin"), "user_id": person.id}
        )
        self.assignments.append(assignment["id"])
        return person

    def workflow(self, what: str, steps: list[dict[str, Any]], *, publish: bool = True) -> str:
        definition = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": steps}
        body = self.call(
            "POST", "/workflows", json={"name": self.name(what), "definition": definition, "requires_approval": False}
        )
        self.workflows.append(body["id"])
        if publish:
            self.call("POST", f"/workflows/{body['id']}/revisions/1/publish", json={})
        workflow_id: str = body["id"]
        return workflow_id

    def adopt_workflows(self) -> None:
        """Workflows the flows created in the browser, found by the prefix."""
        for item in self.call("GET", "/workflows", params={"q": self.prefix, "limit": 200})["items"]:
            if item["name"].startswith(self.prefix) and item["id"] not in self.workflows:
                self.workflows.append(item["id"])

    def adopt_users(self) -> None:
        for item in self.call("GET", "/users", params={"q": self.prefix, "limit": 200})["items"]:
            if item["email"].startswith(self.prefix) and item["id"] not in self.users:
                self.users.append(item["id"])

    def clean_up(self) -> list[str]:
        """Remove what the suite made; returns what could not be removed (reported, not hidden)."""
        left: list[str] = []
        self.adopt_workflows()
        self.adopt_users()
        for workflow_id in self.workflows:
            left += self._remove_workflow(workflow_id)
        for role_id in self.roles:
            response = self.api.delete(f"/roles/{role_id}")
            if response.status_code not in (204, 404):
                left.append(f"role {role_id}: {response.status_code}")
        for assignment_id in self.assignments:
            response = self.api.delete(f"/role-assignments/{assignment_id}")
            if response.status_code not in (204, 404):
                left.append(f"role assignment {assignment_id}: {response.status_code}")
        for user_id in self.users:
            response = self.api.post(f"/users/{user_id}/suspend")
            if response.status_code not in (200, 409):  # 409: suspended already
                left.append(f"user {user_id}: {response.status_code}")
        return left

    def _remove_workflow(self, workflow_id: str) -> list[str]:
        runs = self.api.get("/workflow-runs", params={"workflow_id": workflow_id, "limit": 200})
        for run in runs.json().get("items", []) if runs.status_code == 200 else []:
            if run["state"] in RUNNING:
                self.api.post(f"/workflow-runs/{run['id']}/cancel", json={"reason": "smoke suite clean-up"})
        disabled = self.api.post(f"/workflows/{workflow_id}/disable")
        if disabled.status_code not in (200, 409):
            return [f"workflow {workflow_id}: disable answered {disabled.status_code}"]
        deadline = time.monotonic() + CLEANUP_DEADLINE_S
        while True:
            deleted = self.api.delete(f"/workflows/{workflow_id}")
            if deleted.status_code in (204, 404):
                return []
            if deleted.status_code != 409 or time.monotonic() > deadline:
                return [f"workflow {workflow_id}: delete answered {deleted.status_code}"]
            time.sleep(0.5)  # runs still undoing what they did after the cancel: wait for them to end
