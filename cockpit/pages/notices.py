"""The administrators' "Notices" page (``pages/notices/list.html``): each notice's rendered text,
who it went to, and its state; filtered by run or person."""

from __future__ import annotations

import html
from typing import Any

from litestar import Controller, get
from litestar.params import FromQuery
from litestar.response import Template

from cockpit.auth import CurrentPrincipal
from cockpit.pages.common import page
from cockpit.state import AnyRequest, DbSession, context_of
from engine.runs import notices
from engine.runs.name_lookup import match_names


class NoticesPages(Controller):
    path = "/realms/{realm:str}/notices"
    include_in_schema = False

    @get("/", operation_id="noticesPage", opt={"permission": "realm.workflows.read", "reads_only": True})
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        run_id: FromQuery[str | None] = None,
        user_id: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        run_text, person_text = (run_id or "").strip()[:254], (user_id or "").strip()[:254]
        # The filters take what a person knows: a run id or a workflow's name; a recipient's id,
        # email or name (engine/runs/name_lookup.py match_names, as the audit log's filters).
        realm_id = principal.realm.id
        by: dict[str, Any] = {}
        filter_note: str | None = None
        if run_text:
            if run_text.startswith("wrn_"):
                by["run_id"] = run_text
            else:
                found_workflows = [
                    f.id for f in await match_names(db_session, realm_id, run_text) if f.kind == "workflow"
                ]
                by["workflow_ids"] = found_workflows
                if not found_workflows:
                    filter_note = f"No run or workflow of this realm is called “{run_text}”."
        if person_text:
            found_people = [f.id for f in await match_names(db_session, realm_id, person_text) if f.kind == "user"]
            if not found_people and person_text.startswith("usr_"):
                found_people = [person_text]  # a former user's id still finds what they were sent
            by["user_ids"] = found_people
            if not found_people:
                filter_note = f"No one in this realm is called or has the email “{person_text}”."
        found = await notices.list_notices(db_session, realm_id, cursor=cursor, **by)
        names = await notices.names_for_notices(db_session, realm_id, found.items)
        return page(
            request,
            "pages/notices/list.html",
            nav="notices",
            notices=found.items,
            # The text as the person read it (the stored body is escaped for mail); escaped again here.
            texts={n.id: html.unescape(n.body) for n in found.items},
            next_cursor=found.next_cursor,
            people=names.people,
            workflow_names=names.workflows,
            run_id=run_text,
            user_id=person_text,
            filter_note=filter_note,
            mail_configured=context_of(request.app).settings.mail is not None,
            not_configured_text=notices.NOT_CONFIGURED_TEXT,
        )
