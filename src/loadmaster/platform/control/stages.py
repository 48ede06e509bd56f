"""DOWNLOADING and STORING run beside the loop: copies can take minutes, a round must take milliseconds.

A small thread pool does the copies (platform/staging.py); the loop collects what finished at its next
round (the pool wakes it), and a result stays here until the loop has committed what it means. A copy
whose job moved on meanwhile (cancelled, halted) is still collected, and the loop ignores it; the copy
itself is never interrupted halfway (a half-staged data directory is replaced by the next try).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from loadmaster.platform.staging import Staged, StagingError, copy_as
from loadmaster.platform.tenancy import RunAs


class StageKind(StrEnum):
    DOWNLOAD = "download"
    UPLOAD = "upload"


@dataclass(frozen=True, slots=True)
class StageDone:
    kind: StageKind
    job_id: str
    attempt: int
    url: str
    staged: Staged | None  # None when it failed
    error: StagingError | None


def _copy(refusal: str | None, run_as: RunAs | None, kind: StageKind, url: str, local: Path) -> Staged:
    if refusal is not None:  # the job's paths are outside its tenant's roots now
        raise StagingError(refusal, missing=True)
    return copy_as(run_as, kind.value, url, local)


class Stager:
    def __init__(self, wake: Callable[[], None], workers: int = 2) -> None:
        self._wake = wake
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loadmaster-stage")
        self._lock = threading.Lock()
        self._running: dict[tuple[StageKind, str], tuple[int, str, Future[Staged]]] = {}
        self._done: dict[tuple[StageKind, str], StageDone] = {}
        self.closed = False

    def download(self, job_id: str, attempt: int, url: str, dest: Path, *, run_as: RunAs | None = None,
                 refusal: str | None = None) -> None:
        """run_as: copy as that OS user (a tenant's), so that the copy has its rights and no more."""
        self._submit(StageKind.DOWNLOAD, job_id, attempt, url,
                     lambda: _copy(refusal, run_as, StageKind.DOWNLOAD, url, dest))

    def upload(self, job_id: str, attempt: int, src: Path, url: str, *, run_as: RunAs | None = None,
               refusal: str | None = None) -> None:
        self._submit(StageKind.UPLOAD, job_id, attempt, url,
                     lambda: _copy(refusal, run_as, StageKind.UPLOAD, url, src))

    def busy(self, kind: StageKind, job_id: str) -> bool:
        with self._lock:
            return (kind, job_id) in self._running

    def _submit(self, kind: StageKind, job_id: str, attempt: int, url: str, copy: Callable[[], Staged]) -> None:
        future = self._pool.submit(copy)
        with self._lock:
            self._running[(kind, job_id)] = (attempt, url, future)
        future.add_done_callback(lambda _: self._wake())

    def results(self) -> list[StageDone]:
        """Copies that finished and were not forgotten yet (a round whose transaction fails finds them
        again at the next)."""
        with self._lock:
            for key, (attempt, url, future) in list(self._running.items()):
                if not future.done():
                    continue
                del self._running[key]
                kind, job_id = key
                err = future.exception()
                if err is None:
                    done = StageDone(kind, job_id, attempt, url, future.result(), None)
                elif isinstance(err, StagingError):
                    done = StageDone(kind, job_id, attempt, url, None, err)
                else:  # a bug or an unexpected library error: reported as a failed copy, never lost
                    done = StageDone(kind, job_id, attempt, url, None,
                                     StagingError(f"{url}: {err.__class__.__name__}: {err}"))
                self._done[key] = done
            return list(self._done.values())

    def forget(self, done: StageDone) -> None:
        with self._lock:
            if self._done.get((done.kind, done.job_id)) is done:
                del self._done[(done.kind, done.job_id)]

    def close(self) -> None:
        """Stop taking copies; those under way finish in their threads (recover() redoes what is cut short)."""
        self.closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
