"""The workflow editor: the definition, its live validation, saving a draft revision."""

from __future__ import annotations

import re

from playwright.sync_api import Locator, expect

from e2e.pages.base import CockpitPage


class EditorPage(CockpitPage):
    def open(self, workflow_id: str, *, base: int | None = None) -> EditorPage:
        query = f"?from={base}" if base else ""
        self.page.goto(f"{self.root}/workflows/{workflow_id}/edit{query}")
        self.wait_until_ready()
        return self

    def wait_until_ready(self) -> None:
        expect(self.heading).to_have_text(re.compile(r"^Edit "))
        self.page.wait_for_function("() => window.cockpitEditor !== undefined")

    @property
    def definition(self) -> Locator:
        return self.page.get_by_label("Definition", exact=False).and_(self.page.get_by_role("textbox"))

    @property
    def feedback(self) -> Locator:
        """The live validation (a region named "Validation")."""
        return self.page.get_by_role("region", name="Validation")

    @property
    def error_lines(self) -> Locator:
        """The line numbers the gutter marks as wrong."""
        return self.page.get_by_test_id("error-line")

    @property
    def issues(self) -> Locator:
        return self.feedback.get_by_role("listitem")

    @property
    def preview(self) -> Locator:
        return self.page.get_by_role("complementary", name="Structure")

    def type_definition(self, text: str) -> None:
        """Replace the text and let a key go up, so the debounced validation runs."""
        self.definition.fill(text)
        self.definition.press("End")

    def go_to_line(self, line: int) -> None:
        self.feedback.get_by_role("link", name=re.compile(rf"^line {line}\b")).click()

    def selected_text(self) -> str:
        value: str = self.definition.evaluate("t => t.value.slice(t.selectionStart, t.selectionEnd)")
        return value

    def expect_valid(self) -> None:
        expect(self.feedback).to_contain_text("✓ Valid")

    def save(self) -> None:
        """Save as a new draft revision: on success the revision's page opens (see ``RevisionPage``);
        a refusal keeps the editor with the problem shown."""
        self.page.get_by_role("button", name="Save as new draft revision").click()

    # --- The step builder ---------------------------------------------------------------------

    @property
    def builder(self) -> Locator:
        """The builder beside the text (a region named "Builder")."""
        return self.page.get_by_role("region", name="Builder")

    def builder_steps(self) -> Locator:
        return self.builder.get_by_test_id("builder-step")

    def add_step(self, step_type: str) -> None:
        """Choose the type in the "Add a step" menu with the keyboard, then press "Add step"."""
        menu = self.builder.get_by_label("Add a step")
        menu.focus()
        menu.select_option(step_type)
        self.builder.get_by_role("button", name="Add step").press("Enter")

    def picker(self, field_id: str) -> Locator:
        """A picker's search box (a combobox) by the builder id of its field, e.g. ``b-steps-0-role_id``."""
        return self.page.locator(f"#{field_id}")

    def pick(self, field_id: str, query: str, option_name: str) -> None:
        """Type ``query`` in the picker, wait for ``option_name`` among the options, choose it with Enter."""
        search = self.picker(field_id)
        search.focus()
        search.press_sequentially(query, delay=20)
        listbox = self.page.locator(f"#{field_id}-list")
        expect(listbox.get_by_role("option", name=re.compile(re.escape(option_name)))).to_be_visible()
        for _ in range(25):  # a page of options at most
            if listbox.locator('[aria-selected="true"] .picker-name').inner_text().strip() == option_name:
                break
            search.press("ArrowDown")
        search.press("Enter")

    def document_overflows(self) -> bool:
        """Whether the document is wider than the viewport (a page must never scroll sideways)."""
        wider: bool = self.page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth")
        return wider
