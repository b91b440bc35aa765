"""API token pages: your own tokens, minting one (shown once) and revoking.

Any signed-in user of the realm reaches these pages (self-service). Minting needs a browser
session — a token cannot mint tokens — and the admin audience is offered only in a session
with a verified second factor; the engine checks the same rules.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from cockpit.auth import CurrentPrincipal, Principal, request_id_of
from cockpit.pages.common import form_errors, page
from cockpit.state import AnyRequest, DbSession
from engine.directory import tokens
from engine.platform.errors import EngineError

ACCOUNT = {"audience": "account"}


class TokensPages(Controller):
    path = "/realms/{realm:str}/tokens"
    include_in_schema = False

    async def _render(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: Principal,
        *,
        cursor: str | None = None,
        status_code: int = 200,
        form: dict[str, Any] | None = None,
        **context: Any,
    ) -> Template:
        mine = await tokens.list_tokens(db_session, principal.realm.id, user_id=principal.id, cursor=cursor)
        return page(
            request,
            "pages/tokens/list.html",
            nav="tokens",
            status_code=status_code,
            tokens=[tokens.token_view(t) for t in mine.items],
            next_cursor=mine.next_cursor,
            can_mint=principal.via == "session",
            can_mint_admin=principal.via == "session" and principal.audience == "admin",
            default_days=tokens.DEFAULT_LIFETIME_DAYS,
            max_days=tokens.MAX_LIFETIME_DAYS,
            revoked=request.query_params.get("revoked") == "1",
            form=form or {"name": "", "audience": "account", "expires_in_days": str(tokens.DEFAULT_LIFETIME_DAYS)},
            **context,
        )

    @get("/", operation_id="tokensPage", opt=ACCOUNT)
    async def list_page(
        self,
        request: AnyRequest,
        db_session: DbSession,
        principal: CurrentPrincipal,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        return await self._render(request, db_session, principal, cursor=cursor)

    @post("/", operation_id="tokensPageCreate", opt=ACCOUNT, status_code=200)
    async def create(self, request: AnyRequest, db_session: DbSession, principal: CurrentPrincipal) -> Template:
        form = await request.form()
        values = {
            "name": str(form.get("name") or ""),
            "audience": str(form.get("audience") or "account"),
            "expires_in_days": str(form.get("expires_in_days") or "").strip(),
        }
        try:
            days = int(values["expires_in_days"]) if values["expires_in_days"] else None
        except ValueError:
            days = 0  # out of range: reported with the other issues
        try:
            token, row = await tokens.mint_own_token(
                db_session,
                principal.actor(request_id_of(request)),
                name=values["name"],
                audience=values["audience"],
                expires_in_days=days,
                credential=principal.via,
                mfa=principal.via == "session" and principal.audience == "admin",
            )
        except EngineError as exc:
            return await self._render(
                request, db_session, principal, status_code=exc.status, form=values, **form_errors(exc)
            )
        return await self._render(request, db_session, principal, minted=tokens.minted_view(token, row))

    @post("/{token_id:str}/revoke", operation_id="tokensPageRevoke", opt=ACCOUNT)
    async def revoke(
        self, request: AnyRequest, token_id: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> Response[Any]:
        await tokens.revoke(
            db_session,
            principal.actor(request_id_of(request)),
            token_id,
            may_revoke_any=False,
            authority=principal.authority,
        )
        return Redirect(f"/realms/{principal.realm.slug}/tokens?revoked=1", status_code=303)
