"""API tokens (SPEC §3, §5): people mint their own from a browser session; administrators mint
admin tokens for service principals. A minted token is in the answer once, never again.
"""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody
from sqlalchemy.ext.asyncio import AsyncSession

from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import principals as directory
from engine.directory import read_models, tokens
from engine.directory.authz import load_authority


class CreateToken(Body):
    name: str
    audience: str
    expires_in_days: int | None = None


class CreateServicePrincipalToken(Body):
    name: str
    expires_in_days: int | None = None


async def may_revoke_any(session: AsyncSession, principal: Principal) -> bool:
    """Realm administrators (``realm.tokens.write`` with an admin-audience credential)."""
    if principal.audience != "admin":
        return False
    authority = principal.authority or await load_authority(session, principal.realm.id, principal.type, principal.id)
    return authority.holds("realm.tokens.write")


class TokensController(Controller):
    """The caller's own tokens. Any user credential of the realm reaches these routes; minting
    needs a browser session (a token cannot mint tokens), and an MFA session for admin tokens."""

    path = REALM_BASE + "/tokens"
    tags = ["authentication"]

    @post("/", operation_id="createToken", opt={"audience": "account", "location": "/tokens/{id}"})
    async def create(
        self, request: AnyRequest, data: JSONBody[CreateToken], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.MintedToken:
        """Mint a token for yourself; ``token`` is shown this once (default lifetime 90 days)."""
        token, row = await tokens.mint_own_token(
            db_session,
            principal.actor(request_id_of(request)),
            name=data.name,
            audience=data.audience,
            expires_in_days=data.expires_in_days,
            credential=principal.via,
            mfa=principal.via == "session" and principal.audience == "admin",
        )
        return tokens.minted_view(token, row)

    @get("/", operation_id="listTokens", opt={"audience": "account"})
    async def list(
        self,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.ApiTokenPage:
        """Your tokens, revoked and expired ones included; never the token itself."""
        page = await tokens.list_tokens(
            db_session, principal.realm.id, user_id=principal.id, cursor=cursor, limit=limit
        )
        return read_models.ApiTokenPage(
            items=[tokens.token_view(item) for item in page.items], next_cursor=page.next_cursor
        )

    @delete("/{token_id:str}", operation_id="revokeToken", opt={"audience": "account"})
    async def revoke(
        self, request: AnyRequest, token_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> None:
        """Revoke one of your tokens; holders of ``realm.tokens.write`` may revoke any token of the realm."""
        await tokens.revoke(
            db_session,
            principal.actor(request_id_of(request)),
            token_id,
            may_revoke_any=await may_revoke_any(db_session, principal),
            authority=principal.authority
            or await load_authority(db_session, principal.realm.id, principal.type, principal.id),
        )


class ServicePrincipalTokensController(Controller):
    path = REALM_BASE + "/service-principals/{sp_id:str}/tokens"
    tags = ["authentication"]

    @post(
        "/",
        operation_id="createServicePrincipalToken",
        opt={"permission": "realm.tokens.write", "location": "/tokens/{id}"},
    )
    async def create(
        self,
        request: AnyRequest,
        sp_id: FromPath[str],
        data: JSONBody[CreateServicePrincipalToken],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.MintedToken:
        """Mint an admin-audience token for the service principal; ``token`` is shown this once."""
        token, row = await tokens.mint_service_principal_token(
            db_session,
            principal.actor(request_id_of(request)),
            sp_id,
            name=data.name,
            expires_in_days=data.expires_in_days,
            authority=principal.authority,
        )
        return tokens.minted_view(token, row)

    @get("/", operation_id="listServicePrincipalTokens", opt={"permission": "realm.tokens.write"})
    async def list(
        self,
        sp_id: FromPath[str],
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
        limit: FromQuery[int | None] = None,
    ) -> read_models.ApiTokenPage:
        """The service principal's tokens (to find the one to revoke); never the token itself."""
        sp = await directory.get_service_principal(db_session, principal.realm.id, sp_id)
        page = await tokens.list_tokens(
            db_session, principal.realm.id, service_principal_id=sp.id, cursor=cursor, limit=limit
        )
        return read_models.ApiTokenPage(
            items=[tokens.token_view(item) for item in page.items], next_cursor=page.next_cursor
        )
