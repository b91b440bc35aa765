"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testing.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real HTTP receiver on 127.0.0.1 that verifies and records every request (testing/receiver.py)."""
    r = Receiver().start()
    try:
        yield r
    finally:
        r.stop()
