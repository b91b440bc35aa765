"""``cockpit admin …``: non-interactive operator commands for automation and tests.

``token`` and ``sign-in-link`` print only what was asked for on stdout, so scripts can capture it.
This module holds the commands' parser and what other commands share (the addresses links point
at); the work itself is in ``cockpit/admin_commands.py``, imported only when an admin command
runs, so the remote commands (``cockpit runs …``) start without the database layer.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from engine.directory.token_limits import TOKEN_DEFAULT_DAYS, TOKEN_MAX_DAYS

if TYPE_CHECKING:
    from engine.platform.config import Settings


class AdminError(Exception):
    pass


WEB_ADDRESS_FILE = "web-address"


def shown_url(host: str, port: int) -> str:
    """The address people open: ``localhost`` for a wildcard or loopback listener."""
    shown = "localhost" if host in {"127.0.0.1", "0.0.0.0", "::"} else host  # noqa: S104
    return f"http://{shown}:{port}"


def record_web_address(settings: Settings, host: str, port: int) -> None:
    """Remember where the web server of this home listens, for the links other commands print."""
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
        (settings.home / WEB_ADDRESS_FILE).write_text(shown_url(host, port) + "\n")
    except OSError:
        pass  # a read-only home only costs the remembered address


def public_base_url(settings: Settings) -> str:
    """Where links point: ``COCKPIT_PUBLIC_URL`` when set; else ``COCKPIT_HOST``/``COCKPIT_PORT`` when
    given, else where this home's server last listened."""
    if settings.public_url:
        return settings.public_url
    if "COCKPIT_PORT" not in os.environ and "COCKPIT_HOST" not in os.environ:
        try:
            recorded = (settings.home / WEB_ADDRESS_FILE).read_text().strip()
        except OSError:
            recorded = ""
        if recorded.startswith("http://"):
            return recorded
    return shown_url(settings.host, settings.port)


def sign_in_link_url(settings: Settings, realm_slug: str, token: str) -> str:
    """Where a one-time sign-in link opens: a page with a Continue button that spends it."""
    return f"{public_base_url(settings)}/realms/{realm_slug}/sign-in/link?token={token}"


def cmd_create_realm(settings: Settings, args: argparse.Namespace) -> int:
    from cockpit import admin_commands

    return admin_commands.create_realm_command(settings, args)


def cmd_sign_in_link(settings: Settings, args: argparse.Namespace) -> int:
    from cockpit import admin_commands

    return admin_commands.sign_in_link_command(settings, args)


def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    if not 1 <= args.days <= TOKEN_MAX_DAYS:
        raise AdminError(f"--days must be between 1 and {TOKEN_MAX_DAYS}, got {args.days}")
    from cockpit import admin_commands

    return admin_commands.token_command(settings, args)


def cmd_grant_realm_admin(settings: Settings, args: argparse.Namespace) -> int:
    """Recover a realm nobody can administer: give realm-admin to one of its active users."""
    from cockpit import admin_commands

    return admin_commands.grant_realm_admin_command(settings, args)


def add_admin_commands(sub: Any) -> None:
    admin = sub.add_parser("admin", help="operator commands: realms, sign-in links, API tokens")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True, metavar="ADMIN_COMMAND")

    create = admin_sub.add_parser("create-realm", help="create a realm with its built-in roles and a first admin")
    create.add_argument("slug", help="the realm's slug, used in paths (e.g. acme)")
    create.add_argument("--admin-email", required=True, help="email of the first administrator")
    create.add_argument("--admin-name", default=None, help="display name of the first administrator")
    create.set_defaults(func=cmd_create_realm)

    link = admin_sub.add_parser("sign-in-link", help="print a one-time sign-in link (15 minutes, counts as MFA)")
    link.add_argument("--realm", required=True)
    link.add_argument("--email", required=True)
    link.set_defaults(func=cmd_sign_in_link)

    grant = admin_sub.add_parser(
        "grant-realm-admin",
        help="give realm-admin to an active user of the realm (recovers a realm without an administrator; audited)",
    )
    grant.add_argument("--realm", required=True)
    grant.add_argument("--email", required=True)
    grant.set_defaults(func=cmd_grant_realm_admin)

    token = admin_sub.add_parser("token", help="print a new API bearer token (only the token, on stdout)")
    token.add_argument("--realm", required=True)
    who = token.add_mutually_exclusive_group(required=True)
    who.add_argument("--email", help="the user the token acts as")
    who.add_argument("--service-principal", help="the service principal (id or name) the token acts as")
    token.add_argument("--audience", choices=["admin", "account"], required=True)
    token.add_argument("--name", default="cli", help="a label for the token")
    token.add_argument(
        "--days",
        type=int,
        default=TOKEN_DEFAULT_DAYS,
        help=f"expire after this many days, 1 to {TOKEN_MAX_DAYS} (default {TOKEN_DEFAULT_DAYS})",
    )
    token.set_defaults(func=cmd_token)
