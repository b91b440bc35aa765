"""Workflow pages: the list, a new workflow, its overview, the definition editor, revisions and diffs.

The editor keeps the definition as the text the person typed. As they type, htmx posts the text
to ``…/edit/validate`` (debounced); the answer lists every issue with its JSON path and the line
of the text it belongs to (:func:`pointer_lines` walks the text and notes where each value
starts), and refreshes the structured preview whenever the text parses. Saving stages a new
draft revision through the same service as the API, so the same issues come back with the same
paths.

A revision's page compares it with the published revision (or any other, ``?against=``), step
by step and line by line, and offers the decisions its status allows: approve, reject, publish,
roll back. Service errors (separation of duties, approval required, the delegation ceiling with
the steps it names, conflicts) are shown on the page with the API's codes and paths.

Permissions are those of the API: ``realm.workflows.read`` to read, ``realm.workflows.write``
to create, edit and disable, ``realm.workflows.publish`` to approve, reject, publish, roll back,
enable and delete.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from cockpit import health_cache
from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.names import Named, ids_in, resolve_names
from cockpit.pages.common import form_errors, page
from cockpit.pages.workflows import builder
from cockpit.state import AnyRequest, DbSession
from engine.directory import principals as directory
from engine.directory.identity import now as utc_now
from engine.directory.policy import publish_approval_required
from engine.platform.errors import EngineError, Issue, NotFound, ValidationFailed
from engine.runs import schedules
from engine.workflows import service as workflows
from engine.workflows.definitions import MAX_DEFINITION_BYTES, authored_json
from engine.workflows.definitions.diff import line_diff, structured_diff
from engine.workflows.models import WORKFLOW_STATES, Workflow, WorkflowRevision

TABLE_ID = "workflows-table"
STATE_ID = "workflow-state"
FEEDBACK_ID = "editor-feedback"
DIFF_ID = "revision-diff"
PICKER_LIMIT = 200
MAX_TEXT_BYTES = 4 * MAX_DEFINITION_BYTES  # room for indentation; the service enforces the real limit
DIFF_CONTEXT = 3

READ = {"permission": "realm.workflows.read"}
WRITE = {"permission": "realm.workflows.write"}
PUBLISH = {"permission": "realm.workflows.publish"}

SKELETON: dict[str, Any] = {
    "schema_version": 1,
    "triggers": [{"type": "manual"}],
    "steps": [{"id": "done", "type": "end"}],
}

FLASHES = {
    "created": "Workflow created.",
    "deleted": "Workflow deleted.",
    "staged": "Saved as a new draft revision.",
    "approved": "Revision approved.",
    "rejected": "Revision rejected.",
    "published": "Revision published.",
    "rolled-back": "Rolled back: this revision is published again.",
}


def targets(request: AnyRequest, element_id: str) -> bool:
    """An htmx request for one component (not a boosted page load)."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-target") == element_id


def may(principal: Principal, permission: str) -> bool:
    return principal.authority is not None and principal.authority.holds(permission)


def flash_of(request: AnyRequest) -> str | None:
    return FLASHES.get(request.query_params.get("done") or "")


def field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


