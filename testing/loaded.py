"""Run the test suite several times in a row on a deliberately loaded machine.

Two CPU burners (busy loops in their own processes) run for the whole time; each burner stops
by itself after ``--max-minutes`` whatever happens, and all of them are killed at the end. The
suite must pass every time: no test may depend on an idle machine.

    uv run python -m testing.loaded                      # the whole suite, 3 runs, 2 burners
    uv run python -m testing.loaded --runs 1 -- tests/unit tests/integration/test_runner.py

Each run's output goes to ``.cockpit/loaded/run-<n>.log``; a summary line per run is printed.
The exit status is 0 only when every run passed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.platform.config import PROJECT_ROOT

BURN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def start_burners(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", BURN.format(seconds=seconds)], start_new_session=True)
        for _ in range(count)
    ]


def stop_burners(burners: list[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        if burner.poll() is None:
            os.killpg(burner.pid, signal.SIGKILL)
        burner.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.loaded", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="times to run the suite (default 3)")
    parser.add_argument("--burners", type=int, default=2, help="CPU burner processes (default 2)")
    parser.add_argument(
        "--max-minutes", type=float, default=240, help="hard limit for the whole thing; burners stop then (default 240)"
    )
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest after `--` (default: the whole suite)")
    args = parser.parse_args(argv)
    if not 1 <= args.runs <= 20 or not 0 <= args.burners <= 8:
        parser.error("--runs is 1-20 and --burners 0-8")
    logs = PROJECT_ROOT / ".cockpit" / "loaded"
    logs.mkdir(parents=True, exist_ok=True)
    budget = args.max_minutes * 60
    started = time.monotonic()
    burners = start_burners(args.burners, budget)
    results: list[tuple[int, int, float]] = []
    try:
        for n in range(1, args.runs + 1):
            left = budget - (time.monotonic() - started)
            if left <= 0:
                print(f"run {n}: not started, the {args.max_minutes} min limit is reached", flush=True)
                results.append((n, -1, 0.0))
                break
            log = logs / f"run-{n}.log"
            began = time.monotonic()
            with log.open("wb") as out:
                suite = subprocess.Popen(
                    [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args.pytest_args],
                    cwd=PROJECT_ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                try:
                    code = suite.wait(timeout=left)
                except subprocess.TimeoutExpired:
                    os.killpg(suite.pid, signal.SIGKILL)
                    suite.wait()
                    code = -1
            took = time.monotonic() - began
            results.append((n, code, took))
            tail = _last_line(log)
            print(f"run {n}: exit {code} in {took / 60:.1f} min with {args.burners} burners — {tail}", flush=True)
    finally:
        stop_burners(burners)
    passed = sum(1 for _, code, _ in results if code == 0)
    print(f"{passed}/{args.runs} runs passed; logs in {logs}", flush=True)
    return 0 if passed == args.runs else 1


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "(no output)"


if __name__ == "__main__":
    raise SystemExit(main())
