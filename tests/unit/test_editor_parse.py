from __future__ import annotations

from cockpit.pages.workflows.editor_text import parse_text


def test_text_that_cannot_be_read_is_an_issue_not_an_error() -> None:
    for text in ('{"n": ' + "9" * 5000 + "}", "[" * 5000 + "]" * 5000, '{"a": }'):
        parsed = parse_text(text)
        assert not parsed.parsed and parsed.issues, text[:20]