# --- From a JSON pointer to a line of the text ----------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def pointer_lines(text: str) -> dict[str, int]:
    """Where each value of a JSON text begins: JSON pointer → line (1-based).

    An object member is placed on the line of its key, an array item on the line where the item
    starts, the whole document on its first line. A repeated key keeps the last occurrence, as
    ``json.loads`` does. Meant for text that parses; for anything else the answer is partial.
    The walk keeps its own stack, so nesting depth is bounded only by what ``json.loads`` accepts.
    """
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(pos: int) -> int:
        return bisect.bisect_right(line_starts, pos)

    def ws(pos: int) -> int:
        match = _WHITESPACE.match(text, pos)
        return match.end() if match else pos

    out: dict[str, int] = {}

    def member(container: str, pos: int) -> tuple[str, int]:
        """Read ``"key" :`` at ``pos``; note the member's line; return its pointer and where its value starts."""
        if text[pos] != '"':
            raise ValueError("expected a key")
        key, end = _DECODER.raw_decode(text, pos)
        child = f"{container}/{_escape(key)}"
        if child in out:  # a repeated key: the last one wins, and what the first one held is gone
            for stale in [p for p in out if p.startswith(child + "/")]:
                del out[stale]
        out[child] = line(pos)
        colon = ws(end)
        if text[colon] != ":":
            raise ValueError("expected ':'")
        return child, ws(colon + 1)

    # Each frame: [kind ("{" or "["), pointer of the container, index of the current item].
    stack: list[list[Any]] = []
    try:
        pos = ws(0)
        pointer = ""
        out[pointer] = line(pos)
        while True:
            # A value starts at ``pos``; its pointer is ``pointer``.
            char = text[pos]
            if char == "{":
                inner = ws(pos + 1)
                if text[inner] == "}":
                    pos = inner + 1
                else:
                    stack.append(["{", pointer, 0])
                    pointer, pos = member(pointer, inner)
                    continue
            elif char == "[":
                inner = ws(pos + 1)
                if text[inner] == "]":
                    pos = inner + 1
                else:
                    stack.append(["[", pointer, 0])
                    pointer = f"{pointer}/0"
                    out[pointer] = line(inner)
                    pos = inner
                    continue
            else:
                _, pos = _DECODER.raw_decode(text, pos)
            # The value ended: close containers until one has a next item.
            while True:
                pos = ws(pos)
                if not stack:
                    return out
                frame = stack[-1]
                if text[pos] == ",":
                    nxt = ws(pos + 1)
                    if frame[0] == "{":
                        pointer, pos = member(frame[1], nxt)
                    else:
                        frame[2] += 1
                        pointer = f"{frame[1]}/{frame[2]}"
                        out[pointer] = line(nxt)
                        pos = nxt
                    break
                if text[pos] not in "}]":
                    raise ValueError("expected a separator or the end of a container")
                stack.pop()
                pos += 1
    except (IndexError, ValueError):
        return out


def line_of(lines: Mapping[str, int], pointer: str) -> int | None:
    """The line of ``pointer``, or of its nearest ancestor present in the text (a missing member)."""
    while True:
        if pointer in lines:
            return lines[pointer]
        if not pointer:
            return None
        pointer = pointer.rsplit("/", 1)[0]


# --- The definition as text -----------------------------------------------------------------------


@dataclass(frozen=True)
class EditorIssue:
    """One issue as the API reports it (``path`` under ``/definition``), placed on a line of the text."""

    path: str
    code: str
    message: str
    line: int | None = None
    column: int | None = None
    field: str | None = None  # the id of the builder control it is about (its field, or its step)

    @property
    def step_label(self) -> str | None:
        """``definition.steps[2]`` for an issue about a step (as the API's 403 detail names it)."""
        match = re.match(r"^/definition/steps/(\d+)", self.path)
        return f"definition.steps[{match.group(1)}]" if match else None


@dataclass
class ParsedText:
    text: str
    value: Any = None
    parsed: bool = False
    issues: tuple[EditorIssue, ...] = ()


def trailing_comma(text: str, pos: int) -> tuple[int, int] | None:
    """Line and column of a comma right before a closing ``]`` or ``}`` at ``pos`` (the fault JSON reports).

    The decoder reports the fault where it expected the next item, which is the line of the
    closing bracket; the mistake is the comma, often on the line before.
    """
    if pos >= len(text) or text[pos] not in "]}":
        return None
    before = pos - 1
    while before >= 0 and text[before] in " \t\r\n":
        before -= 1
    if before < 0 or text[before] != ",":
        return None
    line = text.count("\n", 0, before) + 1
    column = before - (text.rfind("\n", 0, before) + 1) + 1
    return line, column


