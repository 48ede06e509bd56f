"""Data in, results out: copies between a job's directories and the fsspec URLs of its manifest.

Local paths and file:// URLs work as they are; s3://, gs://, ... work once the user installs that fsspec
backend (s3fs, gcsfs, ...). Errors become StagingError with a message that says what to fix, and a flag
telling whether the source was missing (the user's input, not worth retrying) or the copy itself failed
(possibly transient).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class StagingError(RuntimeError):
    """A copy that failed. `missing` is True when the source does not exist (incorrect input)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True, slots=True)
class Staged:
    files: int
    bytes: int


def _filesystem(url: str, field: str) -> tuple[Any, str]:
    import fsspec  # type: ignore[import-untyped]

    try:
        fs, path = fsspec.core.url_to_fs(url)
        return fs, str(path)
    except ImportError as err:  # a known protocol whose backend is not installed
        raise StagingError(f"{field} {url!r}: {err} (pip install the fsspec backend for it)") from None
    except ValueError as err:  # an unknown protocol
        raise StagingError(f"{field} {url!r}: {err}; use a local path, file://, or an installed fsspec "
                           "protocol", missing=True) from None


def _count(root: Path) -> Staged:
    files = [p for p in root.rglob("*") if p.is_file()]
    return Staged(len(files), sum(p.stat().st_size for p in files))


def stage_in(url: str, dest: Path) -> Staged:
    """Copy the data source `url` (a file or a directory) into `dest`, replacing what a previous try left.

    A directory's contents land in `dest`; a single file lands in `dest` under its own name.
    """
    fs, path = _filesystem(url, "data")
    try:
        if not fs.exists(path):
            raise StagingError(f"data {url!r} does not exist; check the manifest's data field", missing=True)
        if dest.exists():
            shutil.rmtree(dest)  # a download interrupted by a restart is redone from scratch
        dest.mkdir(parents=True)
        if fs.isdir(path):
            fs.get(path.rstrip("/") + "/", str(dest) + "/", recursive=True)
        else:
            fs.get(path, str(dest / Path(path).name))
    except StagingError:
        raise
    except FileNotFoundError as err:
        raise StagingError(f"data {url!r}: {err}", missing=True) from None
    except (OSError, RuntimeError, ValueError) as err:
        raise StagingError(f"data {url!r}: copying failed: {err.__class__.__name__}: {err}") from None
    return _count(dest)


def stage_out(src: Path, url: str) -> Staged:
    """Copy the contents of the results directory `src` to the directory `url` (created if missing)."""
    fs, path = _filesystem(url, "results")
    src.mkdir(parents=True, exist_ok=True)  # a job that wrote no results still gets its (empty) target
    try:
        fs.makedirs(path, exist_ok=True)
        if any(src.iterdir()):
            fs.put(str(src) + "/", path.rstrip("/") + "/", recursive=True)
    except (OSError, RuntimeError, ValueError) as err:
        raise StagingError(f"results {url!r}: copying failed: {err.__class__.__name__}: {err}") from None
    return _count(src)
