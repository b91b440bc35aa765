"""The mutation sample's interval and its reproducible draw (testing/mutation_sample.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testing import mutation_sample


def test_the_wilson_interval_matches_known_values() -> None:
    low, high = mutation_sample.wilson(80, 100)
    assert (round(low, 1), round(high, 1)) == (71.1, 86.7)
    assert mutation_sample.wilson(0, 0) == (0.0, 100.0)
    low, high = mutation_sample.wilson(10, 10)
    assert high == pytest.approx(100.0) and round(low, 1) == 72.2


def test_a_sample_is_drawn_again_the_same_and_scored_from_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = tmp_path / "mutants" / "engine" / "m.py.meta"
    meta.parent.mkdir(parents=True)
    codes = {f"engine.m.x_f__mutmut_{n}": code for n, code in enumerate([1, 1, 1, 0, None, 33, 1, 0, 1, 1])}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    monkeypatch.setattr(mutation_sample, "MUTANTS", tmp_path / "mutants")
    first = mutation_sample.sample(["engine/m.py"], 5, seed=7)
    assert first == mutation_sample.sample(["engine/m.py"], 5, seed=7) and len(set(first)) == 5
    assert mutation_sample.sample(["engine/m.py"], 50, seed=7) != first  # capped at the module's ten
    report = mutation_sample.score(["engine/m.py"], sorted(codes))
    assert report.startswith("10 sampled: 6 killed, 2 survived, 1 reached by no test, 1 not run yet; score 75 %")
