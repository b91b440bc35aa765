"""Server templates: the wording of the ``workflow_notice`` message, realm-overridable.

Workflows cannot send free text (a phishing vector): a ``notify`` step names a fixed notice
code, the server supplies the sentence, and the realm may change only the wording around it.
A template may use the placeholders ``{{realm}}``, ``{{workflow}}``, ``{{notice}}`` and
``{{time}}`` and nothing else: no filters, attributes, tags or other names. Templates are
checked on save by walking the parsed template, and rendered in Jinja's sandbox with
autoescaping (values are escaped in the body; the subject is plain text on one line).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from jinja2 import StrictUndefined, TemplateSyntaxError, nodes
from jinja2.sandbox import SandboxedEnvironment
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from engine.directory import read_models
from engine.directory.audit import Actor, record_audit
from engine.directory.models import Realm, Template
from engine.platform.clock import SYSTEM_CLOCK
from engine.platform.errors import Issue, NotFound, ValidationFailed
from engine.platform.ids import new_id

WORKFLOW_NOTICE = "workflow_notice"
TEMPLATE_NAMES = (WORKFLOW_NOTICE,)
VARIABLES = ("realm", "workflow", "notice", "time")
MAX_SUBJECT = 300
MAX_BODY = 10_000

DEFAULT_SUBJECT = "{{realm}}: {{notice}}"
DEFAULT_BODY = """Hello,

{{notice}}

This message was sent by the workflow "{{workflow}}" of {{realm}} on {{time}}.
If something here looks wrong, contact the administrators of {{realm}}."""

# The sentence behind each notice code a notify step may name (seed 000: notice codes).
NOTICE_TEXTS: dict[str, str] = {
    "welcome": "Welcome! Your account is ready to use.",
    "access_granted": "You have been given new access.",
    "access_expiring": "Some of your access will expire soon.",
    "access_removed": "Some of your access has been removed.",
    "approval_requested": "A request is waiting for your approval.",
    "account_suspended": "Your account has been suspended.",
    "offboarding": "Your access is being removed as you leave.",
}

SAMPLE_VALUES = {"workflow": "Onboarding", "notice": NOTICE_TEXTS["welcome"]}

_html = SandboxedEnvironment(autoescape=True, undefined=StrictUndefined)
_text = SandboxedEnvironment(autoescape=False, undefined=StrictUndefined)


@dataclass(frozen=True)
class RenderedNotice:
    subject: str
    body: str


def _placeholder_list() -> str:
    return ", ".join("{{" + v + "}}" for v in VARIABLES)


def template_issues(path: str, source: str, *, maximum: int, one_line: bool = False) -> list[Issue]:
    """Everything wrong with one template text: length, syntax, anything but the placeholders."""
    if not source.strip():
        return [Issue(path, "too_short", "must not be empty")]
    if len(source) > maximum:
        return [Issue(path, "too_long", f"must be at most {maximum} characters")]
    if one_line and ("\n" in source or "\r" in source):
        return [Issue(path, "invalid", "must not contain line breaks")]
    try:
        tree = _html.parse(source)
    except TemplateSyntaxError as exc:
        return [Issue(path, "template_syntax", f"line {exc.lineno}: {exc.message}")]
    for node in tree.body:
        if not isinstance(node, nodes.Output):
            return [
                Issue(
                    path,
                    "invalid_placeholder",
                    f"line {node.lineno}: tags are not allowed; use only the placeholders {_placeholder_list()}",
                )
            ]
        for part in node.nodes:
            if isinstance(part, nodes.TemplateData):
                continue
            if isinstance(part, nodes.Name) and part.name in VARIABLES:
                continue
            what = f"{{{{{part.name}}}}}" if isinstance(part, nodes.Name) else "this expression"
            return [
                Issue(
                    path,
                    "invalid_placeholder",
                    f"line {part.lineno}: {what} is not allowed; use only the placeholders {_placeholder_list()}",
                )
            ]
    return []


def check_template(subject: str, body: str) -> None:
    issues = template_issues("/subject", subject, maximum=MAX_SUBJECT, one_line=True)
    issues += template_issues("/body", body, maximum=MAX_BODY)
    if issues:
        raise ValidationFailed("The template is not valid.", issues=issues)


def render(subject: str, body: str, values: dict[str, str]) -> RenderedNotice:
    """Render checked template texts; values are escaped in the body, flattened in the subject."""
    flat = {k: " ".join(v.split()) for k, v in values.items()}
    return RenderedNotice(
        subject=_text.from_string(subject).render(flat).strip(),
        body=_html.from_string(body).render(values),
    )


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def preview(subject: str, body: str, realm_name: str, *, at: datetime | None = None) -> RenderedNotice:
    """The template as a sample workflow would send it; :class:`ValidationFailed` if it is not valid."""
    check_template(subject, body)
    return render(subject, body, {"realm": realm_name, "time": format_time(at or SYSTEM_CLOCK.now()), **SAMPLE_VALUES})


def _check_name(name: str) -> None:
    if name not in TEMPLATE_NAMES:
        raise NotFound(f"No template named {name!r}.")


async def _override(session: AsyncSession, realm_id: str, name: str) -> Template | None:
    result = await session.execute(
        select(Template).where(col(Template.realm_id) == realm_id, col(Template.name) == name)
    )
    return result.scalar_one_or_none()


def template_view(name: str, row: Template | None) -> read_models.NoticeTemplate:
    return read_models.NoticeTemplate(
        name=name,
        subject=row.subject if row else DEFAULT_SUBJECT,
        body=row.body if row else DEFAULT_BODY,
        variables=list(VARIABLES),
        overridden=row is not None,
        updated_at=row.updated_at if row else None,
        updated_by=row.updated_by if row else None,
    )


async def get_template(session: AsyncSession, realm_id: str, name: str) -> read_models.NoticeTemplate:
    _check_name(name)
    return template_view(name, await _override(session, realm_id, name))


async def put_template(
    session: AsyncSession, actor: Actor, name: str, *, subject: str, body: str
) -> read_models.NoticeTemplate:
    """Store the realm's wording (every issue reported at once; nothing stored when invalid)."""
    _check_name(name)
    check_template(subject, body)
    row = await _override(session, actor.realm_id, name)
    before = template_view(name, row)
    if row is None:
        row = Template(id=new_id("tpl"), realm_id=actor.realm_id, name=name, subject=subject, body=body)
        session.add(row)
    else:
        row.subject, row.body = subject, body
    row.updated_at = SYSTEM_CLOCK.now()
    row.updated_by = actor.id
    await session.flush()
    changed = [k for k, old, new in (("subject", before.subject, subject), ("body", before.body, body)) if old != new]
    await record_audit(
        session,
        actor,
        "template.updated",
        category="configuration",
        subject_type="template",
        subject_id=row.id,
        details={"name": name, "changed": changed},
    )
    return template_view(name, row)


