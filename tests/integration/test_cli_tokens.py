"""``cockpit admin token``: every token it prints expires, after 90 days unless ``--days`` says
otherwise (1 to 365, the same limits as tokens minted in the cockpit)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from cockpit.admin_cli import AdminError, cmd_create_realm
from cockpit.cli import build_parser
from engine.directory.tokens import DEFAULT_LIFETIME_DAYS, MAX_LIFETIME_DAYS, request_issues
from engine.platform.config import Settings
from engine.platform.db import make_engine


def expires_at(database_url: str, token_text: str) -> datetime:
    from engine.platform import crypto

    async def read() -> datetime:
        engine = make_engine(database_url, pool_size=1)
        try:
            async with engine.connect() as conn:
                raw = await conn.get_raw_connection()
                value = await raw.driver_connection.fetchval(
                    "SELECT expires_at FROM api_tokens WHERE token_hash = $1", crypto.token_hash(token_text)
                )
        finally:
            await engine.dispose()
        assert isinstance(value, datetime)
        return value

    return asyncio.run(read())


def mint(settings: Settings, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    args = build_parser().parse_args(
        ["admin", "token", "--realm", "acme", "--email", "root@acme.example", "--audience", "admin", *extra]
    )
    capsys.readouterr()
    assert args.func(settings, args) == 0
    return capsys.readouterr().out.strip()


def test_cli_tokens_expire_after_90_days_by_default_and_days_is_pinned_on_both_sides(
    settings: Settings, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cmd_create_realm(
        settings, build_parser().parse_args(["admin", "create-realm", "acme", "--admin-email", "root@acme.example"])
    )
    for extra, days in (((), 90), (("--days", "1"), 1), (("--days", "365"), 365)):
        token = mint(settings, capsys, *extra)
        left = expires_at(database_url, token) - datetime.now(UTC)
        assert timedelta(days=days) - timedelta(minutes=5) < left <= timedelta(days=days), (extra, left)
    for bad in ("0", "366", "-1"):
        with pytest.raises(AdminError, match="--days must be between 1 and 365"):
            mint(settings, capsys, "--days", bad)
    # The cockpit's limits are the same numbers.
    assert (DEFAULT_LIFETIME_DAYS, MAX_LIFETIME_DAYS) == (90, 365)
    assert request_issues(None, None, 365) == [] and request_issues(None, None, 1) == []
    assert [i.path for i in request_issues(None, None, 366) + request_issues(None, None, 0)] == ["/expires_in_days"] * 2
