"""The attempts an executor watches, shared by the control loop's thread and the API's (stop())."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from loadmaster.platform.executors.base import LaunchError

T = TypeVar("T")
Key = tuple[str, int]  # (job id, attempt)


class AttemptRegistry(Generic[T]):
    """`lock` guards `attempts`. A launch reserves its key and starts the gang without the lock, so a slow
    start (a busy machine, a Ray actor coming up) blocks neither poll() nor stop() of other attempts."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.attempts: dict[Key, T] = {}
        self._starting: set[Key] = set()

    @contextmanager
    def reserve(self, job_id: str, attempt: int) -> Iterator[None]:
        key = (job_id, attempt)
        with self.lock:
            if key in self.attempts or key in self._starting:
                raise LaunchError(f"job {job_id} attempt {attempt} is already running (or starting) here")
            self._starting.add(key)
        try:
            yield
        finally:
            with self.lock:
                self._starting.discard(key)

    def add(self, job_id: str, attempt: int, state: T) -> None:
        with self.lock:
            self.attempts[(job_id, attempt)] = state
