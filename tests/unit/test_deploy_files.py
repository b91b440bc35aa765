"""The files of `deploy/` name only what the product has: commands it accepts, settings it reads."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

import pytest

from cockpit.cli import build_parser
from engine.platform.config import PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def settings_the_product_reads() -> set[str]:
    names: set[str] = set()
    for path in [*(PROJECT_ROOT / "engine").rglob("*.py"), *(PROJECT_ROOT / "cockpit").rglob("*.py")]:
        names |= set(re.findall(r'"(COCKPIT_[A-Z_]+)"', path.read_text()))
    return names


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    return parser


def test_there_are_units_for_the_web_server_the_worker_and_migrations() -> None:
    assert {p.name for p in UNITS} == {"cockpit-web.service", "cockpit-worker@.service", "cockpit-migrate.service"}


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_each_unit_runs_a_command_the_cli_accepts_with_the_environment_file(path: Path) -> None:
    service = unit(path)["Service"]
    program, *args = shlex.split(service["ExecStart"])
    assert program == "/opt/cockpit/bin/cockpit"
    parsed = build_parser().parse_args(args)  # exits (fails the test) on a command the CLI does not have
    assert parsed.command in {"serve", "worker", "migrate"}
    assert service["EnvironmentFile"] == "/etc/cockpit/cockpit.env"
    assert service["User"] == "cockpit"
    if parsed.command != "migrate":
        # The web server and the worker stop gracefully on SIGTERM, within systemd's patience.
        assert service["KillSignal"] == "SIGTERM" and int(service["TimeoutStopSec"]) >= 20
        assert parsed.no_migrate and "cockpit-migrate.service" in unit(path)["Unit"]["After"]


def test_the_environment_template_names_only_settings_the_product_reads() -> None:
    text = (DEPLOY / "cockpit.env.example").read_text()
    named = set(re.findall(r"^#?(COCKPIT_[A-Z_]+)=", text, flags=re.MULTILINE))
    assert named - settings_the_product_reads() == set()
    required = {"COCKPIT_DATABASE_URL", "COCKPIT_SECRET_KEY", "COCKPIT_TRUSTED_PROXIES", "COCKPIT_SECURE_COOKIES"}
    assert required <= set(re.findall(r"^(COCKPIT_[A-Z_]+)=", text, flags=re.MULTILINE))


def test_the_nginx_site_passes_the_client_address_the_product_trusts() -> None:
    site = (DEPLOY / "nginx" / "cockpit.conf").read_text()
    assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in site
    assert re.search(r"listen 443 ssl( http2)?;", site) and "ssl_certificate " in site
    # A write is never sent to a second web host.
    assert re.search(r"^\s*proxy_next_upstream [^;]*non_idempotent", site, flags=re.MULTILINE) is None
