"""Where an attempt's per-learner files live, and how they are written so that a reader never sees half.

The layout is base.py's contract (log_dir/rank-{r}.log, .exit, report_dir/rank-{r}.jsonl) plus files of the
executor's own in log_dir: rank-{r}.pid (the shim's record of the processes it runs, JSON), `preempt` (the
stop request a learner polls; JSON saying why and when SIGKILL follows), the lock the shim holds for its whole
life (flock on its rank-{r}.log; rank-{r}.lock, a file of its own, before) and `fence` (written when a
restarted server finds a rank that never started: a shim that comes up after it refuses to run, so a launch
cut short by a crash never runs late, beside its retry). Remote executors use the same layout in a scratch
directory on the learner's machine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREEMPT_NAME = "preempt"
FENCE_NAME = "fence"


@dataclass(frozen=True, slots=True)
class AttemptFiles:
    log_dir: Path
    report_dir: Path

    def log(self, rank: int) -> Path:
        return self.log_dir / f"rank-{rank}.log"

    def exit(self, rank: int) -> Path:
        return self.log_dir / f"rank-{rank}.exit"

    def pid(self, rank: int) -> Path:
        return self.log_dir / f"rank-{rank}.pid"

    def report(self, rank: int) -> Path:
        return self.report_dir / f"rank-{rank}.jsonl"

    def lock(self, rank: int) -> Path:
        """The file a rank's shim holds locked (flock) for its whole life: its log, which exists from before
        the shim starts (a lock file of its own was one more inode per learner)."""
        return self.log_dir / f"rank-{rank}.log"

    def legacy_lock(self, rank: int) -> Path:
        """Where shims of earlier versions held their lock (still honoured: one may run across an upgrade)."""
        return self.log_dir / f"rank-{rank}.lock"

    @property
    def preempt(self) -> Path:
        return self.log_dir / PREEMPT_NAME

    @property
    def fence(self) -> Path:
        return self.log_dir / FENCE_NAME

    def make_dirs(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.report_dir.mkdir(parents=True, exist_ok=True)


def write_atomic(path: Path, text: str, *, durable: bool = True) -> None:
    """Write via a temporary file and rename: readers see the old state or the whole new file. durable=False
    leaves out the fsync, for a file whose meaning ends with the machine's boot anyway (a shim's pid file names
    processes by pid and boot id: after a crash of the machine, what fsync guards against, it names nothing)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def read_exit_code(path: Path) -> int | None:
    """The code in an exit file; None while there is none (or it cannot be read as one)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def read_from(path: Path, offset: int, limit: int) -> bytes:
    """Up to `limit` bytes of `path` from `offset` (b"" when the file is missing or has no more)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except OSError:
        return b""


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0