def parse_text(text: str) -> ParsedText:
    """Parse the editor's text; a text that is not JSON gives one issue at the line and column of the fault."""
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        issue = EditorIssue(
            "/definition",
            "too_large",
            f"The text is over {MAX_TEXT_BYTES // 1024} KiB; a definition's canonical JSON has at most "
            f"{MAX_DEFINITION_BYTES // 1024} KiB.",
            line=1,
        )
        return ParsedText(text, issues=(issue,))
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        comma = trailing_comma(text, exc.pos)
        if comma is not None:
            line, column = comma
            issue = EditorIssue(
                "/definition",
                "invalid_json",
                f"This is not valid JSON: a trailing comma before the end of a list or object "
                f"(line {line}, column {column}).",
                line=line,
                column=column,
            )
        else:
            issue = EditorIssue(
                "/definition",
                "invalid_json",
                f"This is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).",
                line=exc.lineno,
                column=exc.colno,
            )
        return ParsedText(text, issues=(issue,))
    except RecursionError:
        issue = EditorIssue("/definition", "too_deep", "Values are nested too deeply to read.", line=1)
        return ParsedText(text, issues=(issue,))
    except ValueError as exc:  # e.g. an integer with thousands of digits
        issue = EditorIssue("/definition", "invalid_json", f"This JSON cannot be read: {exc}.", line=1)
        return ParsedText(text, issues=(issue,))
    return ParsedText(text, value=value, parsed=True)


def place(issues: Iterable[Issue], text: str, *, prefix: str = "/definition") -> tuple[EditorIssue, ...]:
    """Issues under ``prefix`` placed on the lines of ``text``; other issues keep no line."""
    lines = pointer_lines(text)
    try:
        fields = builder.field_pointers(json.loads(text))
    except (ValueError, RecursionError):
        fields = set()
    placed: list[EditorIssue] = []
    for issue in issues:
        line = None
        if issue.path == prefix or issue.path.startswith(prefix + "/"):
            line = line_of(lines, issue.path[len(prefix) :])
        field = builder.nearest_field(fields, issue.path, prefix)
        placed.append(EditorIssue(issue.path, issue.code, issue.message, line=line, field=field))
    return tuple(placed)


def builder_context(value: Any, parsed: bool, issues: Sequence[EditorIssue]) -> dict[str, Any]:
    """What ``_builder.html`` needs: the cards, each field's issues, the contract's types."""
    field_issues: dict[str, list[str]] = {}
    for issue in issues:
        if issue.field:
            field_issues.setdefault(issue.field, []).append(issue.message)
    return {
        "shown": builder.cards(value) if parsed else None,
        "field_issues": field_issues,
        "step_types": builder.step_types(),
        "trigger_types": builder.trigger_types(),
        "builder_id": builder.field_id,
    }


async def check_text(db_session: DbSession, realm_id: str, text: str) -> ParsedText:
    """The text parsed and validated against the contract and the realm, every issue on its line."""
    parsed = parse_text(text)
    if not parsed.parsed:
        return parsed
    found = await workflows.validate_for_realm(db_session, realm_id, parsed.value)
    parsed.issues = place(workflows.prefixed(found, "/definition"), text)
    return parsed


def compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    except (TypeError, ValueError):
        return repr(value)


def _members(item: Mapping[str, Any], skip: Sequence[str]) -> list[tuple[str, str]]:
    return [(str(k), compact(v)) for k, v in item.items() if k not in skip]


def outline(definition: Any) -> dict[str, Any] | None:
    """Triggers and steps with their key members, for the preview beside the editor (any shape)."""
    if not isinstance(definition, dict):
        return None

    def items(name: str) -> list[Any]:
        value = definition.get(name)
        return value if isinstance(value, list) else []

    triggers = []
    for index, trigger in enumerate(items("triggers")):
        if isinstance(trigger, dict):
            triggers.append(
                {"index": index, "type": compact(trigger.get("type", "?")), "members": _members(trigger, ("type",))}
            )
        else:
            triggers.append({"index": index, "type": "?", "members": [("value", compact(trigger))]})
    steps = []
    for index, step in enumerate(items("steps")):
        if isinstance(step, dict):
            steps.append(
                {
                    "index": index,
                    "id": compact(step.get("id", "")),
                    "type": compact(step.get("type", "?")),
                    "members": _members(step, ("id", "type")),
                }
            )
        else:
            steps.append({"index": index, "id": "", "type": "?", "members": [("value", compact(step))]})
    retry = definition.get("retry")
    return {
        "schema_version": compact(definition.get("schema_version", "—")),
        "triggers": triggers,
        "steps": steps,
        "retry": compact(retry) if retry is not None else None,
    }


