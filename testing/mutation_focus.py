"""Narrow the tests mutmut runs per mutated function (docs/testing.md, "Mutation testing").

mutmut runs, for each mutant, every selected test that reached the mutated function when it
collected its statistics. The runner's and the run store's functions are reached by nearly every
integration test that starts a run, so a surviving mutant there costs minutes on a loaded machine.
This script edits mutmut's statistics (``mutants/mutmut-stats.json``) after they are collected:
for the functions matching ``--functions``, tests that took longer than ``--slower-than`` seconds
are left out, unless that would leave the function with no test at all (then the fastest stays).

    uv run python -m testing.mutation_focus --functions "engine.runs.runner.*" --slower-than 10

It prints what it left out. Run it between two ``mutmut run`` invocations (mutmut reads the file
when it starts); ``rm mutants/mutmut-stats.json`` collects everything again.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
from pathlib import Path

STATS = Path("mutants/mutmut-stats.json")


def focus(stats: dict[str, object], patterns: list[str], slower_than: float) -> dict[str, list[str]]:
    """Drop slow tests from the matching functions in place; returns what was dropped per function."""
    by_function = stats["tests_by_mangled_function_name"]
    durations = stats["duration_by_test"]
    assert isinstance(by_function, dict) and isinstance(durations, dict)
    dropped: dict[str, list[str]] = {}
    for name, tests in by_function.items():
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns) or not tests:
            continue
        keep = [t for t in tests if durations.get(t, 0.0) <= slower_than]
        if not keep:
            keep = [min(tests, key=lambda t: durations.get(t, 0.0))]
        gone = sorted(set(tests) - set(keep))
        if gone:
            by_function[name] = sorted(keep)
            dropped[name] = gone
    return dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--functions", action="append", required=True, help="glob over mangled function names")
    parser.add_argument("--slower-than", type=float, default=10.0, help="seconds a test took when collected")
    parser.add_argument("--stats", type=Path, default=STATS)
    args = parser.parse_args()
    stats = json.loads(args.stats.read_text())
    dropped = focus(stats, args.functions, args.slower_than)
    args.stats.write_text(json.dumps(stats, indent=4))
    tests = sorted({t for gone in dropped.values() for t in gone})
    print(f"{len(dropped)} functions narrowed; tests left out of them:")
    for test in tests:
        print(f"  {stats['duration_by_test'].get(test, 0.0):6.1f} s  {test}")


if __name__ == "__main__":
    main()
