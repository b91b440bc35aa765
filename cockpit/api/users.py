"""Users and service principals (SPEC §5, directory)."""

from __future__ import annotations

from litestar import Controller, Response, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody

from cockpit.api.common import REALM_BASE, Body, check, email_issue, text_issue
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession, context_of
from engine.directory import principals as directory
from engine.directory import read_models
from engine.directory.accounts import password_issues
from engine.platform.errors import Issue


class CreateUser(Body):
    email: str
    display_name: str
    guest: bool = False
    password: str | None = None

    def field_issues(self) -> list[Issue]:
        return (
            email_issue("/email", self.email)
            + text_issue("/display_name", self.display_name)
            + password_issues("/password", self.password)
        )


class UpdateUser(Body):
    display_name: str | None = None
    guest: bool | None = None
    password: str | None = None


class CreateServicePrincipal(Body):
    name: str
    description: str = ""


class UsersController(Controller):
    path = REALM_BASE + "/users"
    tags = ["directory"]

    @post("/", operation_id="createUser", opt={"permission": "realm.users.write", "location": "/users/{id}"})
    async def create(
        self, request: AnyRequest, data: JSONBody[CreateUser], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.User:
        """Create a user (with a password if given); ``user.created`` may start workflows."""
        check(data.field_issues())
        user = await directory.create_user(
            db_session,
            principal.actor(request_id_of(request)),
            email=data.email,
            display_name=data.display_name.strip(),
            guest=data.guest,
            password=data.password,
            authority=principal.authority,
        )
        return directory.user_view(user)

    @get("/", operation_id="listUsers", opt={"permission": "realm.users.read"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        q: FromQuery[str | None] = None,
        status: FromQuery[str | None] = None,
        guest: FromQuery[bool | None] = None,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.UserPage:
        """The realm's users; ``q`` searches, ``status`` and ``guest`` filter."""
        page = await directory.list_users(
            db_session, principal.realm.id, q=q, status=status, guest=guest, cursor=cursor, limit=limit
        )
        return read_models.UserPage(
            items=[directory.user_view(item) for item in page.items], next_cursor=page.next_cursor
        )

    @get("/{user_id:str}", operation_id="getUser", opt={"permission": "realm.users.read"})
    async def get(self, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal) -> read_models.User:
        """One user of the realm: email, display name, status, whether a second factor is enrolled."""
        user = await directory.get_user(db_session, principal.realm.id, user_id)
        return directory.user_view(user)

    @patch("/{user_id:str}", operation_id="updateUser", opt={"permission": "realm.users.write"})
    async def update(
        self,
        request: AnyRequest,
        user_id: FromPath[str],
        data: JSONBody[UpdateUser],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.User:
        """Change a user's email, display name or password (a new password ends their other sessions)."""
        check(text_issue("/display_name", data.display_name) + password_issues("/password", data.password))
        user = await directory.update_user(
            db_session,
            principal.actor(request_id_of(request)),
            user_id,
            display_name=data.display_name.strip() if data.display_name else None,
            guest=data.guest,
            password=data.password,
            authority=principal.authority,
            keep_session_id=principal.session_id,
        )
        return directory.user_view(user)

    @post(
        "/{user_id:str}/suspend", operation_id="suspendUser", status_code=200, opt={"permission": "realm.users.suspend"}
    )
    async def suspend(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.User:
        """Suspend a user: end their sessions, revoke their tokens and spend their sign-in links."""
        user = await directory.set_user_status(
            db_session, principal.actor(request_id_of(request)), user_id, "suspended", authority=principal.authority
        )
        return directory.user_view(user)

    @post(
        "/{user_id:str}/reactivate",
        operation_id="reactivateUser",
        status_code=200,
        opt={"permission": "realm.users.suspend"},
    )
    async def reactivate(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.User:
        """Reactivate a suspended user; their ended sessions, tokens and links stay ended."""
        user = await directory.set_user_status(
            db_session, principal.actor(request_id_of(request)), user_id, "active", authority=principal.authority
        )
        return directory.user_view(user)

    @post(
        "/{user_id:str}/reset-mfa",
        operation_id="resetUserMfa",
        status_code=200,
        opt={"permission": "realm.users.write"},
    )
    async def reset_mfa(
        self, request: AnyRequest, user_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.User:
        """Remove the user's second factor and end their browser sessions; they enrol again."""
        user = await directory.reset_mfa(
            db_session, principal.actor(request_id_of(request)), user_id, authority=principal.authority
        )
        return directory.user_view(user)


class CreateSignInLink(Body):
    user_id: str


class SignInLinksController(Controller):
    """One-time sign-in links made by administrators, so automation (browser tests, scripts)
    starts a browser session without a person typing a password."""

    path = REALM_BASE + "/sign-in-links"
    tags = ["authentication"]

    @post(
        "/", operation_id="createSignInLink", opt={"permission": "realm.users.write", "location": "/sign-in-links/{id}"}
    )
    async def create(
        self,
        request: AnyRequest,
        data: JSONBody[CreateSignInLink],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> Response[read_models.SignInLink]:
        """A one-time sign-in link for a user of the realm (15 minutes, counts as a second factor).

        The caller must hold every permission the user holds, in every scope (403
        ``target_outranks_actor`` otherwise); a suspended user gets none (409 ``user_suspended``).
        ``url`` (and ``path``) carry the token and are in this answer only; the creation is audited
        as ``user.sign_in_link_created``. Opening the link shows a page whose **Continue** button
        signs in.
        """
        token, row = await directory.create_sign_in_link(
            db_session, principal.actor(request_id_of(request)), data.user_id, authority=principal.authority
        )
        path = f"/realms/{principal.realm.slug}/sign-in/link?token={token}"
        base = context_of(request.app).settings.link_base_url  # never the request's Host header
        link = read_models.SignInLink(
            id=row.id, user_id=row.user_id, url=base + path, path=path, expires_at=row.expires_at
        )
        return Response(
            link,
            status_code=201,
            headers={"Cache-Control": "no-store"},
        )


class ServicePrincipalsController(Controller):
    path = REALM_BASE + "/service-principals"
    tags = ["directory"]

    @post(
        "/",
        operation_id="createServicePrincipal",
        opt={"permission": "realm.users.write", "location": "/service-principals/{id}"},
    )
    async def create(
        self,
        request: AnyRequest,
        data: JSONBody[CreateServicePrincipal],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.ServicePrincipal:
        """Create a service principal; mint its tokens with ``POST /service-principals/{sp_id}/tokens``."""
        check(text_issue("/name", data.name) + text_issue("/description", data.description, minimum=0, maximum=500))
        sp = await directory.create_service_principal(
            db_session,
            principal.actor(request_id_of(request)),
            name=data.name.strip(),
            description=data.description,
            authority=principal.authority,
        )
        return directory.service_principal_view(sp)

    @get("/", operation_id="listServicePrincipals", opt={"permission": "realm.users.read"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.ServicePrincipalPage:
        """The realm's service principals (non-person callers with their own tokens and roles)."""
        page = await directory.list_service_principals(db_session, principal.realm.id, cursor=cursor, limit=limit)
        return read_models.ServicePrincipalPage(
            items=[directory.service_principal_view(item) for item in page.items], next_cursor=page.next_cursor
        )

    @get("/{sp_id:str}", operation_id="getServicePrincipal", opt={"permission": "realm.users.read"})
    async def get(
        self, sp_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.ServicePrincipal:
        """One service principal of the realm."""
        sp = await directory.get_service_principal(db_session, principal.realm.id, sp_id)
        return directory.service_principal_view(sp)
