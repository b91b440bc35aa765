"""Realm settings (SPEC §5): the wording of server templates and the realm policy."""

from __future__ import annotations

import msgspec
from litestar import Controller, delete, get, patch, put
from litestar.params import FromPath, JSONBody

from cockpit.api.common import REALM_BASE, Body
from cockpit.auth import CurrentPrincipal, request_id_of
from cockpit.state import AnyRequest, DbSession
from engine.directory import notice_templates, policy, read_models


class PutTemplate(Body):
    subject: str
    body: str


class PolicyExtensions(Body):
    workflow_publish_approval: bool | None = None


class UpdatePolicy(Body):
    extensions: PolicyExtensions


class TemplatesController(Controller):
    path = REALM_BASE + "/templates"
    tags = ["settings"]

    @get("/{name:str}", operation_id="getTemplate", opt={"permission": "realm.workflows.read"})
    async def get(
        self, name: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.NoticeTemplate:
        """The realm's wording, or the server's default (``overridden: false``)."""
        return await notice_templates.get_template(db_session, principal.realm.id, name)

    @put("/{name:str}", operation_id="putTemplate", opt={"permission": "realm.templates.write"})
    async def put(
        self,
        request: AnyRequest,
        name: FromPath[str],
        data: JSONBody[PutTemplate],
        db_session: DbSession,
        principal: CurrentPrincipal,
    ) -> read_models.NoticeTemplate:
        """Set the wording; only the placeholders ``{{realm}} {{workflow}} {{notice}} {{time}}``."""
        return await notice_templates.put_template(
            db_session, principal.actor(request_id_of(request)), name, subject=data.subject, body=data.body
        )

    @delete("/{name:str}", operation_id="resetTemplate", opt={"permission": "realm.templates.write"})
    async def reset(
        self, request: AnyRequest, name: FromPath[str], db_session: DbSession, principal: CurrentPrincipal
    ) -> None:
        """Go back to the server's default wording."""
        await notice_templates.reset_template(db_session, principal.actor(request_id_of(request)), name)


class PolicyController(Controller):
    path = REALM_BASE + "/policy"
    tags = ["settings"]

    @get("/", operation_id="getPolicy", opt={"permission": "realm.workflows.read"})
    async def get(self, db_session: DbSession, principal: CurrentPrincipal) -> read_models.Policy:
        """The realm policy: which extensions are on (such as approval before publishing a workflow)."""
        return await policy.get_policy(db_session, principal.realm.id)

    @patch("/", operation_id="updatePolicy", opt={"permission": "realm.policy.write"})
    async def update(
        self, request: AnyRequest, data: JSONBody[UpdatePolicy], db_session: DbSession, principal: CurrentPrincipal
    ) -> read_models.Policy:
        """Set extensions; ``workflow_publish_approval`` affects workflows created afterwards."""
        given = msgspec.structs.asdict(data.extensions)
        extensions = {name: value for name, value in given.items() if value is not None}
        return await policy.update_policy(db_session, principal.actor(request_id_of(request)), extensions)
