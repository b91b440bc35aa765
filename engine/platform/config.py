"""Settings: one object, read once from ``COCKPIT_*`` environment variables.

Every setting has a documented default (see README "Configuration"), so a fresh clone runs
with no variables at all.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from urllib.parse import unquote, urlsplit

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _resource_root() -> Path:
    """Where ``migrations/``, ``templates/`` and ``static/`` are: the checkout's root, or the
    ``lifecycle_cockpit/`` folder an installed wheel puts beside ``cockpit`` and ``engine``."""
    installed = PROJECT_ROOT / "lifecycle_cockpit"
    return installed if (installed / "migrations").is_dir() else PROJECT_ROOT


RESOURCE_ROOT = _resource_root()


def _version() -> str:
    try:
        return metadata.version("lifecycle-cockpit")
    except metadata.PackageNotFoundError:  # the code alone, not installed
        return "0+unknown"


VERSION = _version()


class ConfigError(Exception):
    """A setting has a value the product cannot use."""


class MailConfigError(ConfigError):
    pass


@dataclass(frozen=True)
class MailSettings:
    """Where mail goes: ``COCKPIT_SMTP_URL`` and ``COCKPIT_MAIL_FROM``."""

    host: str
    port: int
    security: str  # plain | starttls | tls
    username: str | None
    password: str | None
    mail_from: str

    @classmethod
    def parse(cls, url: str | None, mail_from: str | None) -> MailSettings | None:
        """None when mail is not configured; :class:`MailConfigError` for a malformed setting."""
        if not url and not mail_from:
            return None
        if not url or not mail_from:
            raise MailConfigError("COCKPIT_SMTP_URL and COCKPIT_MAIL_FROM are set together, or neither")
        parts = urlsplit(url)
        schemes = {"smtp": ("plain", 25), "smtp+starttls": ("starttls", 587), "smtps": ("tls", 465)}
        if parts.scheme not in schemes or not parts.hostname:
            raise MailConfigError(
                "COCKPIT_SMTP_URL must look like smtp://host:port, smtp+starttls://user:password@host:587"
                " or smtps://host:465"
            )
        security, default_port = schemes[parts.scheme]
        if "@" not in mail_from:
            raise MailConfigError("COCKPIT_MAIL_FROM must be an email address")
        return cls(
            host=parts.hostname,
            port=parts.port or default_port,
            security=security,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            mail_from=mail_from,
        )

    def __repr__(self) -> str:  # never show the password
        return f"MailSettings(host={self.host!r}, port={self.port}, security={self.security!r})"


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
class DeliverySettings:
    """Endpoint calls and webhook deliveries (seed 000: delivery.webhook_timeout)."""

    timeout_ms: int = 10_000  # the ceiling of every call; a step's timeout_ms can only lower it
    max_attempts: int = 8  # tries of one event delivery before it is failed
    backoff_ms: int = 10_000  # first retry wait, doubling per try, capped at 6 hours, 20 % jitter
    concurrency: int = 8  # deliveries in flight per worker process (one per subscription at a time)
    ca_bundle: Path | None = None  # COCKPIT_WEBHOOK_CA_BUNDLE: more CAs trusted for https endpoints


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
    deliveries: DeliverySettings = field(default_factory=DeliverySettings)
    # Addresses (or CIDR networks) of the reverse proxies whose X-Forwarded-For is believed.
    trusted_proxies: tuple[IPv4Network | IPv6Network, ...] = ()
    # /metrics asks for this bearer token when set (COCKPIT_METRICS_TOKEN); open otherwise.
    metrics_token: str | None = field(default=None, repr=False)
    # The address people reach the cockpit at (COCKPIT_PUBLIC_URL, e.g. https://cockpit.example.com):
    # links in mailed notices are made whole with it; without it they carry the path only.
    public_url: str | None = None
    # Where processes write their Prometheus counters (multiprocess mode); COCKPIT_METRICS_DIR.
    metrics_dir_value: str | None = None

    @property
    def metrics_dir(self) -> Path:
        return Path(self.metrics_dir_value).expanduser().resolve() if self.metrics_dir_value else self.home / "metrics"

    # Finished runs (with their attempts) are deleted this many days after they ended.
    run_retention_days: int = 180

    # A reviewer whose authority comes from what the author made this many days back or less is
    # not independent (engine/directory/independence.py); COCKPIT_REVIEW_INDEPENDENCE_DAYS.
    review_independence_days: int = 30

    # Mail for notices (COCKPIT_SMTP_URL, COCKPIT_MAIL_FROM); None: notices are recorded, not sent.
    mail: MailSettings | None = None

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
    def link_base_url(self) -> str:
        """Where the links people open point (sign-in links): ``COCKPIT_PUBLIC_URL``, else the
        address the web server is configured to listen at. Never a request's ``Host`` header,
        which whoever sends the request chooses."""
        if self.public_url:
            return self.public_url
        host = "localhost" if self.host in {"127.0.0.1", "0.0.0.0", "::"} else self.host  # noqa: S104
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

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
        deliveries=_delivery_settings(),
        trusted_proxies=parse_trusted_proxies(os.environ.get("COCKPIT_TRUSTED_PROXIES")),
        metrics_token=os.environ.get("COCKPIT_METRICS_TOKEN") or None,
        public_url=_public_url(),
        metrics_dir_value=os.environ.get("COCKPIT_METRICS_DIR") or None,
        run_retention_days=_retention_days(),
        review_independence_days=_review_independence_days(),
        mail=parse_mail(os.environ.get("COCKPIT_SMTP_URL"), os.environ.get("COCKPIT_MAIL_FROM")),
    )


def _public_url() -> str | None:
    raw = (os.environ.get("COCKPIT_PUBLIC_URL") or "").strip()
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ConfigError(
            f"COCKPIT_PUBLIC_URL must be an http(s) address such as https://cockpit.example.com, got {raw!r}"
        )
    return raw.rstrip("/")


def _retention_days() -> int:
    days = _int("COCKPIT_RUN_RETENTION_DAYS", 180)
    if days < 1:
        raise ConfigError(f"COCKPIT_RUN_RETENTION_DAYS must be at least 1, got {days}")
    return days


def _review_independence_days() -> int:
    days = _int("COCKPIT_REVIEW_INDEPENDENCE_DAYS", 30)
    if not 0 <= days <= 3650:
        raise ConfigError(f"COCKPIT_REVIEW_INDEPENDENCE_DAYS must be between 0 and 3650, got {days}")
    return days


def _delivery_settings() -> DeliverySettings:
    timeout_ms = _int("COCKPIT_WEBHOOK_TIMEOUT_MS", 10_000)
    if not 100 <= timeout_ms <= 60_000:
        raise ConfigError(f"COCKPIT_WEBHOOK_TIMEOUT_MS must be between 100 and 60000, got {timeout_ms}")
    max_attempts = _int("COCKPIT_DELIVERY_MAX_ATTEMPTS", 8)
    if not 1 <= max_attempts <= 20:
        raise ConfigError(f"COCKPIT_DELIVERY_MAX_ATTEMPTS must be between 1 and 20, got {max_attempts}")
    concurrency = _int("COCKPIT_DELIVERY_CONCURRENCY", 8)
    if not 1 <= concurrency <= 100:
        raise ConfigError(f"COCKPIT_DELIVERY_CONCURRENCY must be between 1 and 100, got {concurrency}")
    ca_bundle: Path | None = None
    raw_bundle = (os.environ.get("COCKPIT_WEBHOOK_CA_BUNDLE") or "").strip()
    if raw_bundle:
        ca_bundle = Path(raw_bundle).expanduser().resolve()
        if not ca_bundle.is_file():
            raise ConfigError(f"COCKPIT_WEBHOOK_CA_BUNDLE must name a PEM file of CA certificates, got {raw_bundle!r}")
    return DeliverySettings(
        ca_bundle=ca_bundle,
        timeout_ms=timeout_ms,
        max_attempts=max_attempts,
        backoff_ms=_int("COCKPIT_DELIVERY_BACKOFF_MS", 10_000),
        concurrency=concurrency,
    )


def parse_mail(url: str | None, mail_from: str | None) -> MailSettings | None:
    try:
        return MailSettings.parse(url, mail_from)
    except MailConfigError as exc:
        raise ConfigError(str(exc)) from exc


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
