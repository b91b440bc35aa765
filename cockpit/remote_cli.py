"""``cockpit runs|approvals|workflows …``: the JSON API from a shell, for operators and CI.

These commands talk HTTP to a running cockpit — never to its database — with a bearer token:
``COCKPIT_URL`` (or ``--url``), ``COCKPIT_TOKEN`` (the environment only, so the token stays out of
process lists and shell history) and ``COCKPIT_REALM`` (or ``--realm``). Answers print as a table,
or with ``--json`` as the API's own JSON. A refusal prints its problem (``code``, ``detail``, every
issue) on stderr and exits with the code of its status (:data:`EXIT_CODES`), so a script can branch
on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

# The exit code of each problem status (documented in docs/operations.md).
EXIT_OK = 0
EXIT_FAILED = 1  # anything local: an unreadable file, a missing setting
EXIT_USAGE = 2  # argparse's own
EXIT_UNREACHABLE = 3  # no answer, or an answer that is not the API's
EXIT_CODES: dict[int, int] = {
    400: 8,
    401: 4,
    403: 5,
    404: 6,
    409: 7,
    412: 9,
    413: 8,
    422: 8,
    429: 10,
}
EXIT_SERVER_ERROR = 11  # 5xx


def exit_code_of(status: int) -> int:
    """The exit code for an answer's status: 0 for success, one code per kind of refusal."""
    if status < 400:
        return EXIT_OK
    if status >= 500:
        return EXIT_SERVER_ERROR
    return EXIT_CODES.get(status, EXIT_FAILED)


