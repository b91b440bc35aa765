"""The JSON API against its own OpenAPI document, driven by schemathesis with an admin token.

A real ``cockpit serve`` answers generated requests for every operation: none may answer 5xx,
and every answer must be one the document declares (status and media type, problem details
included). Examples are few and derandomized, so a run is bounded and repeatable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from engine.platform.config import PROJECT_ROOT
from testing.databases import clone_database, drop_database
from testing.processes import cockpit_env, free_port, start, stop, wait_http

EXAMPLES_PER_OPERATION = 6
FLOW = Path(__file__).parent / "generated_client" / "flow.py"
MINIMAL = {"schema_version": 1, "triggers": [{"type": "manual"}], "steps": [{"id": "done", "type": "end"}]}


@dataclass
class Served:
    base: str
    slug: str
    headers: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)


def _cli(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cockpit.cli", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _seed(client: httpx.Client, api: str) -> dict[str, str]:
    """One of each resource, so generated requests reach handlers and not only 404s."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = client.post(api + path, json=body)
        assert response.status_code in {200, 201, 202}, (path, response.text)
        data: dict[str, Any] = response.json()
        return data

    user = post("/users", {"email": "subject@example.com", "display_name": "Subject"})
    org = post("/organizations", {"name": "Contract"})
    post(f"/organizations/{org['id']}/members", {"user_id": user["id"]})
    role = post("/roles", {"name": "contract-reader", "permissions": ["realm.users.read"], "boundary": "realm"})
    group = post(f"/organizations/{org['id']}/groups", {"name": "Readers", "role_ids": [role["id"]]})
    assignment = post("/role-assignments", {"role_id": role["id"], "user_id": user["id"]})
    sp = post("/service-principals", {"name": "contract-bot"})
    token = post(f"/service-principals/{sp['id']}/tokens", {"name": "contract"})
    hook = post("/webhooks", {"destination": "https://hooks.example.com/contract"})
    workflow = post("/workflows", {"name": "Contract", "definition": MINIMAL})
    run = post(f"/workflows/{workflow['id']}/revisions/1/publish", {})
    assert run["revision"]["status"] == "published"
    started = post(f"/workflows/{workflow['id']}/runs", {"subject_id": user["id"]})
    return {
        "user_id": user["id"],
        "org_id": org["id"],
        "role_id": role["id"],
        "group_id": group["id"],
        "assignment_id": assignment["id"],
        "sp_id": sp["id"],
        "token_id": token["id"],
        "webhook_id": hook["id"],
        "workflow_id": workflow["id"],
        "run_id": started["id"],
        "n": "1",
        "name": "workflow_notice",
    }


