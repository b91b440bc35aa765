"""Page objects for the cockpit's main pages, for the suite and for QA's own flows.

Each wraps a Playwright ``Page`` and the realm's slug, navigates with paths relative to the
context's ``base_url``, and locates elements by role and accessible name first; where a role is
not enough, by the ``data-testid`` the templates put on them (timeline steps and attempts,
state badges, KPI tiles, table rows). Never by CSS class or position.

    home = RealmHome(page, "acme").open()
    editor = WorkflowsPage(page, "acme").open().create("Onboarding", definition=MINIMAL)

There is no page object for approvals yet: the approver's self-service page does not exist.
"""

from e2e.pages.base import CockpitPage, sign_in_with_link
from e2e.pages.editor import EditorPage
from e2e.pages.home import RealmHome
from e2e.pages.revision import RevisionPage
from e2e.pages.runs import RunsPage
from e2e.pages.timeline import TimelinePage
from e2e.pages.users import UserPage, UsersPage
from e2e.pages.workflows import WorkflowPage, WorkflowsPage

__all__ = [
    "CockpitPage",
    "EditorPage",
    "RealmHome",
    "RevisionPage",
    "RunsPage",
    "TimelinePage",
    "UserPage",
    "UsersPage",
    "WorkflowPage",
    "WorkflowsPage",
    "sign_in_with_link",
]
