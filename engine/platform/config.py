"""Settings: one object, read once from ``COCKPIT_*`` environment variables.

Every setting has a documented default (see README "Configuration"), so a fresh clone runs
with no variables at all.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class ConfigError(Exception):
    """A setting has a value the product cannot use."""


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, got {raw!r}")


@dataclass(frozen=True)
class WorkerSettings:
    """How workers claim and hold runs (seed 000: workers.*)."""

    lease_duration_s: int = 60
    batch_size: int = 50
    tenant_batch_share: int = 10
    heartbeat_interval_s: int = 5
    concurrency: int = 4
    group_commit: int = 50  # runs whose internal steps commit in one transaction (1: each alone)
    fast_path: bool = True  # internal steps in one statement each (engine/runs/fastpath.py)


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str | None
    host: str
    port: int
    secret_key_value: str | None
    log_level: str
    log_format: str
    secure_cookies: bool
    allow_private_egress: bool
    workers: WorkerSettings = field(default_factory=WorkerSettings)
    # Addresses (or CIDR networks) of the reverse proxies whose X-Forwarded-For is believed.
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = ()

    @property
    def secret_key(self) -> str:
        """The operator key for sessions and encryption at rest.

        Given through ``COCKPIT_SECRET_KEY`` or generated once into the home folder
        (mode 0600) and read back on every later start.
        """
        if self.secret_key_value:
            return self.secret_key_value
        return load_or_create_secret_key(self.home)

    @property
    def uses_embedded_database(self) -> bool:
        return not self.database_url


def load_or_create_secret_key(home: Path) -> str:
    path = home / "secret_key"
    if path.exists():
        return path.read_text().strip()
    home.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, key.encode())
    finally:
        os.close(fd)
    return key


def parse_trusted_proxies(raw: str | None) -> tuple[IPv4Network | IPv6Network, ...]:
    """``COCKPIT_TRUSTED_PROXIES``: comma-separated addresses or CIDR networks; empty trusts none."""
    out: list[IPv4Network | IPv6Network] = []
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(ip_network(item, strict=False))
        except ValueError as exc:
            raise ConfigError(
                f"COCKPIT_TRUSTED_PROXIES must list IP addresses or networks (CIDR), got {item!r}"
            ) from exc
    return tuple(out)


def load_settings() -> Settings:
    """Read the environment now (tests call this after changing variables)."""
    home = Path(os.environ.get("COCKPIT_HOME") or ".cockpit").expanduser().resolve()
    log_level = (os.environ.get("COCKPIT_LOG_LEVEL") or "INFO").upper()
    if log_level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ConfigError(f"COCKPIT_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {log_level!r}")
    log_format = (os.environ.get("COCKPIT_LOG_FORMAT") or "kv").lower()
    if log_format not in {"kv", "json"}:
        raise ConfigError(f"COCKPIT_LOG_FORMAT must be kv or json, got {log_format!r}")
    port = _int("COCKPIT_PORT", 8000)
    if not 0 <= port <= 65535:
        raise ConfigError(f"COCKPIT_PORT must be between 0 and 65535, got {port}")
    return Settings(
        home=home,
        database_url=os.environ.get("COCKPIT_DATABASE_URL") or None,
        host=os.environ.get("COCKPIT_HOST") or "127.0.0.1",
        port=port,
        secret_key_value=os.environ.get("COCKPIT_SECRET_KEY") or None,
        log_level=log_level,
        log_format=log_format,
        secure_cookies=_bool("COCKPIT_SECURE_COOKIES", False),
        allow_private_egress=_bool("COCKPIT_ALLOW_PRIVATE_EGRESS", False),
        workers=WorkerSettings(
            lease_duration_s=_int("COCKPIT_WORKER_LEASE_SECONDS", 60),
            batch_size=_int("COCKPIT_WORKER_BATCH_SIZE", 50),
            tenant_batch_share=_int("COCKPIT_WORKER_TENANT_SHARE", 10),
            heartbeat_interval_s=_int("COCKPIT_WORKER_HEARTBEAT_SECONDS", 5),
            concurrency=_int("COCKPIT_WORKER_CONCURRENCY", 4),
            group_commit=_int("COCKPIT_WORKER_GROUP_COMMIT", 50),
            fast_path=_bool("COCKPIT_WORKER_FAST_PATH", True),
        ),
        trusted_proxies=parse_trusted_proxies(os.environ.get("COCKPIT_TRUSTED_PROXIES")),
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
