"""``cockpit runs|approvals|workflows`` as an operator or a CI job runs them: real processes, over
HTTP to a running ``cockpit serve`` with a worker behind it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from cockpit.remote_cli import EXIT_CODES, exit_code_of
from engine.platform.config import PROJECT_ROOT
from testing.databases import clone_database, drop_database
from testing.processes import cockpit_env, free_port, start, stop, wait_http

# Deadlines bound a test that went wrong, never a measure of speed: generous for a loaded machine.
DEADLINE_S = 180


@dataclass
class Ops:
    base: str
    api: str
    admin_token: str
    approver_token: str
    approver_id: str
    subject_id: str
    home: Path


def _admin(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cockpit.cli", "admin", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def ops(pg_server: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    database_url = clone_database(pg_server, pg_template)
    home = tmp_path_factory.mktemp("remote-cli")
    port = free_port()
    env = cockpit_env(database_url, home / "home")
    processes = []
    try:
        _admin(["create-realm", "ops", "--admin-email", "admin@ops.example"], env)
        admin_token = _admin(["token", "--realm", "ops", "--email", "admin@ops.example", "--audience", "admin"], env)
        processes.append(start(["serve", "--port", str(port), "--processes", "1"], env, home / "serve.log"))
        processes.append(start(["worker"], env, home / "worker.log"))
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout=DEADLINE_S)
        api = f"{base}/api/v1/realms/ops"
        with httpx.Client(headers={"Authorization": f"Bearer {admin_token}"}, timeout=30) as client:
            approver = client.post(api + "/users", json={"email": "ana@ops.example", "display_name": "Ana"}).json()
            subject = client.post(api + "/users", json={"email": "sam@ops.example", "display_name": "Sam"}).json()
        approver_token = _admin(["token", "--realm", "ops", "--email", "ana@ops.example", "--audience", "account"], env)
        yield Ops(base, api, admin_token, approver_token, approver["id"], subject["id"], home)
    finally:
        for process in processes:
            stop(process)
        drop_database(pg_server, database_url)


def cockpit(
    ops: Ops, *args: str, token: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COCKPIT_")}
    environment |= {"COCKPIT_URL": ops.base, "COCKPIT_TOKEN": token or ops.admin_token, "COCKPIT_REALM": "ops"}
    environment |= env or {}
    return subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=environment,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def wait_state(ops: Ops, run_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        run = as_json(cockpit(ops, "runs", "show", run_id, "--json"))
        if run["state"] in states or time.monotonic() > deadline:
            assert run["state"] in states, run
            return dict(run)
        time.sleep(0.2)


def test_exit_codes_follow_the_problem_status() -> None:
    assert exit_code_of(200) == 0 and exit_code_of(202) == 0
    assert {s: exit_code_of(s) for s in (401, 403, 404, 409, 412, 422, 429)} == {
        401: 4,
        403: 5,
        404: 6,
        409: 7,
        412: 9,
        422: 8,
        429: 10,
    }
    assert exit_code_of(500) == exit_code_of(503) == 11
    assert len(set(EXIT_CODES.values()) - {8}) == len(EXIT_CODES) - 3  # 400, 413 and 422 share one


def test_apply_a_workflow_run_it_decide_its_approval_rerun_and_cancel(ops: Ops, tmp_path: Path) -> None:
    file = tmp_path / "onboarding.json"
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "ok", "type": "approval", "approvers": [ops.approver_id], "expires_in": "1h"}],
    }
    file.write_text(json.dumps({"name": "Onboarding", "definition": definition}))
    created = as_json(cockpit(ops, "workflows", "apply", str(file), "--json"))
    assert created["action"] == "created" and created["revision"] == 1
    wid = created["workflow_id"]
    # The same definition again, its members in another order: nothing new.
    file.write_text(json.dumps({"definition": dict(reversed(list(definition.items()))), "name": "Onboarding"}))
    same = cockpit(ops, "workflows", "apply", str(file))
    assert same.returncode == 0 and same.stdout.startswith("unchanged: revision 1 of " + wid), same.stdout
    definition["steps"].append({"id": "done", "type": "end"})
    file.write_text(json.dumps({"name": "Onboarding", "definition": definition}))
    staged = as_json(cockpit(ops, "workflows", "apply", str(file), "--json"))
    assert (staged["action"], staged["workflow_id"], staged["revision"]) == ("staged", wid, 2)
    headers = {"Authorization": f"Bearer {ops.admin_token}"}
    published = httpx.post(f"{ops.api}/workflows/{wid}/revisions/2/publish", json={}, headers=headers)
    assert published.status_code == 200, published.text

    started = cockpit(ops, "runs", "start", wid, "--subject", ops.subject_id)
    assert started.returncode == 0 and started.stdout.startswith("started wrn_"), started.stderr
    run_id = started.stdout.split()[1]
    listed = cockpit(ops, "runs", "list", "--workflow", wid)
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:5] == ["ID", "WORKFLOW_ID", "REVISION", "SUBJECT_ID", "STATE"]
    assert [r.split()[0] for r in rows] == [run_id]
    wait_state(ops, run_id, {"awaiting_approval"})

    waiting = cockpit(ops, "approvals", "list", token=ops.approver_token)
    assert waiting.returncode == 0, waiting.stderr
    [row] = waiting.stdout.splitlines()[1:]
    approval_id, in_run = row.split()[:2]
    assert in_run == run_id
    mine = as_json(cockpit(ops, "approvals", "list", "--run", run_id, "--json", token=ops.approver_token))
    assert [a["id"] for a in mine["items"]] == [approval_id]
    approved = cockpit(ops, "approvals", "approve", approval_id, "--comment", "fine", token=ops.approver_token)
    assert approved.returncode == 0 and approved.stdout.strip() == f"{approval_id} approved", approved.stderr
    again = cockpit(ops, "approvals", "reject", approval_id, token=ops.approver_token)
    assert again.returncode == EXIT_CODES[409] and "409 conflict" in again.stderr
    finished = wait_state(ops, run_id, {"succeeded"})
    assert [a["status"] for a in finished["approvals"]] == ["approved"]
    shown = cockpit(ops, "runs", "show", run_id)
    assert "succeeded" in shown.stdout and approval_id in shown.stdout

    rerun = as_json(cockpit(ops, "runs", "rerun", run_id, "--json"))
    assert rerun["rerun_of"] == run_id
    wait_state(ops, rerun["id"], {"awaiting_approval"})
    cancelled = cockpit(ops, "runs", "cancel", rerun["id"], "--reason", "not needed")
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(f"cancelling {rerun['id']}")
    twice = cockpit(ops, "runs", "cancel", rerun["id"], "--json")
    assert twice.returncode == EXIT_CODES[409]
    assert json.loads(twice.stdout)["code"] == "conflict"
    assert wait_state(ops, rerun["id"], {"cancelled"})["cancel_reason"] == "not needed"


def test_refusals_exit_with_their_status_code(ops: Ops, tmp_path: Path) -> None:
    unknown = cockpit(ops, "runs", "show", "wrn_00000000000000000000000000")
    assert unknown.returncode == EXIT_CODES[404] and "404 not_found" in unknown.stderr
    bad_token = cockpit(ops, "runs", "list", token="pat_not-a-token")
    assert bad_token.returncode == EXIT_CODES[401]
    # An account token may not start runs (an administration route).
    account = cockpit(ops, "runs", "start", "wfl_x", "--subject", ops.subject_id, token=ops.approver_token)
    assert account.returncode == EXIT_CODES[403], account.stderr
    invalid = cockpit(ops, "approvals", "list", "--status", "maybe", token=ops.approver_token)
    assert invalid.returncode == EXIT_CODES[422] and "status: invalid" in invalid.stderr
    other_realm = cockpit(ops, "runs", "list", "--realm", "nowhere")
    assert other_realm.returncode == EXIT_CODES[404]
    nothing = cockpit(ops, "runs", "list", env={"COCKPIT_URL": f"http://127.0.0.1:{free_port()}"})
    assert nothing.returncode == 3 and "cannot reach" in nothing.stderr
    unset = cockpit(ops, "runs", "list", env={"COCKPIT_TOKEN": ""})
    assert unset.returncode == 1 and "COCKPIT_TOKEN" in unset.stderr
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": "X"')
    assert cockpit(ops, "workflows", "apply", str(broken)).returncode == 1
    refused = tmp_path / "invalid.json"
    refused.write_text(json.dumps({"name": "Broken", "definition": {"schema_version": 1}}))
    checked = cockpit(ops, "workflows", "apply", str(refused))
    assert checked.returncode == EXIT_CODES[422] and "/definition" in checked.stderr


def test_a_retried_start_starts_one_run_the_filters_find_it_and_a_rejection_ends_it(ops: Ops, tmp_path: Path) -> None:
    headers = {"Authorization": f"Bearer {ops.admin_token}"}
    with httpx.Client(headers=headers, timeout=30) as client:
        org = client.post(ops.api + "/organizations", json={"name": "Filters"}).json()
        assert client.post(f"{ops.api}/organizations/{org['id']}/members", json={"user_id": ops.subject_id}).is_success
        [admin] = client.get(ops.api + "/users", params={"q": "admin@ops.example"}).json()["items"]
    file = tmp_path / "gated.json"
    definition = {
        "schema_version": 1,
        "triggers": [{"type": "manual"}],
        "steps": [{"id": "ok", "type": "approval", "approvers": [ops.approver_id], "expires_in": "1h"}],
    }
    file.write_text(json.dumps({"name": "Gated", "definition": definition}))
    wid = as_json(cockpit(ops, "workflows", "apply", str(file), "--json"))["workflow_id"]
    published = httpx.post(f"{ops.api}/workflows/{wid}/revisions/1/publish", json={}, headers=headers)
    assert published.status_code == 200, published.text

    start = ("runs", "start", wid, "--subject", ops.subject_id, "--organization", org["id"], "--json")
    first = as_json(cockpit(ops, *start, "--idempotency-key", "gated-sam"))
    retried = as_json(cockpit(ops, *start, "--idempotency-key", "gated-sam"))
    assert retried["id"] == first["id"]  # the kept answer, not a second run
    run_id = first["id"]
    in_org = as_json(cockpit(ops, "runs", "list", "--organization", org["id"], "--json"))
    assert [r["id"] for r in in_org["items"]] == [run_id]
    by_admin = as_json(cockpit(ops, "runs", "list", "--starter", admin["id"], "--workflow", wid, "--json"))
    assert [r["id"] for r in by_admin["items"]] == [run_id]
    by_other = as_json(cockpit(ops, "runs", "list", "--starter", ops.approver_id, "--workflow", wid, "--json"))
    assert by_other["items"] == []

    wait_state(ops, run_id, {"awaiting_approval"})
    [approval] = as_json(cockpit(ops, "approvals", "list", "--run", run_id, "--json", token=ops.approver_token))[
        "items"
    ]
    rejected = cockpit(ops, "approvals", "reject", approval["id"], "--comment", "no", token=ops.approver_token)
    assert rejected.returncode == 0 and rejected.stdout.strip() == f"{approval['id']} rejected", rejected.stderr
    ended = wait_state(ops, run_id, {"failed", "compensated"})
    assert ended["error_category"] == "approval_rejected"