@pytest.fixture(scope="module")
def served(pg_server: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    database_url = clone_database(pg_server, pg_template)
    home = tmp_path_factory.mktemp("contract")
    port = free_port()
    env = cockpit_env(database_url, home / "home")
    process = None
    try:
        _cli(["admin", "create-realm", "contract", "--admin-email", "admin@contract.example"], env)
        token = _cli(
            ["admin", "token", "--realm", "contract", "--email", "admin@contract.example", "--audience", "admin"], env
        )
        process = start(["serve", "--port", str(port)], env, home / "serve.log")
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/healthz", timeout=180)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(headers=headers, timeout=30) as client:
            ids = _seed(client, f"{base}/api/v1/realms/contract")
        yield Served(base=base, slug="contract", headers=headers, ids=ids)
    finally:
        if process is not None:
            stop(process)
            log = (home / "serve.log").read_text()
            assert "Traceback" not in log, log[-4000:]
        drop_database(pg_server, database_url)


def test_a_generated_client_type_checks_strictly_and_drives_a_flow(served: Served, tmp_path: Path) -> None:
    """openapi-python-client makes a client of the document; mypy --strict accepts it and a flow
    written against it (tests/acceptance/generated_client/flow.py), which then runs against the server."""
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ)
    document = tmp_path / "openapi.json"
    document.write_bytes(httpx.get(served.base + "/schema/openapi.json", timeout=30).content)
    config = tmp_path / "client.yaml"
    config.write_text("post_hooks: []\n")  # the generated code as generated, not as a formatter left it
    generated = subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            *("--path", str(document), "--meta", "none", "--output-path", str(tmp_path / "cockpit_client")),
            *("--config", str(config)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "Warning" not in generated.stdout, generated.stdout
    shutil.copy(FLOW, tmp_path / "flow.py")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".mypy"), "cockpit_client", "flow.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert checked.returncode == 0, checked.stdout[-4000:]
    token = served.headers["Authorization"].split(" ", 1)[1]
    flow = subprocess.run(
        [sys.executable, "flow.py", served.base, served.slug, token, served.ids["workflow_id"], served.ids["user_id"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert flow.returncode == 0 and "flow ok" in flow.stdout, flow.stdout + flow.stderr


def test_no_operation_answers_5xx_or_off_contract(served: Served) -> None:
    schema = schemathesis.openapi.from_url(served.base + "/schema/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/readyz":
            continue  # 503 is its documented answer while no worker runs (none does here)
        operations += 1

        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            for name in case.path_parameters or {}:
                if name == "realm":
                    case.path_parameters[name] = served.slug
                elif name in served.ids:
                    case.path_parameters[name] = served.ids[name]
            case.call_and_validate(
                base_url=served.base,
                headers=served.headers,
                checks=[
                    not_a_server_error,
                    status_code_conformance,
                    content_type_conformance,
                    response_schema_conformance,
                ],
            )

        try:
            check()
        except BaseException as exc:  # every failing operation reported at once
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc).strip()[:1500]}")
    assert operations > 50, f"only {operations} operations in the document"
    assert not failures, "\n\n".join(failures)


def test_problem_details_are_declared(served: Served) -> None:
    document = httpx.get(served.base + "/schema/openapi.json", timeout=30).json()
    assert "Problem" in document["components"]["schemas"]
    operation = document["paths"]["/api/v1/realms/{realm}/users/{user_id}"]["patch"]
    for status in ("401", "403", "404", "409", "422"):
        assert "application/problem+json" in operation["responses"][status]["content"], status


TYPED_READS = {
    "listUsers",
    "getUser",
    "listWorkflows",
    "getWorkflow",
    "getWorkflowRevision",
    "diffWorkflowRevisions",
    "listWorkflowRuns",
    "getWorkflowRun",
    "listAuditEvents",
    "getPolicy",
    "validateWorkflowDefinition",
}


def _conforming(served: Served, operation: Any, statuses: list[int]) -> Any:
    """Few derandomized examples of one operation, every answer checked against its declared schema."""

    @settings(
        max_examples=8,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        for parameter in case.path_parameters or {}:
            case.path_parameters[parameter] = served.slug if parameter == "realm" else served.ids[parameter]
        response = case.call(base_url=served.base, headers=served.headers)
        statuses.append(response.status_code)
        case.validate_response(
            response,
            checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
        )

    return check


def test_typed_answers_conform_to_their_declared_schemas(served: Served) -> None:
    """A handful of reads and validation, checked member by member against their declared shapes."""
    schema = schemathesis.openapi.from_url(served.base + "/schema/openapi.json")
    answered: dict[str, list[int]] = {}
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        name = operation.definition.raw.get("operationId")
        if name not in TYPED_READS:
            continue
        try:
            _conforming(served, operation, answered.setdefault(name, []))()
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            failures.append(f"{name}: {str(exc).strip()[:1500]}")
    assert set(answered) == TYPED_READS
    assert not failures, "\n\n".join(failures)
    # Each operation's typed success answer was checked at least once, not only its problems.
    assert all(any(200 <= s < 300 for s in statuses) for statuses in answered.values()), answered


def test_the_declared_shapes_refuse_an_answer_that_drifts(served: Served) -> None:
    """The run timeline's schema holds its members: an answer without one, or with a wrong type, fails it."""
    document = httpx.get(served.base + "/schema/openapi.json", timeout=30).json()
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/RunTimeline", "components": document["components"]}
    )
    answer = httpx.get(
        f"{served.base}/api/v1/realms/{served.slug}/workflow-runs/{served.ids['run_id']}",
        headers=served.headers,
        timeout=30,
    ).json()
    assert not list(validator.iter_errors(answer))
    assert list(validator.iter_errors({k: v for k, v in answer.items() if k != "state"}))
    assert list(validator.iter_errors(answer | {"attempts": [{"id": 1}]}))
    assert list(validator.iter_errors(answer | {"trigger": None}))


def test_of_writers_holding_the_same_etag_exactly_one_wins(served: Served) -> None:
    """If-Match against a real server with concurrent requests: the check and the write are one step."""
    url = f"{served.base}/api/v1/realms/{served.slug}/users/{served.ids['user_id']}"
    tag = httpx.get(url, headers=served.headers, timeout=30).headers["etag"]
    writers = 6
    barrier = threading.Barrier(writers)

    def write(i: int) -> int:
        with httpx.Client(headers={**served.headers, "If-Match": tag}, timeout=60) as client:
            barrier.wait()
            return client.patch(url, json={"display_name": f"Writer {i}"}).status_code

    with ThreadPoolExecutor(max_workers=writers) as pool:
        statuses = sorted(pool.map(write, range(writers)))
    assert statuses == [200] + [412] * (writers - 1)
