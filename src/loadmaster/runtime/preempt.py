"""should_preempt(): has the platform asked this learner to stop?

The platform's stop protocol (platform/executors/base.py) creates the preempt file, then sends SIGTERM to
the learner, then SIGKILL after a grace period. A learner polls should_preempt() between steps and, once
it is true, checkpoints and exits 0; its next attempt resumes from that checkpoint.

SIGTERM's default action would kill the learner before it could checkpoint, so the runtime catches it: the
handler is installed by init() or by the first should_preempt() call (install it early with init(), or a
SIGTERM that arrives before would still kill). After that, SIGTERM only raises the flag; a handler that
was installed before ours is still called (chained). The flag is sticky: once true, it stays true.
"""

from __future__ import annotations

import signal
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

from loadmaster.runtime.context import current

_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class _StopWatcher:
    """Whether a stop was requested (SIGTERM or the preempt file).

    Signal dispositions belong to the process, so there is one watcher per process: module state by
    necessity, not by convenience.
    """

    def __init__(self) -> None:
        self.requested = False
        self.installed = False
        self._previous: _Handler = None
        self._lock = threading.Lock()

    def install(self) -> bool:
        """Install the handler once; False when that is impossible here (not the main thread)."""
        with self._lock:
            if self.installed:
                return True
            if threading.current_thread() is not threading.main_thread():
                # signal.signal() only works in the main thread; the preempt file still works from here.
                warnings.warn(
                    "loadmaster.runtime: SIGTERM cannot be watched from a thread other than the main one; "
                    "call loadmaster.runtime.init() from the main thread at start-up",
                    RuntimeWarning,
                    stacklevel=3,
                )
                return False
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self.installed = True
            return True

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        previous = self._previous
        # SIG_DFL would terminate (what we are here to prevent) and SIG_IGN does nothing: chain only callables.
        if callable(previous):
            previous(signum, frame)


_WATCHER = _StopWatcher()


def watch_sigterm() -> bool:
    """Install the SIGTERM handler (idempotent). False if it cannot be installed from this thread."""
    return _WATCHER.install()


def should_preempt() -> bool:
    """True once the platform asked this learner to stop: its preempt file exists or SIGTERM arrived."""
    if not _WATCHER.installed:
        _WATCHER.install()
    if _WATCHER.requested:
        return True
    preempt_file = current().preempt_file
    if preempt_file is not None and preempt_file.exists():
        _WATCHER.requested = True  # sticky, like the signal: the platform does not take a stop request back
        return True
    return False
