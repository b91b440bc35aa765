"""The notice template texts: what a realm may write, the messages it is told, and the rendering."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from engine.directory.notice_templates import (
    MAX_BODY,
    MAX_SUBJECT,
    NOTICE_TEXTS,
    check_template,
    format_time,
    preview,
    render,
    render_workflow_notice,
    template_issues,
)
from engine.platform.errors import ValidationFailed

PLACEHOLDERS = "{{realm}}, {{workflow}}, {{notice}}, {{time}}"


def told(source: str, *, maximum: int = 100, one_line: bool = False) -> list[tuple[str, str, str]]:
    return [(i.path, i.code, i.message) for i in template_issues("/t", source, maximum=maximum, one_line=one_line)]


def test_a_text_of_the_four_placeholders_passes() -> None:
    assert told("{{realm}} {{ workflow }}: {{notice}} at {{time}}", one_line=True) == []
    assert told("x" * 100) == []


def test_length_and_line_breaks_are_told_with_their_limit() -> None:
    assert told(" \n ") == [("/t", "too_short", "must not be empty")]
    assert told("x" * 101) == [("/t", "too_long", "must be at most 100 characters")]
    for broken in ("a\nb", "a\rb", "a\r\nb"):
        assert told(broken, one_line=True) == [("/t", "invalid", "must not contain line breaks")]
        assert told(broken) == []


def test_anything_but_the_placeholders_is_told_by_line_with_the_list_of_placeholders() -> None:
    assert told("ok\n{{ notice }\n") == [("/t", "template_syntax", "line 2: unexpected '}'")]
    assert told("ok\n\n{% if notice %}x{% endif %}") == [
        ("/t", "invalid_placeholder", f"line 3: tags are not allowed; use only the placeholders {PLACEHOLDERS}")
    ]
    assert told("{{realm}}\n{{ user }}") == [
        ("/t", "invalid_placeholder", f"line 2: {{{{user}}}} is not allowed; use only the placeholders {PLACEHOLDERS}")
    ]
    for expression in ("{{ realm|upper }}", "{{ realm.__class__ }}", "{{ 'x' }}"):
        assert told(expression) == [
            (
                "/t",
                "invalid_placeholder",
                f"line 1: this expression is not allowed; use only the placeholders {PLACEHOLDERS}",
            )
        ]


def test_the_subject_and_the_body_are_checked_together_at_their_own_limits() -> None:
    check_template("s" * MAX_SUBJECT, "b" * MAX_BODY)
    with pytest.raises(ValidationFailed) as refused:
        check_template("s" * (MAX_SUBJECT + 1) + "\n", "b" * (MAX_BODY + 1))
    assert refused.value.detail == "The template is not valid."
    assert [(i.path, i.code, i.message) for i in refused.value.issues] == [
        ("/subject", "too_long", f"must be at most {MAX_SUBJECT} characters"),
        ("/body", "too_long", f"must be at most {MAX_BODY} characters"),
    ]
    with pytest.raises(ValidationFailed) as one_line:
        check_template("a\nb", "a\nb")
    assert [(i.path, i.code) for i in one_line.value.issues] == [("/subject", "invalid")]


def test_values_are_escaped_in_the_body_and_flattened_in_the_subject() -> None:
    rendered = render(" {{workflow}} ", "<p>{{workflow}}</p>", {"workflow": "A <b>\n  &\tB"})
    assert rendered.subject == "A <b> & B"
    assert rendered.body == "<p>A &lt;b&gt;\n  &amp;\tB</p>"


def test_times_are_shown_in_utc_to_the_minute() -> None:
    assert format_time(datetime(2026, 10, 11, 11, 5, 59, tzinfo=timezone(timedelta(hours=2)))) == "2026-10-11 09:05 UTC"


def test_the_preview_is_a_sample_workflow_in_the_realm() -> None:
    at = datetime(2026, 10, 11, 9, 0, tzinfo=UTC)
    shown = preview("{{realm}} | {{workflow}} | {{time}}", "{{notice}}", "Acme", at=at)
    assert shown.subject == "Acme | Onboarding | 2026-10-11 09:00 UTC"
    assert shown.body == "Welcome! Your account is ready to use."
    with pytest.raises(ValidationFailed):
        preview("{{ user }}", "x", "Acme", at=at)


def test_a_workflow_notice_falls_back_to_the_default_wording_when_the_stored_one_is_not_valid() -> None:
    at = datetime(2026, 10, 11, 9, 0, tzinfo=UTC)
    default = render_workflow_notice("Acme", None, "Leavers", "offboarding", at)
    assert default.subject == "Acme: Your access is being removed as you leave."
    assert default.body == (
        "Hello,\n\nYour access is being removed as you leave.\n\n"
        'This message was sent by the workflow "Leavers" of Acme on 2026-10-11 09:00 UTC.\n'
        "If something here looks wrong, contact the administrators of Acme."
    )
    assert render_workflow_notice("Acme", ("{{ user }}", "{{notice}}"), "Leavers", "offboarding", at) == default
    assert render_workflow_notice("Acme", ("s\nt", "{{notice}}"), "Leavers", "offboarding", at) == default
    own = render_workflow_notice("Acme", ("{{workflow}}", "{{notice}} {{time}}"), "Leavers", "welcome", at)
    assert (own.subject, own.body) == ("Leavers", f"{NOTICE_TEXTS['welcome']} 2026-10-11 09:00 UTC")
