"""The landing page of the cockpit, its live status widget, and the home page of each realm."""

from __future__ import annotations

from litestar import Controller, get
from litestar.datastructures import CacheControlHeader, State
from litestar.response import File, Redirect, Template

from cockpit import health_cache
from cockpit.api.health import check_list, readiness
from cockpit.auth import SESSION_COOKIE, CurrentPrincipal, authenticate
from cockpit.pages.common import home_href, may_open, page
from cockpit.state import AnyRequest, DbSession
from engine.directory.authz import load_authority
from engine.directory.overview import REALM_COUNTS, ObjectName, latest_activity, realm_counts, workflow_kpis
from engine.platform.config import RESOURCE_ROOT
from engine.platform.errors import Unauthorized
from engine.runs import diagnostics
from engine.runs.outcome import DECISION_CATEGORIES

STATUS_LABELS = {
    "database": "Database reachable",
    "migrations": "Migrations at the latest revision",
    "worker": "A worker alive (heartbeat within 30 s)",
}


# The page a directory tile opens, where it is not the page named like the tile.
TILE_PAGES = {"groups": "/organizations"}  # groups live in their organizations


class HomeController(Controller):
    include_in_schema = False

    @get("/", name="home")
    async def home(self, request: AnyRequest, state: State) -> Template | Redirect:
        """The service's start page; a signed-in browser goes on to its realm's home."""
        if request.cookies.get(SESSION_COOKIE) and not request.headers.get("authorization"):
            try:
                principal = await authenticate(request)
            except Unauthorized:
                principal = None  # an ended session: the start page, like anyone not signed in
            if principal is not None:
                return Redirect(home_href(request, principal), status_code=303)
        ready, checks = await readiness(state)
        return Template(
            template_name="pages/home.html",
            context={"request": request, "ready": ready, "checks": check_list(checks), "labels": STATUS_LABELS},
        )

    @get("/favicon.ico", name="favicon", cache_control=CacheControlHeader(max_age=86400))
    async def favicon(self) -> File:
        """Browsers ask for /favicon.ico on their own; pages link the same icon."""
        return File(
            path=RESOURCE_ROOT / "static" / "favicon.svg", media_type="image/svg+xml", content_disposition_type="inline"
        )

    @get("/partials/status", name="status-widget")
    async def status(self, state: State) -> Template:
        ready, checks = await readiness(state)
        return Template(
            template_name="partials/_status.html",
            context={"ready": ready, "checks": check_list(checks), "labels": STATUS_LABELS},
        )


class RealmHomeController(Controller):
    """A realm at a glance: directory counts, the latest audit events, the service status."""

    path = "/realms/{realm:str}"
    include_in_schema = False

    @get("/", operation_id="realmHomePage", name="realm-home", opt={"audience": "admin", "reads_only": True})
    async def realm_home(
        self, request: AnyRequest, state: State, db_session: DbSession, principal: CurrentPrincipal
    ) -> Template:
        realm = principal.realm
        authority = principal.authority or await load_authority(db_session, realm.id, principal.type, principal.id)
        readable = {name for name, (permission, _label) in REALM_COUNTS.items() if authority.holds(permission)}
        counts = await realm_counts(db_session, realm.id, readable)
        tiles = [
            {"name": name, "label": label, "value": counts.get(name), "href": href}
            for name, (_permission, label) in REALM_COUNTS.items()
            if may_open(request, principal, href := f"/realms/{realm.slug}{TILE_PAGES.get(name, '/' + name)}")
        ]
        kpis = (
            await workflow_kpis(db_session, realm.id, principal.id, decisions=DECISION_CATEGORIES)
            if authority.holds("realm.workflows.read")
            else None
        )
        attention = None
        open_attention = None
        if authority.holds("realm.workflows.read"):
            attention, open_attention = await diagnostics.realm_attention(
                db_session, realm.id, health=health_cache.health_of
            )
        events = None
        names: dict[str, ObjectName] = {}
        if authority.holds("realm.audit.read"):
            events, names = await latest_activity(db_session, realm.id, 10)
        ready, checks = await readiness(state, db_session)
        return page(
            request,
            "pages/realm_home.html",
            nav="home",
            tiles=tiles,
            kpis=kpis,
            attention=attention,
            open_attention=open_attention,
            events=events,
            names=names,
            ready=ready,
            checks=check_list(checks),
            labels=STATUS_LABELS,
        )
