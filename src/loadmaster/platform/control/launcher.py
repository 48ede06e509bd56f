"""Gang launches run beside the loop: starting learners takes the executor tens to hundreds of milliseconds
per gang (processes to spawn, a supervisor to report in), which must not stretch a round. A few threads
call executor.launch(); the loop collects the handles (or the launch errors) at its next round, which
the finished launch brings forward by waking the loop. A result stays here until the loop has committed
what it means (forget()): a round whose transaction fails finds it again at the next."""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadmaster.platform import code
from loadmaster.platform.executors.base import AttemptSpec, Executor, LaunchError


@dataclass(frozen=True, slots=True)
class Launched:
    job_id: str
    attempt: int
    handle: dict[str, Any] | None  # None when it failed
    error: LaunchError | None


class Launcher:
    def __init__(self, executor: Executor, wake: Callable[[], None], workers: int = 8) -> None:
        self._executor = executor
        self._wake = wake
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loadmaster-launch")
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], Future[dict[str, Any]]] = {}
        self._done: dict[tuple[str, int], Launched] = {}
        self.closed = False

    def launch(self, spec: AttemptSpec, prepare: Callable[[], None] | None = None) -> None:
        """Launch the gang in a launch thread, after prepare() (the job's directories: file system work that
        need not hold up the loop's round)."""
        future = self._pool.submit(self._launch, spec, prepare)
        with self._lock:
            self._running[(spec.job_id, spec.attempt)] = future
        future.add_done_callback(lambda _: self._wake())

    def _launch(self, spec: AttemptSpec, prepare: Callable[[], None] | None) -> dict[str, Any]:
        if prepare is not None:
            try:
                prepare()
            except OSError as err:  # a full disk, a lost mount: not the job's fault, it stays queued
                raise LaunchError(f"job {spec.job_id}: cannot prepare its directories: {err}") from None
        if spec.code_archive is not None and spec.code_dir is not None:
            # Unpacked here, not in the loop: a large package takes a while. Every attempt gets a fresh copy.
            try:
                code.unpack(Path(spec.code_archive), Path(spec.code_dir), spec.run_as)
            except FileNotFoundError:
                raise LaunchError(f"job {spec.job_id}: its code package {spec.code_archive} is gone from the "
                                  "server's data directory; submit the job again", user_error=True) from None
            except (OSError, tarfile.TarError) as err:  # a full disk: not the job's fault, it stays queued
                raise LaunchError(f"job {spec.job_id}: cannot unpack its code package: {err}") from None
        return self._executor.launch(spec)

    def results(self) -> list[Launched]:
        """Launches that finished and were not forgotten yet."""
        with self._lock:
            for key, future in list(self._running.items()):
                if not future.done():
                    continue
                del self._running[key]
                err = future.exception()
                if err is None:
                    self._done[key] = Launched(*key, future.result(), None)
                elif isinstance(err, LaunchError):
                    self._done[key] = Launched(*key, None, err)
                else:  # an OSError, or an executor bug: the gang did not start; say so rather than lose it
                    self._done[key] = Launched(*key, None, LaunchError(
                        f"the executor failed: {err.__class__.__name__}: {err}"))
            return list(self._done.values())

    def forget(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._done.pop(key, None)

    def pending(self) -> int:
        with self._lock:
            return len(self._running)

    def under_way(self) -> int:
        """Launches not finished yet (pending() also counts those finished but not collected)."""
        with self._lock:
            return sum(not future.done() for future in self._running.values())

    def wait(self, timeout_s: float) -> None:
        """Block until the launches under way have finished (shutdown, tests)."""
        with self._lock:
            futures = list(self._running.values())
        for future in futures:
            future.exception(timeout=timeout_s)

    def close(self) -> None:
        self.closed = True
        self._pool.shutdown(wait=True, cancel_futures=False)  # a launch half done would leave learners unknown
