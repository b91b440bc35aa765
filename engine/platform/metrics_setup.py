"""Choose prometheus-client's multiprocess folder before prometheus-client is imported.

prometheus-client decides at import whether values live in the process or in memory-mapped files
(``PROMETHEUS_MULTIPROC_DIR``). This module imports nothing of it, so the CLI can call
:func:`use_multiprocess_dir` first; ``engine.runs.metrics`` explains the arrangement.
"""

from __future__ import annotations

import os
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def use_multiprocess_dir(path: Path, *, clear: bool = False) -> Path:
    """Count in ``path`` (multiprocess mode) unless the operator chose a folder already.

    ``clear`` removes the files of earlier processes (``cockpit up`` does, once, before it starts
    its children, so the counters start from zero with the service).
    """
    chosen = Path(os.environ.get(MULTIPROC_ENV) or path)
    chosen.mkdir(parents=True, exist_ok=True)
    if clear:
        for old in chosen.glob("*.db"):
            old.unlink(missing_ok=True)
    os.environ[MULTIPROC_ENV] = str(chosen)
    return chosen


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None
