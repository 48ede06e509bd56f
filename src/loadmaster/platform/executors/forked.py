"""Shims forked by the node's supervisor (supervisor.py) rather than started as a fresh Python each.

ShimSupervisor.spawn() hands a request to the supervisor and returns a ForkedShim, which answers like the
Popen of a shim of our own (poll, wait, send_signal, kill, returncode), so spawn.await_started and
spawn.abort treat both alike. It returns None whenever the supervisor cannot say that it forked the shim
(not started, gone, the request too large): the caller then starts the shim itself, as before, and a
launch is never lost. A supervisor found gone is replaced at the next spawn.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from loadmaster.platform.executors.shim import ShimRequest
from loadmaster.platform.executors.spawn import PACKAGE_PARENT, shim_needs
from loadmaster.platform.executors.supervisor import STARTED

UNKNOWN_EXIT = -signal.SIGKILL  # a shim that exited without telling its code was killed


class ForkedShim:
    """A shim forked by the supervisor, followed through its status pipe: the pipe's end is the shim's."""

    def __init__(self, pid: int, status_fd: int, buffered: bytes) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._fd = status_fd
        self._buffer = buffered

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"shim {self.pid}", timeout or 0.0)
            self._read(left)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        # Until its pipe has ended the shim has not exited, so its pid is still its own.
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _read(self, timeout: float | None) -> None:
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return
        data = os.read(self._fd, 4096)
        if data:
            self._buffer += data
            return
        os.close(self._fd)
        # What followed the pid: STARTED once its learner ran, then the shim's code, if it lived to write it.
        said = [word for word in self._buffer.split() if word != STARTED]
        self.returncode = int(said[-1]) if said else UNKNOWN_EXIT

    def wait_started(self, deadline: float) -> None:
        """Block until the shim says its learner runs (its pid file is written), it has exited, or the
        monotonic `deadline` passed: one wait on the status pipe instead of polls of the pid file."""
        while self.returncode is None and STARTED not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._read(left)

    def __del__(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                os.close(self._fd)


class ShimSupervisor:
    """The executor's side of its supervisor process (started at the first spawn)."""

    def __init__(self, pid_timeout_s: float = 30.0) -> None:
        self.pid_timeout_s = pid_timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    @property
    def pid(self) -> int | None:
        with self._lock:
            return None if self._process is None else self._process.pid

    def spawn(self, request: ShimRequest) -> ForkedShim | None:
        if not request.clean:
            return None  # the shim would pass the supervisor's reduced environment on to the learner
        status_r, status_w = os.pipe()
        try:
            with open(request.log, "ab") as log:
                os.fchmod(log.fileno(), 0o600)
                if not self._send(request.to_json().encode(), [log.fileno(), status_w]):
                    os.close(status_r)
                    return None
        finally:
            os.close(status_w)
        return self._forked(status_r)

    def _send(self, message: bytes, fds: list[int]) -> bool:
        with self._lock:
            for _ in range(2):  # a supervisor found gone is replaced once
                sock = self._sock if self._sock is not None else self._start()
                if sock is None:
                    return False
                try:
                    socket.send_fds(sock, [message], fds)
                    return True
                except OSError as err:
                    if err.errno == errno.EMSGSIZE:
                        return False
                    self._drop()
            return False

    def _forked(self, status_r: int) -> ForkedShim | None:
        """The shim's pid from its status pipe, or None when no shim was forked (the pipe ended first)."""
        deadline = time.monotonic() + self.pid_timeout_s
        buffer = b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([status_r], [], [], max(0.0, left))
            if not ready:
                # The supervisor is stuck: kill it so it forks nothing more, and close the pipe, so that
                # a child forked meanwhile cannot write its pid and runs nothing.
                with self._lock:
                    self._drop(kill=True)
                os.close(status_r)
                return None
            data = os.read(status_r, 4096)
            if not data:
                os.close(status_r)
                return None
            buffer += data
        pid, _, rest = buffer.partition(b"\n")
        return ForkedShim(int(pid), status_r, rest)

    def _start(self) -> socket.socket | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "loadmaster.platform.executors.supervisor"],
                stdin=theirs.fileno(), stdout=subprocess.DEVNULL, cwd=PACKAGE_PARENT, start_new_session=True,
                close_fds=True, env=shim_needs(),
            )
        except OSError:
            ours.close()
            return None
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def _drop(self, kill: bool = False) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        process, self._process = self._process, None
        if process is not None:
            if kill:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0 if not kill else 5)

    def close(self) -> None:
        """Let the supervisor go: it exits once the shims it forked have (they run on without us)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
            process, self._process = self._process, None
        if process is not None:
            # Collected here if it has already exited; otherwise it is init's to collect once it does.
            process.poll()