async def reset_template(session: AsyncSession, actor: Actor, name: str) -> read_models.NoticeTemplate:
    """Go back to the server's default wording."""
    _check_name(name)
    row = await _override(session, actor.realm_id, name)
    if row is not None:
        await session.delete(row)
        await session.flush()
        await record_audit(
            session,
            actor,
            "template.updated",
            category="configuration",
            subject_type="template",
            subject_id=row.id,
            details={"name": name, "reset": True},
        )
    return template_view(name, None)


async def render_notice(
    session: AsyncSession, realm_id: str, workflow_name: str, notice_code: str, time: datetime
) -> RenderedNotice:
    """The ``workflow_notice`` message for one notice of one workflow, in the realm's wording."""
    if notice_code not in NOTICE_TEXTS:
        raise ValueError(f"unknown notice code {notice_code!r}")
    realm = await session.get(Realm, realm_id)
    if realm is None:
        raise NotFound("No such realm.")
    row = await _override(session, realm_id, WORKFLOW_NOTICE)
    return render_workflow_notice(
        realm.name, (row.subject, row.body) if row else None, workflow_name, notice_code, time
    )


def render_workflow_notice(
    realm_name: str, override: tuple[str, str] | None, workflow_name: str, notice_code: str, time: datetime
) -> RenderedNotice:
    """The ``workflow_notice`` message from the realm's name and its stored wording (``override``:
    subject and body, None for the default), with no I/O.

    A stored override that no longer passes the checks (it should not happen) falls back to the
    default wording rather than failing a run: the notice is mandatory.
    """
    subject, body = override or (DEFAULT_SUBJECT, DEFAULT_BODY)
    try:
        check_template(subject, body)
    except ValidationFailed:
        subject, body = DEFAULT_SUBJECT, DEFAULT_BODY
    values = {
        "realm": realm_name,
        "workflow": workflow_name,
        "notice": NOTICE_TEXTS[notice_code],
        "time": format_time(time),
    }
    return render(subject, body, values)
