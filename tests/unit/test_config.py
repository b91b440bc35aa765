from __future__ import annotations

import stat
from pathlib import Path

import pytest

from engine.config import ConfigError, load_or_create_secret_key, load_settings


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
    ],
)
def test_bad_values_are_refused_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=fragment):
        load_settings()