def line_count(text: str) -> int:
    return text.count("\n") + 1


# --- Diffs ----------------------------------------------------------------------------------------


def side_by_side(runs: Sequence[Mapping[str, Any]], context: int = DIFF_CONTEXT) -> list[dict[str, Any]]:
    """Rows of a two-column diff: unchanged lines folded beyond ``context`` lines of a change.

    Each row is ``{"kind": "equal"|"insert"|"delete"|"replace"|"fold", "old_no", "old", "new_no",
    "new"}``; a fold row carries ``count``, the number of unchanged lines it hides.
    """
    rows: list[dict[str, Any]] = []
    for position, run in enumerate(runs):
        op, old, new = run["op"], list(run["old_lines"]), list(run["new_lines"])
        o, n = run["old_start"], run["new_start"]
        if op == "equal":
            keep_head = context if position > 0 else 0
            keep_tail = context if position < len(runs) - 1 else 0
            indexes = list(range(len(old)))
            if len(old) > keep_head + keep_tail + 1:
                shown = indexes[:keep_head]
                tail = indexes[len(old) - keep_tail :] if keep_tail else []
                for i in shown:
                    rows.append({"kind": "equal", "old_no": o + i, "old": old[i], "new_no": n + i, "new": new[i]})
                rows.append({"kind": "fold", "count": len(old) - len(shown) - len(tail)})
                for i in tail:
                    rows.append({"kind": "equal", "old_no": o + i, "old": old[i], "new_no": n + i, "new": new[i]})
            else:
                for i in indexes:
                    rows.append({"kind": "equal", "old_no": o + i, "old": old[i], "new_no": n + i, "new": new[i]})
            continue
        for i in range(max(len(old), len(new))):
            rows.append(
                {
                    "kind": op,
                    "old_no": o + i if i < len(old) else None,
                    "old": old[i] if i < len(old) else None,
                    "new_no": n + i if i < len(new) else None,
                    "new": new[i] if i < len(new) else None,
                }
            )
    return rows


def default_against(workflow: Workflow, number: int) -> int | None:
    """The published revision, or the one before when this is the published one (None for the first)."""
    if workflow.published_revision is not None and workflow.published_revision != number:
        return workflow.published_revision
    return number - 1 if number > 1 else None


async def display_names(db_session: DbSession, realm: Any, ids: Iterable[str | None]) -> dict[str, Named]:
    """Names of the objects among ``ids`` (users, roles, groups, …) with links: one statement."""
    return await resolve_names(db_session, realm.id, ids, slug=realm.slug)


def as_authored(revision: WorkflowRevision) -> Any:
    """The definition in its author's key order (revisions saved before that was kept: sorted)."""
    return revision.authored if revision.authored is not None else revision.definition


def action_error(exc: EngineError, definition: Any | None = None) -> dict[str, Any]:
    """A service error as the revision page shows it: the API's code, detail and paths."""
    text = authored_json(definition) if definition is not None else ""
    issues = place(exc.issues, text) if text else tuple(EditorIssue(i.path, i.code, i.message) for i in exc.issues)
    return {"status": exc.status, "code": exc.code, "detail": exc.detail, "issues": issues}


# --- The pages ------------------------------------------------------------------------------------