class Refused(Exception):
    """A failure to report and exit with."""

    def __init__(self, message: str, code: int, problem: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.problem = problem


class Api:
    """The realm's API on one base URL, with the caller's token."""

    def __init__(self, url: str, token: str, realm: str, *, transport: httpx.BaseTransport | None = None) -> None:
        self.base = f"{url.rstrip('/')}/api/v1/realms/{quote(realm, safe='')}"
        self.client = httpx.Client(
            headers={"Authorization": f"Bearer {token}", "User-Agent": "cockpit-cli/1"},
            timeout=30,
            transport=transport,
        )

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        idempotency_key: str | None = None,
    ) -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self.client.request(method, self.base + path, params=query, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise Refused(f"cannot reach {self.base}: {exc}", EXIT_UNREACHABLE) from exc
        if response.status_code == 204:
            return None
        try:
            data = response.json()
        except ValueError as exc:
            raise Refused(
                f"{response.status_code} from {self.base}: the answer is not JSON (is this a cockpit?)",
                EXIT_UNREACHABLE if response.status_code < 500 else EXIT_SERVER_ERROR,
            ) from exc
        if response.status_code >= 400:
            code = data.get("code", "error") if isinstance(data, dict) else "error"
            detail = data.get("detail", "") if isinstance(data, dict) else ""
            raise Refused(
                f"{response.status_code} {code}: {detail}",
                exit_code_of(response.status_code),
                data if isinstance(data, dict) else None,
            )
        return data

    def every(self, path: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every item of a list, page after page."""
        items: list[dict[str, Any]] = []
        query = dict(params or {}) | {"limit": 200}
        while True:
            page = self.call("GET", path, params=query)
            items.extend(page["items"])
            if not page.get("next_cursor"):
                return items
            query["cursor"] = page["next_cursor"]


# --- Output ---------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned columns under an upper-case header."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def fields(row: dict[str, Any], names: Sequence[str]) -> str:
    """One object as ``name  value`` lines."""
    width = max(len(n) for n in names)
    return "\n".join(f"{n.ljust(width)}  {_cell(row.get(n))}" for n in names)


RUN_COLUMNS = ("id", "workflow_id", "revision", "subject_id", "state", "error_category", "created_at")
RUN_FIELDS = (
    "id",
    "workflow_id",
    "revision",
    "subject_id",
    "organization_id",
    "state",
    "step_index",
    "error_category",
    "last_error",
    "starter_id",
    "rerun_of",
    "due_at",
    "created_at",
    "finished_at",
)
APPROVAL_COLUMNS = ("id", "run_id", "workflow_id", "step_id", "subject_id", "status", "expires_at")
ATTEMPT_COLUMNS = ("step_id", "number", "state", "error_category", "finished_at")


def show_run(run: dict[str, Any]) -> str:
    out = fields(run | {"trigger": run.get("trigger", {}).get("type")}, ("trigger", *RUN_FIELDS))
    if run.get("attempts"):
        out += "\n\n" + table(run["attempts"], ATTEMPT_COLUMNS)
    if run.get("approvals"):
        out += "\n\n" + table(run["approvals"], ("id", "step_id", "status", "decided_by", "decided_at"))
    return out


# --- Commands -------------------------------------------------------------------------------------


def runs_list(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    params = {
        "workflow_id": args.workflow,
        "state": args.state,
        "state_group": args.state_group,
        "subject_id": args.subject,
        "organization_id": args.organization,
        "starter_id": args.starter,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    page = api.call("GET", "/workflow-runs", params=params)
    text = table(page["items"], RUN_COLUMNS)
    if page.get("next_cursor"):
        text += f"\n(more: --cursor {page['next_cursor']})"
    return page, text


def runs_show(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    run = api.call("GET", f"/workflow-runs/{quote(args.run_id, safe='')}")
    return run, show_run(run)


def runs_start(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    body = {"subject_id": args.subject, "organization_id": args.organization}
    run = api.call(
        "POST",
        f"/workflows/{quote(args.workflow_id, safe='')}/runs",
        body=body,
        idempotency_key=args.idempotency_key,
    )
    return run, f"started {run['id']} ({run['state']})"


def runs_cancel(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    run = api.call("POST", f"/workflow-runs/{quote(args.run_id, safe='')}/cancel", body={"reason": args.reason})
    return run, f"cancelling {run['id']} ({run['state']})"


def runs_rerun(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    run = api.call("POST", f"/workflow-runs/{quote(args.run_id, safe='')}/rerun", idempotency_key=args.idempotency_key)
    return run, f"started {run['id']} ({run['state']}), a re-run of {args.run_id}"


def approvals_list(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    params = {"status": args.status, "run_id": args.run, "limit": args.limit, "cursor": args.cursor}
    page = api.call("GET", "/approvals", params=params)
    text = table(page["items"], APPROVAL_COLUMNS)
    if page.get("next_cursor"):
        text += f"\n(more: --cursor {page['next_cursor']})"
    return page, text


def _decide(api: Api, args: argparse.Namespace, verb: str) -> tuple[Any, str]:
    approval = api.call("POST", f"/approvals/{quote(args.approval_id, safe='')}/{verb}", body={"comment": args.comment})
    return approval, f"{approval['id']} {approval['status']}"


def approvals_approve(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    return _decide(api, args, "approve")


def approvals_reject(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    return _decide(api, args, "reject")


def read_workflow_file(path: Path) -> dict[str, Any]:
    """``{"name": …, "definition": {…}}`` (and optionally ``description``, ``requires_approval``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror}", EXIT_FAILED) from exc
    except ValueError as exc:
        raise Refused(f"{path} is not JSON: {exc}", EXIT_FAILED) from exc
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or "definition" not in data:
        raise Refused(f'{path}: expected {{"name": "…", "definition": {{…}}}}', EXIT_FAILED)
    unknown = set(data) - {"name", "description", "requires_approval", "definition"}
    if unknown:
        raise Refused(f"{path}: unknown members {', '.join(sorted(unknown))}", EXIT_FAILED)
    return data


def workflows_apply(api: Api, args: argparse.Namespace) -> tuple[Any, str]:
    """Create the workflow named in the file, or stage its definition as a new revision — unless the
    newest revision already has the same definition (same canonical hash): then nothing changes."""
    # here, not at the top: loading the definition package (its JSON Schema) costs every command
    from engine.workflows.definitions.canonical import definition_hash

    data = read_workflow_file(Path(args.file))
    name = data["name"]
    found = [w for w in api.every("/workflows", {"q": name}) if w["name"] == name]
    wanted = definition_hash(data["definition"])
    if not found:
        body = {k: data[k] for k in ("name", "description", "requires_approval", "definition") if k in data}
        made = api.call("POST", "/workflows", body=body)
        revision = made["revision"]
        out = {"action": "created", "workflow_id": made["id"], "revision": revision["number"], "hash": revision["hash"]}
        return out, f"created {made['id']} ({name}), revision {revision['number']} staged"
    workflow = found[0]
    revisions = api.call("GET", f"/workflows/{workflow['id']}/revisions")["items"]
    newest = max(revisions, key=lambda r: r["number"]) if revisions else None
    if newest is not None and newest["hash"] == wanted:
        out = {"action": "unchanged", "workflow_id": workflow["id"], "revision": newest["number"], "hash": wanted}
        return out, f"unchanged: revision {newest['number']} of {workflow['id']} ({name}) has this definition"
    staged = api.call("POST", f"/workflows/{workflow['id']}/revisions", body={"definition": data["definition"]})
    out = {"action": "staged", "workflow_id": workflow["id"], "revision": staged["number"], "hash": staged["hash"]}
    return out, f"staged revision {staged['number']} of {workflow['id']} ({name})"


# --- Parser ---------------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=None, help="the cockpit's base URL (default COCKPIT_URL)")
    parser.add_argument("--realm", default=None, help="the realm's slug (default COCKPIT_REALM)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")


def _command(sub: Any, name: str, func: Any, help_text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    _common(parser)
    parser.set_defaults(func=run_remote, remote=func)
    return parser


def _pages(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=None, help="items per page (1-200, default 50)")
    parser.add_argument("--cursor", default=None, help="the next_cursor of the page before")


def add_remote_commands(sub: Any) -> None:
    runs = sub.add_parser("runs", help="list, show, start, cancel and re-run workflow runs (over HTTP)")
    runs_sub = runs.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = _command(runs_sub, "list", runs_list, "runs of the realm, newest first")
    p.add_argument("--workflow", help="only this workflow's runs")
    p.add_argument("--state", help="pending, running, succeeded, failed, …")
    p.add_argument("--state-group", dest="state_group", help="failed_any, in_flight or finished")
    p.add_argument("--subject", help="only runs about this user")
    p.add_argument("--organization", help="only runs in this organization")
    p.add_argument("--starter", help="only runs this principal started by hand")
    _pages(p)
    p = _command(runs_sub, "show", runs_show, "one run: its attempts and approvals")
    p.add_argument("run_id")
    p = _command(runs_sub, "start", runs_start, "start a run by hand")
    p.add_argument("workflow_id")
    p.add_argument("--subject", required=True, help="the user the run is about")
    p.add_argument("--organization", help="the organization the run acts in")
    p.add_argument("--idempotency-key", dest="idempotency_key", help="makes a retried start start one run")
    p = _command(runs_sub, "cancel", runs_cancel, "ask a run to stop (it undoes what it did)")
    p.add_argument("run_id")
    p.add_argument("--reason", help="why (at most 500 characters)")
    p = _command(runs_sub, "rerun", runs_rerun, "start a finished run again, for the same subject")
    p.add_argument("run_id")
    p.add_argument("--idempotency-key", dest="idempotency_key", help="makes a retried re-run start one run")

    approvals = sub.add_parser("approvals", help="list and decide approvals (over HTTP)")
    approvals_sub = approvals.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = _command(approvals_sub, "list", approvals_list, "approvals that involve the token's user")
    p.add_argument("--status", default="pending", help="pending (default), approved, rejected, expired, cancelled")
    p.add_argument("--run", help="only this run's approvals")
    _pages(p)
    for verb, func in (("approve", approvals_approve), ("reject", approvals_reject)):
        p = _command(approvals_sub, verb, func, f"{verb} an approval")
        p.add_argument("approval_id")
        p.add_argument("--comment", help="at most 1000 characters")

    workflows = sub.add_parser("workflows", help="apply workflow files (over HTTP)")
    workflows_sub = workflows.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = _command(
        workflows_sub,
        "apply",
        workflows_apply,
        "create a workflow, or stage a revision, from a JSON file; nothing when the definition is unchanged",
    )
    p.add_argument("file", help='a JSON file: {"name": …, "definition": {…}}')


def run_remote(_settings: Any, args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("COCKPIT_URL")
    token = os.environ.get("COCKPIT_TOKEN")
    realm = args.realm or os.environ.get("COCKPIT_REALM")
    missing = [n for n, v in (("COCKPIT_URL", url), ("COCKPIT_TOKEN", token), ("COCKPIT_REALM", realm)) if not v]
    if missing:
        print(f"cockpit: set {', '.join(missing)}", file=sys.stderr)
        return EXIT_FAILED
    assert url and token and realm
    api = Api(url, token, realm)
    try:
        data, text = args.remote(api, args)
    except Refused as refused:
        print(f"cockpit: {refused}", file=sys.stderr)
        for issue in (refused.problem or {}).get("errors") or []:
            print(f"  {issue.get('path') or '(body)'}: {issue.get('code')}: {issue.get('message')}", file=sys.stderr)
        if args.json and refused.problem is not None:
            print(json.dumps(refused.problem, indent=2))
        return refused.code
    finally:
        api.client.close()
    print(json.dumps(data, indent=2) if args.json else text)
    return EXIT_OK


__all__ = ["EXIT_CODES", "add_remote_commands", "exit_code_of", "run_remote"]
