from __future__ import annotations

import stat
from pathlib import Path

import pytest

from engine.platform.config import ConfigError, load_or_create_secret_key, load_settings


def test_defaults_without_any_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(__import__("os").environ):
        if key.startswith("COCKPIT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings.home == tmp_path / ".cockpit"
    assert settings.port == 8000
    assert settings.host == "127.0.0.1"
    assert settings.database_url is None
    assert settings.uses_embedded_database
    assert settings.log_level == "INFO"


def test_secret_key_is_generated_once_with_mode_0600(tmp_path: Path) -> None:
    first = load_or_create_secret_key(tmp_path / "home")
    second = load_or_create_secret_key(tmp_path / "home")
    assert first == second and len(first) >= 48
    mode = stat.S_IMODE((tmp_path / "home" / "secret_key").stat().st_mode)
    assert mode == 0o600


def test_given_secret_key_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path))
    monkeypatch.setenv("COCKPIT_SECRET_KEY", "from-the-environment")
    assert load_settings().secret_key == "from-the-environment"
    assert not (tmp_path / "secret_key").exists()


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("COCKPIT_PORT", "eighty", "COCKPIT_PORT must be an integer"),
        ("COCKPIT_PORT", "70000", "between 0 and 65535"),
        ("COCKPIT_LOG_LEVEL", "chatty", "COCKPIT_LOG_LEVEL"),
        ("COCKPIT_SECURE_COOKIES", "maybe", "true or false"),
        ("COCKPIT_PUBLIC_URL", "cockpit.example.com", "COCKPIT_PUBLIC_URL must be an http"),
        ("COCKPIT_PUBLIC_URL", "ftp://cockpit.example.com", "COCKPIT_PUBLIC_URL must be an http"),
        ("COCKPIT_PUBLIC_URL", "https://cockpit.example.com/?x=1", "COCKPIT_PUBLIC_URL must be an http"),
    ],
)
def test_bad_values_are_refused_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=fragment):
        load_settings()


def test_trusted_proxies_default_to_none_and_refuse_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipaddress import ip_network

    from engine.platform.config import ConfigError, load_settings, parse_trusted_proxies

    monkeypatch.delenv("COCKPIT_TRUSTED_PROXIES", raising=False)
    assert load_settings().trusted_proxies == ()
    assert parse_trusted_proxies(" 10.0.0.0/8, ::1 ,") == (ip_network("10.0.0.0/8"), ip_network("::1"))
    with pytest.raises(ConfigError, match="COCKPIT_TRUSTED_PROXIES"):
        parse_trusted_proxies("proxy.example.com")


def test_the_server_never_reads_proxy_headers_itself() -> None:
    from cockpit.cli import server_config

    config = server_config(object(), "127.0.0.1", 8000)
    assert config.proxy_headers is False


@pytest.mark.parametrize(
    ("peer", "forwarded", "proxies", "client"),
    [
        ("127.0.0.1", "203.0.113.9", (), "127.0.0.1"),  # nobody trusted: the header means nothing
        ("198.51.100.1", "203.0.113.9", ("127.0.0.1",), "198.51.100.1"),  # not from the proxy
        ("127.0.0.1", "203.0.113.9", ("127.0.0.1",), "203.0.113.9"),
        ("127.0.0.1", "6.6.6.6, 203.0.113.9", ("127.0.0.1",), "203.0.113.9"),  # the left part is the client's say
        ("127.0.0.1", "203.0.113.9, 10.0.0.2", ("127.0.0.1", "10.0.0.0/8"), "203.0.113.9"),
        ("127.0.0.1", "not-an-address", ("127.0.0.1",), "127.0.0.1"),
    ],
)
def test_forwarded_for_is_read_from_the_right_past_trusted_proxies(
    peer: str, forwarded: str, proxies: tuple[str, ...], client: str
) -> None:
    from cockpit.boundary import forwarded_client
    from engine.platform.config import parse_trusted_proxies

    assert forwarded_client(peer, forwarded, parse_trusted_proxies(",".join(proxies))) == client


def test_the_public_url_loses_its_trailing_slash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path))
    assert load_settings().public_url is None
    monkeypatch.setenv("COCKPIT_PUBLIC_URL", "https://cockpit.example.com/base/")
    assert load_settings().public_url == "https://cockpit.example.com/base"


@pytest.mark.parametrize(
    ("host", "port", "public_url", "expected"),
    [
        ("127.0.0.1", "8000", None, "http://localhost:8000"),
        ("0.0.0.0", "9000", None, "http://localhost:9000"),
        ("cockpit.internal", "8080", None, "http://cockpit.internal:8080"),
        ("fd00::5", "8000", None, "http://[fd00::5]:8000"),
        ("0.0.0.0", "8000", "https://cockpit.example.com/", "https://cockpit.example.com"),
    ],
)
def test_links_point_at_the_public_url_else_at_the_configured_address(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, host: str, port: str, public_url: str | None, expected: str
) -> None:
    monkeypatch.setenv("COCKPIT_HOME", str(tmp_path))
    monkeypatch.setenv("COCKPIT_HOST", host)
    monkeypatch.setenv("COCKPIT_PORT", port)
    if public_url:
        monkeypatch.setenv("COCKPIT_PUBLIC_URL", public_url)
    else:
        monkeypatch.delenv("COCKPIT_PUBLIC_URL", raising=False)
    assert load_settings().link_base_url == expected


def test_the_review_independence_window_is_30_days_and_0_to_3650(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COCKPIT_REVIEW_INDEPENDENCE_DAYS", raising=False)
    assert load_settings().review_independence_days == 30
    for allowed in ("0", "3650"):
        monkeypatch.setenv("COCKPIT_REVIEW_INDEPENDENCE_DAYS", allowed)
        assert load_settings().review_independence_days == int(allowed)
    for refused in ("-1", "3651", "a month"):
        monkeypatch.setenv("COCKPIT_REVIEW_INDEPENDENCE_DAYS", refused)
        with pytest.raises(ConfigError, match="COCKPIT_REVIEW_INDEPENDENCE_DAYS"):
            load_settings()
