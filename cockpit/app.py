"""``create_app()``: the Litestar application (JSON API + server-rendered cockpit)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.config.compression import CompressionConfig
from litestar.di import Provide
from litestar.openapi.config import OpenAPIConfig
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from cockpit.api.approvals import ApprovalsController, NoticesController
from cockpit.api.audit import AuditEventsController
from cockpit.api.diagnostics import DiagnosticsController
from cockpit.api.health import HealthController
from cockpit.api.http_semantics import IdempotentReplay, api_guard, api_response_middleware, replay_handler
from cockpit.api.organizations import GroupsController, OrganizationsController
from cockpit.api.roles import PermissionsController, RoleAssignmentsController, RolesController
from cockpit.api.runs import ManualRunsController, RunsController
from cockpit.api.settings import PolicyController, TemplatesController
from cockpit.api.tokens import ServicePrincipalTokensController, TokensController
from cockpit.api.users import ServicePrincipalsController, SignInLinksController, UsersController
from cockpit.api.webhooks import WebhooksController
from cockpit.api.workflows import ContractsController, WorkflowsController
from cockpit.auth import provide_principal, realm_guard
from cockpit.boundary import boundary_middleware_factory
from cockpit.metrics import MetricsController, metrics_middleware
from cockpit.middleware import request_id_middleware
from cockpit.names import ids_in
from cockpit.openapi import declare_problem_responses
from cockpit.pages import formatting
from cockpit.pages.approvals import ApprovalLinkPages, ApprovalsPages
from cockpit.pages.audit import AuditPages
from cockpit.pages.auth.link import SignInLinkPages
from cockpit.pages.auth.mfa import MfaPages
from cockpit.pages.auth.sign_in import SignInPages
from cockpit.pages.badges import badge_tone
from cockpit.pages.diagnostics import DiagnosticsPages
from cockpit.pages.home import HomeController, RealmHomeController
from cockpit.pages.notices import NoticesPages
from cockpit.pages.organizations.detail import OrganizationPages
from cockpit.pages.organizations.group import GroupPages
from cockpit.pages.organizations.list import OrganizationListPages
from cockpit.pages.pickers import PickerPages
from cockpit.pages.roles import RolesPages
from cockpit.pages.runs.bulk import RunBulkPages
from cockpit.pages.runs.detail import RunPages
from cockpit.pages.runs.list import RunListPages
from cockpit.pages.runs.start import RunStartManyPages, RunStartPages
from cockpit.pages.service_principals import ServicePrincipalsPages
from cockpit.pages.settings import PolicyPages, TemplatesPages
from cockpit.pages.tokens import TokensPages
from cockpit.pages.users import UsersPages
from cockpit.pages.webhooks import WebhooksPages
from cockpit.pages.workflows.detail import WorkflowPages
from cockpit.pages.workflows.editor import WorkflowEditorPages
from cockpit.pages.workflows.list import WorkflowListPages
from cockpit.pages.workflows.revisions import WorkflowRevisionPages
from cockpit.problems import problem_handler
from cockpit.reference import render_plugins
from cockpit.state import AppContext, make_web_engine, provide_db_session, request_db_middleware
from engine.platform.config import RESOURCE_ROOT, VERSION, Settings, get_settings
from engine.platform.database import resolve_database_url
from engine.platform.db import make_sessionmaker
from engine.platform.migrate import head_revision

HTMX_VERSION = (RESOURCE_ROOT / "static" / "vendor" / "htmx.VERSION").read_text().strip()


# Every JSON API controller of a realm; the authorization matrix test enumerates their routes.
API_CONTROLLERS: list[type] = [
    UsersController,
    ServicePrincipalsController,
    SignInLinksController,
    PermissionsController,
    OrganizationsController,
    GroupsController,
    RolesController,
    RoleAssignmentsController,
    WebhooksController,
    TemplatesController,
    PolicyController,
    AuditEventsController,
    TokensController,
    ServicePrincipalTokensController,
    WorkflowsController,
    ContractsController,
    ManualRunsController,
    RunsController,
    DiagnosticsController,
    ApprovalsController,
    NoticesController,
]


# Every cockpit page controller (``/realms/{realm}/…``), guarded like the API.
PAGE_CONTROLLERS: list[type] = [
    SignInPages,
    SignInLinkPages,
    MfaPages,
    RealmHomeController,
    ApprovalsPages,
    ApprovalLinkPages,
    NoticesPages,
    WorkflowListPages,
    WorkflowPages,
    WorkflowEditorPages,
    WorkflowRevisionPages,
    PickerPages,
    DiagnosticsPages,
    RunListPages,
    RunBulkPages,
    RunPages,
    RunStartPages,
    RunStartManyPages,
    UsersPages,
    OrganizationListPages,
    OrganizationPages,
    GroupPages,
    RolesPages,
    WebhooksPages,
    TemplatesPages,
    PolicyPages,
    TokensPages,
    ServicePrincipalsPages,
    AuditPages,
]


def create_app(settings: Settings | None = None, database_url: str | None = None) -> Litestar:
    """Build the application."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        url = database_url or resolve_database_url(settings)
        db = make_web_engine(url)
        read_engine = db.execution_options(isolation_level="AUTOCOMMIT")
        app.state["ctx"] = AppContext(
            settings=settings,
            database_url=url,
            db=db,
            sessions=make_sessionmaker(db),
            head_revision=head_revision(),
            read_sessions=make_sessionmaker(read_engine),
            read_engine=read_engine,
        )
        declare_problem_responses(app)
        try:
            yield
        finally:
            await db.dispose()

    def configure_templates(engine: JinjaTemplateEngine) -> None:
        engine.engine.globals["htmx_version"] = HTMX_VERSION
        engine.engine.globals["product_name"] = "Lifecycle Cockpit"
        engine.engine.globals["product_version"] = VERSION
        engine.engine.globals["ids_in"] = ids_in
        engine.engine.globals["badge_tone"] = badge_tone
        engine.engine.filters["relative_time"] = formatting.relative
        engine.engine.filters["exact_time"] = formatting.exact

    template_config = TemplateConfig(
        directory=RESOURCE_ROOT / "templates",
        engine=JinjaTemplateEngine,
        engine_callback=configure_templates,
    )

    return Litestar(
        route_handlers=[
            HealthController,
            MetricsController,
            HomeController,
            *API_CONTROLLERS,
            *PAGE_CONTROLLERS,
            create_static_files_router(path="/static", directories=[RESOURCE_ROOT / "static"], include_in_schema=False),
        ],
        dependencies={"db_session": Provide(provide_db_session), "principal": Provide(provide_principal)},
        guards=[realm_guard, api_guard],
        lifespan=[lifespan],
        middleware=[
            metrics_middleware,
            boundary_middleware_factory(settings.trusted_proxies),
            request_id_middleware,
            request_db_middleware,
            api_response_middleware,
        ],
        exception_handlers={Exception: problem_handler, IdempotentReplay: replay_handler},
        template_config=template_config,
        openapi_config=OpenAPIConfig(
            title="Lifecycle Cockpit API",
            version="1",
            path="/schema",
            description="Durable lifecycle workflows for identity administration.",
            use_handler_docstrings=True,
            render_plugins=render_plugins(),
        ),
        compression_config=CompressionConfig(backend="gzip", minimum_size=1024),
        logging_config=None,
        debug=False,
    )
