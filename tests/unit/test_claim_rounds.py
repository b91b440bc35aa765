"""When a pass claims another round: only while some realm got its whole share (it may have more)."""

from __future__ import annotations

from engine.runs.runstore.leases import Claimed, share_filled


def claims(*realms: str) -> list[Claimed]:
    return [Claimed(f"wrn_{n}", realm) for n, realm in enumerate(realms)]


def test_a_realm_that_got_its_whole_share_may_have_more() -> None:
    assert share_filled(claims("a", "a", "b"), 2)
    assert share_filled(claims("b", "a", "a"), 2)


def test_realms_below_their_share_have_nothing_more_due() -> None:
    assert not share_filled(claims("a", "b", "c"), 2)
    assert not share_filled([], 2)


def test_a_share_below_one_counts_as_one() -> None:
    assert share_filled(claims("a"), 0)
    assert not share_filled([], 0)
