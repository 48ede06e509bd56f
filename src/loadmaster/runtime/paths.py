"""Where a learner reads its data and writes its results."""

from __future__ import annotations

import os
from pathlib import Path

from loadmaster.runtime.context import current

DEFAULT_RESULTS_DIR = Path("results")


def data_dir() -> Path | None:
    """Where the platform staged the job's data source; None when the job has none (or runs alone)."""
    return current().data_dir


def results_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """Where to write results, created if missing.

    Under the platform it is LOADMASTER_RESULTS_DIR (copied to the job's results target when it ends),
    which wins over `default`. Outside it: `default`, else ./results.
    """
    chosen = current().results_dir
    if chosen is None:
        chosen = Path(default) if default is not None else DEFAULT_RESULTS_DIR
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen
