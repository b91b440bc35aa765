"""The definition editor: the page, live validation as the person types, the builder, saving.

The editor keeps the definition as the text the person typed. As they type, htmx posts the text
to ``…/edit/validate`` (debounced); the answer lists every issue with its JSON path and the line
of the text it belongs to (see :mod:`cockpit.pages.workflows.editor_text`), and refreshes the
structured preview whenever the text parses. Each change made in the builder posts to
``…/edit/builder`` and comes back with the text. Saving stages a new draft revision through the
same service as the API, so the same issues come back with the same paths.

Templates: ``pages/workflows/editor.html``; fragments ``_feedback.html`` (validation),
``_builder_response.html`` (a builder change), ``_builder.html``, ``_textarea.html``,
``_issues.html``, ``_preview.html``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.names import ids_in
from cockpit.pages.common import field, page
from cockpit.pages.workflows import builder
from cockpit.pages.workflows.editor_text import EditorIssue, ParsedText, parse_text, place
from cockpit.pages.workflows.shared import WRITE, as_authored, compact, display_names, flash_of
from cockpit.state import AnyRequest, DbSession
from engine.platform.errors import EngineError, NotFound
from engine.workflows.definitions import authored_json
from engine.workflows.inputs import prefixed
from engine.workflows.lookup import get_revision, get_workflow
from engine.workflows.models import Workflow, WorkflowRevision
from engine.workflows.publication import approval_needed
from engine.workflows.references import validate_for_realm
from engine.workflows.revisions import list_revisions, stage_revision
from engine.workflows.templates import workflow_template

SKELETON: dict[str, Any] = {
    "schema_version": 1,
    "triggers": [{"type": "manual"}],
    "steps": [{"id": "done", "type": "end"}],
}


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
    found = await validate_for_realm(db_session, realm_id, parsed.value)
    parsed.issues = place(prefixed(found, "/definition"), text)
    return parsed


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


class WorkflowEditorPages(Controller):
    path = "/realms/{realm:str}/workflows"
    include_in_schema = False

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
            approval_needed=await approval_needed(db_session, workflow),
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
        template: Annotated[str | None, QueryParameter(name="template")] = None,
    ) -> Template:
        """The latest revision's text (or revision ``?from=``'s), or a template's (``?template=``):
        then nothing is saved until the author saves, and validation names what is left to choose."""
        realm_id = principal.realm.id
        workflow = await get_workflow(db_session, realm_id, workflow_id)
        base: WorkflowRevision | None
        if from_revision is not None:
            base = await get_revision(db_session, realm_id, workflow.id, from_revision)
        else:
            revisions = await list_revisions(db_session, realm_id, workflow.id)
            base = revisions[0] if revisions else None
        chosen = workflow_template(template) if template and from_revision is None else None
        if chosen is not None:
            text = authored_json(chosen.definition)
        else:
            text = authored_json(as_authored(base) if base is not None else SKELETON)
        checked = await check_text(db_session, realm_id, text)
        return await self._editor(request, db_session, principal, workflow, checked, base=base, from_template=chosen)

    @post("/{workflow_id:str}/edit/validate", operation_id="workflowEditorValidate", opt=WRITE, status_code=200)
    async def validate(
        self, request: AnyRequest, workflow_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        """Changes nothing: the issues of the text as typed, and the preview when it parses."""
        workflow = await get_workflow(db_session, principal.realm.id, workflow_id)
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
        workflow = await get_workflow(db_session, principal.realm.id, workflow_id)
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
        workflow = await get_workflow(db_session, realm_id, workflow_id)
        data = await request.form()
        text = field(data, "definition")
        base_number = field(data, "base")
        parsed = parse_text(text)
        error: str | None = None
        status_code = 422
        if parsed.parsed:
            try:
                async with db_session.begin_nested():  # an error undoes only this change
                    staged = await stage_revision(
                        db_session, principal.actor(request_id_of(request)), workflow.id, parsed.value
                    )
            except EngineError as exc:
                parsed.issues = place(exc.issues, text)
                error, status_code = exc.detail, exc.status
            else:
                done = "unchanged" if staged.unchanged else "staged"
                return Redirect(
                    f"/realms/{principal.realm.slug}/workflows/{workflow.id}/revisions/{staged.revision.number}"
                    f"?done={done}",
                    status_code=303,
                )
        base = None
        if base_number.isdigit():
            try:
                base = await get_revision(db_session, realm_id, workflow.id, int(base_number))
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
