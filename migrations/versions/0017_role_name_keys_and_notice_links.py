"""Role names unique as people read them; one-time links out of stored notices.

- ``roles.name_key``: the folded name (NFKC, case-folded, without the accents and dots of Latin,
  Greek and Cyrillic letters), unique per realm, so ``REALM-ADMİN`` cannot sit beside
  ``realm-admin`` even when two creations race. The engine fills it on every write; here it is
  filled for the roles there are, with the fold of this revision (copied, so later changes to the
  engine's fold never change what this revision did). Two roles of one realm that already fold to
  the same key keep their names: the older one (a built-in first) gets the key, each other one
  the key with its id appended, so it stays unique until it is renamed.
- ``workflow_notices.link_enc``: the one-time link a notice's mail carries, encrypted, until it
  is sent. The links already written into stored bodies are replaced by a placeholder: their
  approval links stay valid for the mails already sent.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")
PLACEHOLDER = "[one-time link: sent by mail only, never stored]"


def _fold(value: str) -> str:
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", value).casefold())
    kept: list[str] = []
    on_alphabet = False
    for char in unicodedata.normalize("NFD", folded):
        if unicodedata.combining(char):
            if on_alphabet:
                continue
        else:
            on_alphabet = unicodedata.name(char, "").startswith(_SCRIPTS)
        kept.append(char)
    return unicodedata.normalize("NFC", "".join(kept)).strip()


def upgrade() -> None:
    op.add_column("roles", sa.Column("name_key", sa.String(length=400), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT id, realm_id, name FROM roles ORDER BY realm_id, builtin DESC, id")).all()
    seen: set[tuple[str, str]] = set()
    for role_id, realm_id, name in rows:
        key = _fold(name)
        if (realm_id, key) in seen:
            key = f"{key}~{role_id}"
        seen.add((realm_id, key))
        bind.execute(sa.text("UPDATE roles SET name_key = :k WHERE id = :i"), {"k": key, "i": role_id})
    op.alter_column("roles", "name_key", nullable=False)
    op.create_unique_constraint(op.f("uq_roles_realm_id_name_key"), "roles", ["realm_id", "name_key"])

    op.add_column("workflow_notices", sa.Column("link_enc", sa.Text(), nullable=True))
    op.execute(
        sa.text(
            "UPDATE workflow_notices SET body = regexp_replace(body, :link, :placeholder, 'g')"
            " WHERE body LIKE '%/approval-links/%'"
        ).bindparams(link=r"\S*/approval-links/[A-Za-z0-9_-]+", placeholder=PLACEHOLDER)
    )


def downgrade() -> None:
    op.drop_column("workflow_notices", "link_enc")
    op.drop_constraint(op.f("uq_roles_realm_id_name_key"), "roles", type_="unique")
    op.drop_column("roles", "name_key")
