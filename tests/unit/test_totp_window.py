"""A TOTP code's window: the step before, the current one and the one after; a used step never again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyotp
import pytest

from engine.directory import mfa
from engine.directory.mfa import verify_totp_code
from engine.platform.clock import FixedClock

SECRET = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"
MOMENT = datetime(2026, 1, 1, 12, 0, 15, tzinfo=UTC)  # the middle of a 30-second step
TOTP = pyotp.TOTP(SECRET)
CURRENT = int(MOMENT.timestamp()) // 30


def code_of(step: int) -> str:
    return TOTP.at(step * 30)


def test_the_step_before_the_current_and_the_one_after_are_accepted_and_no_other() -> None:
    assert TOTP.interval == 30
    for offset in (-1, 0, 1):
        assert verify_totp_code(SECRET, code_of(CURRENT + offset), None, MOMENT) == CURRENT + offset
    for offset in (-3, -2, 2, 3):
        assert verify_totp_code(SECRET, code_of(CURRENT + offset), None, MOMENT) is None


def test_a_step_is_counted_from_the_moment_in_thirty_seconds() -> None:
    """At the first and the last second of a step, its code is the current one."""
    start = datetime.fromtimestamp(CURRENT * 30, UTC)
    for at in (start, start + timedelta(seconds=29)):
        assert verify_totp_code(SECRET, code_of(CURRENT + 1), None, at) == CURRENT + 1
        assert verify_totp_code(SECRET, code_of(CURRENT - 2), None, at) is None
    # a second later the window has moved one step on
    assert verify_totp_code(SECRET, code_of(CURRENT - 1), None, start + timedelta(seconds=30)) is None
    assert verify_totp_code(SECRET, code_of(CURRENT + 2), None, start + timedelta(seconds=30)) == CURRENT + 2


def test_a_used_step_and_the_steps_before_it_are_refused() -> None:
    assert verify_totp_code(SECRET, code_of(CURRENT), CURRENT, MOMENT) is None
    assert verify_totp_code(SECRET, code_of(CURRENT - 1), CURRENT, MOMENT) is None
    assert verify_totp_code(SECRET, code_of(CURRENT + 1), CURRENT, MOMENT) == CURRENT + 1
    assert verify_totp_code(SECRET, code_of(CURRENT), CURRENT - 1, MOMENT) == CURRENT
    assert verify_totp_code(SECRET, code_of(CURRENT - 1), CURRENT - 2, MOMENT) == CURRENT - 1
    assert verify_totp_code(SECRET, code_of(CURRENT + 1), CURRENT + 1, MOMENT) is None


def test_a_code_may_have_spaces_and_must_be_six_digits() -> None:
    code = code_of(CURRENT)
    assert verify_totp_code(SECRET, f" {code[:3]} {code[3:]} ", None, MOMENT) == CURRENT
    assert verify_totp_code(SECRET, f"\t{code}\n", None, MOMENT) == CURRENT
    for wrong in ("", code[:5], code + "0", "0" + code, code[:5] + "x", "abcdef"):
        assert verify_totp_code(SECRET, wrong, None, MOMENT) is None, wrong


def test_without_a_moment_the_clock_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mfa, "SYSTEM_CLOCK", FixedClock(MOMENT))
    assert verify_totp_code(SECRET, code_of(CURRENT + 1), None) == CURRENT + 1
    assert verify_totp_code(SECRET, code_of(CURRENT + 2), None) is None
