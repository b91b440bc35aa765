"""A short automation written against the client that openapi-python-client generates from
``/schema/openapi.json``: type-checked with ``mypy --strict``, then run against a live server.

Arguments: base URL, realm, token, workflow id, subject id. Exits non-zero on the first surprise.
"""

from __future__ import annotations

import sys

from cockpit_client import AuthenticatedClient
from cockpit_client.api.directory import create_organization, get_organization, update_organization
from cockpit_client.api.health import metrics
from cockpit_client.api.runs import get_workflow_run, list_workflow_runs, start_workflow_run
from cockpit_client.api.workflows import get_workflow_revision
from cockpit_client.models import (
    CreateOrganization,
    DefinitionStepEnd,
    Organization,
    Problem,
    RunTimeline,
    RunWithAttempts,
    StartRun,
    UpdateOrganization,
    WorkflowDefinition,
    WorkflowRevision,
    WorkflowRunPage,
)


def main(base: str, realm: str, token: str, workflow_id: str, subject_id: str) -> None:
    client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)

    # An idempotent create: the same key answers the same organization, marked as a replay.
    body = CreateOrganization(name="Generated client")
    made = create_organization.sync_detailed(realm, client=client, body=body, idempotency_key="flow-org-1")
    again = create_organization.sync_detailed(realm, client=client, body=body, idempotency_key="flow-org-1")
    assert made.status_code == 201 and isinstance(made.parsed, Organization), made.content
    assert isinstance(again.parsed, Organization) and again.parsed.id == made.parsed.id
    assert again.headers["idempotent-replayed"] == "true"
    org_id = made.parsed.id
    assert made.headers["location"].endswith(f"/organizations/{org_id}")

    # A conditional update: the current ETag wins, a stale one is a typed 412 problem.
    read = get_organization.sync_detailed(realm, org_id, client=client)
    tag = read.headers["etag"]
    renamed = update_organization.sync_detailed(
        realm, org_id, client=client, body=UpdateOrganization(name="Generated client 2"), if_match=tag
    )
    assert isinstance(renamed.parsed, Organization) and renamed.parsed.name == "Generated client 2"
    stale = update_organization.sync_detailed(
        realm, org_id, client=client, body=UpdateOrganization(name="Lost update"), if_match=tag
    )
    assert stale.status_code == 412 and isinstance(stale.parsed, Problem), stale.content
    assert stale.parsed.code == "precondition_failed"

    # A run: started (202, Location), read back, found by the list's filters.
    started = start_workflow_run.sync_detailed(
        realm, workflow_id, client=client, body=StartRun(subject_id=subject_id), idempotency_key="flow-run-1"
    )
    assert started.status_code == 202 and isinstance(started.parsed, RunWithAttempts), started.content
    run_id = started.parsed.id
    assert started.headers["location"].endswith(f"/workflow-runs/{run_id}")
    shown = get_workflow_run.sync_detailed(realm, run_id, client=client)
    assert isinstance(shown.parsed, RunTimeline) and shown.parsed.id == run_id
    page = list_workflow_runs.sync_detailed(realm, client=client, workflow_id=workflow_id, subject_id=subject_id)
    assert isinstance(page.parsed, WorkflowRunPage) and run_id in [r.id for r in page.parsed.items]

    # A revision's definition is typed by its contract: one class per step type.
    revision = get_workflow_revision.sync_detailed(realm, workflow_id, 1, client=client)
    assert isinstance(revision.parsed, WorkflowRevision), revision.content
    assert isinstance(revision.parsed.definition, WorkflowDefinition)
    assert isinstance(revision.parsed.definition.steps[0], DefinitionStepEnd)
    # Its approvals have the one Approval shape here as in the timeline.
    assert shown.parsed.approvals == [] and started.parsed.approvals == []

    # The metrics answer without a token here (none is configured).
    assert metrics.sync_detailed(client=client).status_code == 200
    print("flow ok")


if __name__ == "__main__":
    main(*sys.argv[1:6])