class WorkflowsPages(Controller):
    path = "/realms/{realm:str}/workflows"
    include_in_schema = False

    # --- The list ---------------------------------------------------------------------------------

    @get("/", operation_id="workflowsPage", opt=READ | {"reads_only": True})
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        # ``state`` is a reserved handler parameter name in Litestar: read it from the query.
        state = request.query_params.get("state") or ""
        q = (q or "").strip()[:200]
        status_code = 200
        try:
            found = await workflows.list_workflows(
                db_session, principal.realm.id, state=state or None, q=q or None, cursor=cursor or None
            )
            items, next_cursor, list_error = found.items, found.next_cursor, None
        except EngineError as exc:
            items, next_cursor = [], None
            list_error = "; ".join(i.message for i in exc.issues) or exc.detail
            status_code = exc.status
        template = "pages/workflows/_table.html" if targets(request, TABLE_ID) else "pages/workflows/list.html"
        return page(
            request,
            template,
            nav="workflows",
            status_code=status_code,
            workflows=items,
            next_cursor=next_cursor,
            q=q,
            state=state,
            states=WORKFLOW_STATES,
            list_error=list_error,
            names=await display_names(db_session, principal.realm, (w.owner_id for w in items)),
            health=await health_cache.health_of(db_session, principal.realm.id, [w.id for w in items]),
            reviews=await workflows.revisions_waiting_for_review(
                db_session, principal.realm.id, [w.id for w in items], principal.id
            )
            if may(principal, "realm.workflows.publish")
            else {},
            can_create=may(principal, "realm.workflows.write"),
            flash=flash_of(request),
        )

    # --- A new workflow ---------------------------------------------------------------------------

    async def _new(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        form: dict[str, Any] | None = None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        policy_default = await publish_approval_required(db_session, realm_id)
        users = (await directory.list_users(db_session, realm_id, status="active", limit=PICKER_LIMIT)).items
        return page(
            request,
            "pages/workflows/new.html",
            nav="workflows",
            status_code=status_code,
            users=users,
            policy_default=policy_default,
            form=form
            or {
                "name": "",
                "description": "",
                "owner_id": principal.id,
                "requires_approval": policy_default,
                "definition": "",
            },
            **context,
        )

    @get("/new", operation_id="workflowNewPage", opt=WRITE)
    async def new_page(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Template:
        return await self._new(request, db_session, principal)

    @post("/new", operation_id="workflowNewPageCreate", opt=WRITE, status_code=303)
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Response[Any]:
        data = await request.form()
        text = field(data, "definition")
        form: dict[str, Any] = {
            "name": field(data, "name"),
            "description": field(data, "description"),
            "owner_id": field(data, "owner_id"),
            # The realm policy is a floor: the page shows the box ticked and locked.
            "requires_approval": bool(field(data, "requires_approval"))
            or await publish_approval_required(db_session, principal.realm.id),
            "definition": text,
        }
        parsed = parse_text(text) if text.strip() else None
        try:
            if parsed is not None and not parsed.parsed:
                raise ValidationFailed(
                    "The request is not valid.", issues=[Issue(i.path, i.code, i.message) for i in parsed.issues]
                )
            async with db_session.begin_nested():  # an error undoes only this change
                workflow, _ = await workflows.create_workflow(
                    db_session,
                    principal.actor(request_id_of(request)),
                    name=form["name"],
                    description=form["description"],
                    owner_id=form["owner_id"] or None,
                    requires_approval=form["requires_approval"],
                    definition=parsed.value if parsed else None,
                    has_definition=parsed is not None,
                )
        except EngineError as exc:
            definition_issues = (
                parsed.issues
                if parsed is not None and not parsed.parsed
                else place([i for i in exc.issues if i.path.startswith("/definition")], text)
            )
            errors = form_errors(exc)
            if exc.issues:
                errors["error"] = "Check the fields marked below."
            return await self._new(
                request,
                db_session,
                principal,
                form=form,
                status_code=exc.status,
                definition_issues=definition_issues,
                **errors,
            )
        return Redirect(f"/realms/{principal.realm.slug}/workflows/{workflow.id}/edit?done=created", status_code=303)

    # --- One workflow -----------------------------------------------------------------------------

    async def _detail(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        await db_session.refresh(workflow)  # current values, also after a change that was undone
        common = {
            "workflow": workflow,
            "can_write": may(principal, "realm.workflows.write"),
            "can_publish": may(principal, "realm.workflows.publish"),
        }
        if targets(request, STATE_ID):
            return page(
                request, "pages/workflows/_state.html", nav="workflows", status_code=status_code, **common, **context
            )
        revisions = await workflows.list_revisions(db_session, realm_id, workflow.id)
        names = await display_names(
            db_session,
            principal.realm,
            [workflow.owner_id, workflow.created_by]
            + [r.author_id for r in revisions]
            + [r.decided_by for r in revisions],
        )
        context.setdefault("flash", flash_of(request))
        published = next((r for r in revisions if r.number == workflow.published_revision), None)
        schedule_lines = await schedules.schedule_status(db_session, workflow, published, utc_now())
        # Health: what the published revision names must still be there, or its runs fail at that step.
        health = (
            [i for i in await workflows.validate_for_realm(db_session, realm_id, published.definition)]
            if published is not None and workflow.state != "deleted"
            else []
        )
        return page(
            request,
            "pages/workflows/detail.html",
            health_issues=health,
            nav="workflows",
            status_code=status_code,
            revisions=revisions,
            names=names,
            schedules=schedule_lines,
            schedule_names=await schedules.selector_names(db_session, realm_id, [s.selector for s in schedule_lines]),
            **common,
            **context,
        )

    @get("/{workflow_id:str}", operation_id="workflowPage", opt=READ)
    async def detail(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        return await self._detail(request, db_session, principal, workflow_id)

    async def _set_enabled(
        self, request: AnyRequest, workflow_id: str, db_session: DbSession, principal: Principal, enabled: bool
    ) -> Response[Any]:
        await workflows.get_workflow(db_session, principal.realm.id, workflow_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                workflow = await workflows.set_enabled(
                    db_session, principal.actor(request_id_of(request)), workflow_id, enabled
                )
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, workflow_id, status_code=exc.status, state_error=exc.detail
            )
        if targets(request, STATE_ID):
            done = "Enabled." if enabled else "Disabled: nothing fires, and runs in flight pause."
            return await self._detail(request, db_session, principal, workflow.id, state_flash=done)
        return Redirect(f"/realms/{principal.realm.slug}/workflows/{workflow.id}", status_code=303)

    @post("/{workflow_id:str}/enable", operation_id="workflowPageEnable", opt=PUBLISH)
    async def enable(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        return await self._set_enabled(request, workflow_id, db_session, principal, True)

    @post("/{workflow_id:str}/disable", operation_id="workflowPageDisable", opt=WRITE)
    async def disable(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        return await self._set_enabled(request, workflow_id, db_session, principal, False)

    @post("/{workflow_id:str}/delete", operation_id="workflowPageDelete", opt=PUBLISH, status_code=303)
    async def remove(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        await workflows.get_workflow(db_session, principal.realm.id, workflow_id)
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                await workflows.delete_workflow(db_session, principal.actor(request_id_of(request)), workflow_id)
        except EngineError as exc:
            return await self._detail(
                request, db_session, principal, workflow_id, status_code=exc.status, error=exc.detail
            )
        return Redirect(f"/realms/{principal.realm.slug}/workflows?done=deleted", status_code=303)

    # --- The editor -------------------------------------------------------------------------------

    async def _editor(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow: Workflow,
        checked: ParsedText,
        *,
        base: WorkflowRevision | None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        return page(
            request,
            "pages/workflows/editor.html",
            nav="workflows",
            status_code=status_code,
            workflow=workflow,
            base=base,
            text=checked.text,
            issues=checked.issues,
            parsed=checked.parsed,
            preview=outline(checked.value) if checked.parsed else None,
            names=await display_names(db_session, principal.realm, ids_in(checked.value)),
            lines=line_count(checked.text),
            **builder_context(checked.value, checked.parsed, checked.issues),
            flash=context.pop("flash", None) or flash_of(request),
            **context,
        )

    @get("/{workflow_id:str}/edit", operation_id="workflowEditorPage", opt=WRITE)
    async def editor(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        from_revision: Annotated[int | None, QueryParameter(name="from")] = None,
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        base: WorkflowRevision | None
        if from_revision is not None:
            base = await workflows.get_revision(db_session, realm_id, workflow.id, from_revision)
        else:
            revisions = await workflows.list_revisions(db_session, realm_id, workflow.id)
            base = revisions[0] if revisions else None
        text = authored_json(as_authored(base) if base is not None else SKELETON)
        checked = await check_text(db_session, realm_id, text)
        return await self._editor(request, db_session, principal, workflow, checked, base=base)

    @post("/{workflow_id:str}/edit/validate", operation_id="workflowEditorValidate", opt=WRITE, status_code=200)
    async def validate(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        """Changes nothing: the issues of the text as typed, and the preview when it parses."""
        workflow = await workflows.get_workflow(db_session, principal.realm.id, workflow_id)
        text = field(await request.form(), "definition")
        checked = await check_text(db_session, principal.realm.id, text)
        return page(
            request,
            "pages/workflows/_feedback.html",
            nav="workflows",
            issues=checked.issues,
            parsed=checked.parsed,
            preview=outline(checked.value) if checked.parsed else None,
            names=await display_names(db_session, principal.realm, ids_in(checked.value)),
            lines=line_count(text),
            workflow=workflow,
            oob=True,
            **builder_context(checked.value, checked.parsed, checked.issues),
        )

    @post("/{workflow_id:str}/edit/builder", operation_id="workflowEditorBuilder", opt=WRITE, status_code=200)
    async def build(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        """Changes nothing stored: one builder change applied to the text, which comes back with it."""
        workflow = await workflows.get_workflow(db_session, principal.realm.id, workflow_id)
        form = await request.form()
        text = field(form, "definition")
        values = [v for v in form.getall("value") if isinstance(v, str)] if "value" in form else []
        builder_error: str | None = None
        status_code = 200
        try:
            text = builder.change_text(text, field(form, "op"), field(form, "pointer"), values)
        except builder.BuilderError as exc:
            builder_error, status_code = exc.message, 422
        checked = await check_text(db_session, principal.realm.id, text)
        return page(
            request,
            "pages/workflows/_builder_response.html",
            nav="workflows",
            status_code=status_code,
            workflow=workflow,
            text=text,
            issues=checked.issues,
            parsed=checked.parsed,
            preview=outline(checked.value) if checked.parsed else None,
            names=await display_names(db_session, principal.realm, ids_in(checked.value)),
            lines=line_count(text),
            builder_error=builder_error,
            **builder_context(checked.value, checked.parsed, checked.issues),
        )

    @post("/{workflow_id:str}/edit", operation_id="workflowEditorSave", opt=WRITE, status_code=303)
    async def save(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        data = await request.form()
        text = field(data, "definition")
        base_number = field(data, "base")
        parsed = parse_text(text)
        error: str | None = None
        status_code = 422
        if parsed.parsed:
            try:
                async with db_session.begin_nested():  # an error undoes only this change
                    revision = await workflows.stage_revision(
                        db_session, principal.actor(request_id_of(request)), workflow.id, parsed.value
                    )
            except EngineError as exc:
                parsed.issues = place(exc.issues, text)
                error, status_code = exc.detail, exc.status
            else:
                return Redirect(
                    f"/realms/{principal.realm.slug}/workflows/{workflow.id}/revisions/{revision.number}?done=staged",
                    status_code=303,
                )
        base = None
        if base_number.isdigit():
            try:
                base = await workflows.get_revision(db_session, realm_id, workflow.id, int(base_number))
            except NotFound:
                base = None
        await db_session.refresh(workflow)
        return await self._editor(
            request,
            db_session,
            principal,
            workflow,
            parsed,
            base=base,
            status_code=status_code,
            error=error or "The definition was not saved: fix the errors below.",
        )

    # --- Revisions --------------------------------------------------------------------------------

    @get("/{workflow_id:str}/revisions", operation_id="workflowRevisionsPage", opt=READ)
    async def revisions(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        revisions = await workflows.list_revisions(db_session, realm_id, workflow.id)
        names = await display_names(
            db_session, principal.realm, [r.author_id for r in revisions] + [r.decided_by for r in revisions]
        )
        return page(
            request,
            "pages/workflows/revisions.html",
            nav="workflows",
            workflow=workflow,
            revisions=revisions,
            names=names,
            can_write=may(principal, "realm.workflows.write"),
        )

    async def _revision(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        workflow_id: str,
        number: int,
        *,
        against: int | None = None,
        status_code: int = 200,
        **context: Any,
    ) -> Template:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        await db_session.refresh(workflow)  # current values, also after a change that was undone
        revision = await workflows.get_revision(db_session, realm_id, workflow.id, number)
        await db_session.refresh(revision)
        all_revisions = await workflows.list_revisions(db_session, realm_id, workflow.id)
        compare_to = against if against is not None else default_against(workflow, number)
        diff: dict[str, Any] | None = None
        other_definition: Any = None
        if compare_to is not None:
            other = await workflows.get_revision(db_session, realm_id, workflow.id, compare_to)
            diff = {
                "against": compare_to,
                "against_status": other.status,
                "structured": structured_diff(other.definition, revision.definition),
                "rows": side_by_side(line_diff(other.definition, revision.definition)),
            }
            other_definition = other.definition
        definition_text = authored_json(as_authored(revision))
        fragment = targets(request, DIFF_ID)
        names = await display_names(
            db_session,
            principal.realm,
            [
                revision.author_id,
                revision.decided_by,
                revision.published_by,
                *ids_in(revision.definition),
                *ids_in(other_definition),
            ],
        )
        context.setdefault("flash", flash_of(request))
        return page(
            request,
            "pages/workflows/_diff.html" if fragment else "pages/workflows/revision.html",
            nav="workflows",
            status_code=status_code,
            workflow=workflow,
            revision=revision,
            revisions=all_revisions,
            diff=diff,
            definition_lines=definition_text.splitlines(),
            names=names,
            is_author=revision.author_id == principal.id,
            can_publish=may(principal, "realm.workflows.publish"),
            can_write=may(principal, "realm.workflows.write"),
            compact=compact,
            **context,
        )

    @get("/{workflow_id:str}/revisions/{n:int}", operation_id="workflowRevisionPage", opt=READ)
    async def revision(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
        against: FromQuery[int | None] = None,
    ) -> Template:
        return await self._revision(request, db_session, principal, workflow_id, n, against=against)

    async def _decide(
        self, request: AnyRequest, workflow_id: str, number: int, db_session: DbSession, principal: Principal, verb: str
    ) -> Response[Any]:
        realm_id = principal.realm.id
        workflow = await workflows.get_workflow(db_session, realm_id, workflow_id)
        revision = await workflows.get_revision(db_session, realm_id, workflow.id, number)
        definition = as_authored(revision)
        comment = field(await request.form(), "comment").strip() or None
        actor = principal.actor(request_id_of(request))
        try:
            async with db_session.begin_nested():  # an error undoes only this change
                if verb in ("approve", "reject"):
                    await workflows.decide_revision(
                        db_session, actor, workflow.id, number, approve=verb == "approve", comment=comment
                    )
                elif verb == "publish":
                    await workflows.publish_revision(db_session, actor, workflow.id, number, comment=comment)
                else:
                    await workflows.rollback(db_session, actor, workflow.id, number)
        except EngineError as exc:
            return await self._revision(
                request,
                db_session,
                principal,
                workflow.id,
                number,
                status_code=exc.status,
                action=verb,
                action_error=action_error(exc, definition),
                comment=comment or "",
            )
        done = {"approve": "approved", "reject": "rejected", "publish": "published", "rollback": "rolled-back"}[verb]
        return Redirect(
            f"/realms/{principal.realm.slug}/workflows/{workflow.id}/revisions/{number}?done={done}", status_code=303
        )

    @post("/{workflow_id:str}/revisions/{n:int}/approve", operation_id="workflowRevisionPageApprove", opt=PUBLISH)
    async def approve(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "approve")

    @post("/{workflow_id:str}/revisions/{n:int}/reject", operation_id="workflowRevisionPageReject", opt=PUBLISH)
    async def reject(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "reject")

    @post("/{workflow_id:str}/revisions/{n:int}/publish", operation_id="workflowRevisionPagePublish", opt=PUBLISH)
    async def publish(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "publish")

    @post("/{workflow_id:str}/revisions/{n:int}/rollback", operation_id="workflowRevisionPageRollback", opt=PUBLISH)
    async def rollback(
        self,
        request: AnyRequest,
        workflow_id: FromPath[str],
        n: FromPath[int],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[Any]:
        return await self._decide(request, workflow_id, n, db_session, principal, "rollback")
