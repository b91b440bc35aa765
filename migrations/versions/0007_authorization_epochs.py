"""Authorization epochs: a cheap freshness test for cached authority.

``realms.authz_epoch`` moves on every change to the realm's roles, groups and the roles groups
grant, and to service principals' assignments; ``users.authz_epoch`` moves on every change to
one user's status, role assignments, group memberships and organization memberships. Triggers
do the bumping, so no change path — API, pages, runs, expiry, raw SQL — can forget it. Values
come from one sequence and are never reused, even when the changing transaction rolls back.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

FUNCTIONS = """
CREATE SEQUENCE authz_epoch_seq;

CREATE FUNCTION authz_bump_user(uid text) RETURNS void LANGUAGE sql AS $$
    UPDATE users SET authz_epoch = nextval('authz_epoch_seq') WHERE id = uid
$$;

CREATE FUNCTION authz_bump_realm(rid text) RETURNS void LANGUAGE sql AS $$
    UPDATE realms SET authz_epoch = nextval('authz_epoch_seq') WHERE id = rid
$$;

-- role_assignments: the user's epoch (a service principal's assignments move the realm's).
CREATE FUNCTION authz_on_assignment() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF OLD.user_id IS NOT NULL THEN PERFORM authz_bump_user(OLD.user_id);
        ELSE PERFORM authz_bump_realm(OLD.realm_id); END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF NEW.user_id IS NOT NULL THEN PERFORM authz_bump_user(NEW.user_id);
        ELSE PERFORM authz_bump_realm(NEW.realm_id); END IF;
    END IF;
    RETURN NULL;
END $$;

-- group_members and memberships: the member's epoch.
CREATE FUNCTION authz_on_member() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN PERFORM authz_bump_user(OLD.user_id); END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN PERFORM authz_bump_user(NEW.user_id); END IF;
    RETURN NULL;
END $$;

-- roles, groups, service principals: the realm's epoch.
CREATE FUNCTION authz_on_realm_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN PERFORM authz_bump_realm(OLD.realm_id); END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN PERFORM authz_bump_realm(NEW.realm_id); END IF;
    RETURN NULL;
END $$;

-- group_roles has no realm column: the realm of its group.
CREATE FUNCTION authz_on_group_role() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM authz_bump_realm(g.realm_id) FROM groups g WHERE g.id = OLD.group_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM authz_bump_realm(g.realm_id) FROM groups g WHERE g.id = NEW.group_id;
    END IF;
    RETURN NULL;
END $$;

-- users.status: the user's own epoch, in the same row.
CREATE FUNCTION authz_on_user_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.authz_epoch := nextval('authz_epoch_seq');
    RETURN NEW;
END $$;

CREATE TRIGGER authz_epoch AFTER INSERT OR UPDATE OR DELETE ON role_assignments
    FOR EACH ROW EXECUTE FUNCTION authz_on_assignment();
CREATE TRIGGER authz_epoch AFTER INSERT OR UPDATE OR DELETE ON group_members
    FOR EACH ROW EXECUTE FUNCTION authz_on_member();
CREATE TRIGGER authz_epoch AFTER INSERT OR UPDATE OR DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION authz_on_member();
CREATE TRIGGER authz_epoch AFTER INSERT OR UPDATE OR DELETE ON roles
    FOR EACH ROW EXECUTE FUNCTION authz_on_realm_row();
CREATE TRIGGER authz_epoch AFTER INSERT OR UPDATE OR DELETE ON groups
    FOR EACH ROW EXECUTE FUNCTION authz_on_realm_row();
CREATE TRIGGER authz_epoch AFTER UPDATE OR DELETE ON service_principals
    FOR EACH ROW EXECUTE FUNCTION authz_on_realm_row();
CREATE TRIGGER authz_epoch AFTER INSERT OR UPDATE OR DELETE ON group_roles
    FOR EACH ROW EXECUTE FUNCTION authz_on_group_role();
CREATE TRIGGER authz_epoch BEFORE UPDATE OF status ON users
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION authz_on_user_status();
"""

DROP = """
DROP TRIGGER authz_epoch ON users;
DROP TRIGGER authz_epoch ON group_roles;
DROP TRIGGER authz_epoch ON service_principals;
DROP TRIGGER authz_epoch ON groups;
DROP TRIGGER authz_epoch ON roles;
DROP TRIGGER authz_epoch ON memberships;
DROP TRIGGER authz_epoch ON group_members;
DROP TRIGGER authz_epoch ON role_assignments;
DROP FUNCTION authz_on_user_status();
DROP FUNCTION authz_on_group_role();
DROP FUNCTION authz_on_realm_row();
DROP FUNCTION authz_on_member();
DROP FUNCTION authz_on_assignment();
DROP FUNCTION authz_bump_realm(text);
DROP FUNCTION authz_bump_user(text);
DROP SEQUENCE authz_epoch_seq;
"""


def upgrade() -> None:
    op.add_column("realms", sa.Column("authz_epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.add_column("users", sa.Column("authz_epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.execute(FUNCTIONS)


def downgrade() -> None:
    op.execute(DROP)
    op.drop_column("users", "authz_epoch")
    op.drop_column("realms", "authz_epoch")
