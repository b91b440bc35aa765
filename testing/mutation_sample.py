"""A random sample of mutants to run, for a score measured in less time (docs/testing.md).

Every ``mutmut run`` first writes the mutants of every configured module and their results to
``mutants/<module>.py.meta``. For a module too large to run whole (the runner has over 2,000
mutants, hours of the machine), a random sample gives a score with a known margin and survivors
that are representative of the whole module — mutmut itself runs the cheapest mutants first, so
stopping a whole run early measures only the functions that few tests reach.

    uv run python -m testing.mutation_sample --module engine/runs/runner.py --size 350 > names.txt
    xargs -d '\\n' -a names.txt uv run mutmut run --max-children 2

With ``--score`` it reads the results back instead: for the names in the file, how many were
killed, survived or not run yet, with a 95 % Wilson interval for the module's score.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

MUTANTS = Path("mutants")


def results(module: str) -> dict[str, int | None]:
    """Each mutant of ``module`` (a path such as engine/runs/runner.py) and its exit code (None: not run)."""
    meta = json.loads((MUTANTS / f"{module}.meta").read_text())
    by_key: dict[str, int | None] = meta["exit_code_by_key"]
    return by_key


def sample(modules: list[str], size: int, seed: int) -> list[str]:
    """``size`` mutant names drawn without replacement from the modules' mutants together."""
    names = sorted(name for module in modules for name in results(module))
    return random.Random(seed).sample(names, min(size, len(names)))


def wilson(killed: int, run: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion, in percent."""
    if run == 0:
        return 0.0, 100.0
    p = killed / run
    denominator = 1 + z * z / run
    centre = (p + z * z / (2 * run)) / denominator
    half = z * math.sqrt(p * (1 - p) / run + z * z / (4 * run * run)) / denominator
    return 100 * (centre - half), 100 * (centre + half)


def score(modules: list[str], names: list[str]) -> str:
    codes: dict[str, int | None] = {}
    for module in modules:
        codes |= results(module)
    picked = [codes.get(name) for name in names if name in codes]
    not_run = sum(1 for code in picked if code is None)
    no_tests = sum(1 for code in picked if code == 33)
    survived = sum(1 for code in picked if code == 0)
    killed = len(picked) - not_run - no_tests - survived
    run = killed + survived
    low, high = wilson(killed, run)
    share = f"{100 * killed / run:.0f} %" if run else "-"
    return (
        f"{len(picked)} sampled: {killed} killed, {survived} survived, {no_tests} reached by no test, "
        f"{not_run} not run yet; score {share} (95 % interval {low:.0f}–{high:.0f} %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", action="append", required=True, help="a mutated file, e.g. engine/runs/runner.py")
    parser.add_argument("--size", type=int, default=350)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--score", type=Path, help="a file of names printed earlier: report their results")
    args = parser.parse_args()
    if args.score:
        names = [line.strip() for line in args.score.read_text().splitlines() if line.strip()]
        print(score(args.module, names))
        return
    sys.stdout.write("\n".join(sample(args.module, args.size, args.seed)) + "\n")


if __name__ == "__main__":
    main()
