"""Atomic checkpoints with a naming scheme the platform can read.

A checkpoint is one file, `step-{step:012d}.ckpt`, in the job's checkpoint directory. It is written under
a temporary name (`.step-{step:012d}.ckpt.tmp-<pid>-<random>`), flushed to disk and renamed into place, so
a checkpoint under its final name is always complete: a learner killed mid-write leaves only a temporary
file, which `latest_checkpoint()` never returns. The step in the name is what the platform reads to know
how far a job got (`latest_checkpoint()` + `checkpoint_step()`), without opening the file.

Which learner writes is the caller's choice; the usual one is rank 0 after the gradients were averaged.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from loadmaster.runtime.context import current, whole_step

DEFAULT_CHECKPOINT_DIR = Path("checkpoints")
_NAME = re.compile(r"^step-(\d+)\.ckpt$")
_TEMP = re.compile(r"^\.step-(\d+)\.ckpt\.tmp-")

# What save_checkpoint() accepts: the bytes to store, or a function that writes the file at the path it
# is given (e.g. `lambda path: torch.save(state, path)`), so large states need not pass through memory twice.
CheckpointWriter = Callable[[Path], object]


def checkpoint_dir(default: str | os.PathLike[str] | None = None) -> Path:
    """The job's checkpoint directory, created if missing.

    Under the platform it is LOADMASTER_CHECKPOINT_DIR, which outlives attempts and wins over `default`
    (the platform resumes from what is there). Outside it: `default`, else ./checkpoints.
    """
    chosen = current().checkpoint_dir
    if chosen is None:
        chosen = Path(default) if default is not None else DEFAULT_CHECKPOINT_DIR
    chosen.mkdir(parents=True, exist_ok=True)
    return chosen


def checkpoint_name(step: int) -> str:
    return f"step-{whole_step(step, 'the checkpoint step'):012d}.ckpt"


def checkpoint_step(path: str | os.PathLike[str]) -> int:
    """The step a checkpoint was saved at, read from its name."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{os.fspath(path)!r} is not a checkpoint name; checkpoints are named step-<step>.ckpt")
    return int(match.group(1))


def list_checkpoints(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The complete checkpoints in `directory` (default: checkpoint_dir()), oldest step first."""
    folder = _folder(directory)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), entry) for entry in folder.iterdir() if (m := _NAME.match(entry.name))]
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike[str] | None = None) -> Path | None:
    """The newest complete checkpoint, or None if there is none yet (a fresh start)."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def save_checkpoint(
    state: bytes | CheckpointWriter,
    step: int,
    *,
    directory: str | os.PathLike[str] | None = None,
    keep: int | None = 3,
) -> Path:
    """Write the checkpoint of `step` atomically and return its path.

    `state` is the bytes to store or a function writing the file at the path it receives. Saving a step
    again replaces that checkpoint atomically. `keep` complete checkpoints (newest steps) are kept, older
    ones removed; None keeps all. Temporary files of steps older than the newest checkpoint (left by
    learners killed while writing) are removed too.
    """
    if keep is not None and keep < 1:
        raise ValueError(f"keep={keep} must be at least 1 (or None to keep every checkpoint)")
    folder = _folder(directory)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / checkpoint_name(step)
    temp = folder / f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        if isinstance(state, bytes | bytearray | memoryview):
            with temp.open("wb") as out:
                out.write(state)
        else:
            state(temp)
            if not temp.is_file():
                raise ValueError(f"the checkpoint writer wrote no file at {temp}; it must write the path it is given")
        _fsync_file(temp)
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(folder)  # the rename itself must survive a crash, not only the data
    _prune(folder, keep)
    return final


def _folder(directory: str | os.PathLike[str] | None) -> Path:
    return checkpoint_dir() if directory is None else Path(directory)


def _fsync_file(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _prune(folder: Path, keep: int | None) -> None:
    complete = list_checkpoints(folder)
    if not complete:
        return
    newest = checkpoint_step(complete[-1])
    if keep is not None:
        for old in complete[:-keep]:
            old.unlink(missing_ok=True)
    for entry in folder.iterdir():
        torn = _TEMP.match(entry.name)
        # Only steps below the newest: a temporary of the newest step may be another writer's, in flight.
        if torn is not None and int(torn.group(1)) < newest:
            entry.unlink(missing_ok=True)
