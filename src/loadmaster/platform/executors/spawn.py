"""Start shims (shim.py), wait until their learners run, and read how they ended: shared by the local
executor and the Ray host actor, which both are the shims' parents (or adopt them by pid file)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loadmaster.platform.executors.files import (
    AttemptFiles,
    append_bytes,
    read_exit_code,
    read_from,
    read_json,
    size_of,
    write_atomic,
)
from loadmaster.platform.executors.gang import LOST_EXIT_CODE
from loadmaster.platform.executors.shim import ShimRequest
from loadmaster.platform.executors.tree import signal_trees

# The shim runs with `python -m`, whose sys.path starts with the working directory: running it from the
# directory that holds the loadmaster package makes it importable even from a source checkout.
PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])


@dataclass(frozen=True, slots=True)
class ShimRecord:
    """The shim's pid file: the two processes of one learner, named by pid and start token."""

    shim_pid: int
    shim_start: str
    pid: int  # the learner's command; also its process group id
    start: str
    boot_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"shim_pid": self.shim_pid, "shim_start": self.shim_start, "pid": self.pid,
                "start": self.start, "boot_id": self.boot_id}

    @staticmethod
    def from_dict(data: dict[str, Any] | None) -> ShimRecord | None:
        if data is None:
            return None
        try:
            return ShimRecord(int(data["shim_pid"]), str(data["shim_start"]), int(data["pid"]),
                              str(data["start"]), str(data.get("boot_id", "")))
        except (KeyError, TypeError, ValueError):
            return None


def signal_learners(records: Iterable[ShimRecord], signum: int) -> None:
    """Send `signum` to each learner's whole process tree (tree.signal_trees)."""
    signal_trees([((r.pid, r.start), (r.shim_pid, r.shim_start)) for r in records], signum)


_SHIM_NEEDS = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONHOME", "TMPDIR")


def shim_needs() -> dict[str, str]:
    """Only what running Python needs of the server's environment: no secret of the server's sits in a
    process beside the learner's (a shim of a clean request, the supervisor that forks those)."""
    return {k: v for k, v in os.environ.items() if k in _SHIM_NEEDS}


def _shim_env(request: ShimRequest) -> dict[str, str] | None:
    """The shim's own environment: with a clean request (the learner's whole environment in it), shim_needs();
    else the server's (the shim passes it on to the learner under the request's overlay)."""
    return shim_needs() if request.clean else None


class ShimProcess(Protocol):
    """A shim as its starter follows it: a Popen of our own, or a shim forked by the supervisor (forked.py)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, signum: int) -> None: ...

    def kill(self) -> None: ...


def spawn_shim(request: ShimRequest) -> subprocess.Popen[bytes]:
    """Start the shim in a new session (it survives our death) with its stderr on the learner's log."""
    with open(request.log, "ab") as log:
        os.fchmod(log.fileno(), 0o600)  # the learner's output is its tenant's business (and the server's)
        popen = subprocess.Popen(
            [sys.executable, "-m", "loadmaster.platform.executors.shim"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log,
            cwd=PACKAGE_PARENT, start_new_session=True, close_fds=True, env=_shim_env(request),
        )
    assert popen.stdin is not None
    try:
        popen.stdin.write(request.to_json().encode())
        popen.stdin.close()
    except BrokenPipeError:
        pass  # the shim died at once; await_started reports it from its exit and the log
    return popen


def await_started(popen: ShimProcess, request: ShimRequest, deadline: float) -> ShimRecord | str:
    """The shim's record once its learner runs, or why it did not start (a message for LaunchError)."""
    pid_file = Path(request.pid)
    wait_started = getattr(popen, "wait_started", None)
    if wait_started is not None:  # a forked shim says on its status pipe when its pid file is written
        wait_started(deadline)
    delay = 0.005
    while True:
        record = ShimRecord.from_dict(read_json(pid_file))
        if record is not None:
            return record
        if popen.poll() is not None:
            record = ShimRecord.from_dict(read_json(pid_file))
            if record is not None:
                return record
            log = Path(request.log)
            tail = read_from(log, max(0, size_of(log) - 4096), 4096).decode(errors="replace").strip()
            last = tail.splitlines()[-1] if tail else f"the shim exited with {popen.returncode}"
            return last
        if time.monotonic() >= deadline:
            return "the learner did not start in time (the machine may be overloaded)"
        # Waiting on the shim rather than sleeping: a learner as short as its start (the shim exits right after
        # it) is seen at once instead of at the next look (a forked shim's end is its status pipe's).
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=delay)
        delay = min(delay * 2, 0.05)


def abort(popen: ShimProcess, request: ShimRequest, record: ShimRecord | None) -> None:
    """Kill one learner of a gang that failed to launch, and wait for its shim so nothing is left."""
    if record is None and popen.poll() is None:
        # Not known to run yet: SIGTERM makes the shim forward it to a learner it may just have started.
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            record = ShimRecord.from_dict(read_json(Path(request.pid)))
    if record is not None:
        signal_learners([record], signal.SIGKILL)
    try:
        popen.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=5.0)


def final_exit_code(files: AttemptFiles, rank: int, record: ShimRecord) -> int:
    """How a learner whose shim has exited ended: the exit file's code, or, when the shim vanished without
    writing one (killed with -9 itself), LOST_EXIT_CODE after making sure the learner is gone too and
    recording the loss where the user will look."""
    exit_file = files.exit(rank)
    code = read_exit_code(exit_file)
    if code is not None:
        return code
    signal_learners([record], signal.SIGKILL)
    append_bytes(files.log(rank), b"\nloadmaster: the learner's supervisor (shim) died without recording an exit "
                 b"code; counted as killed (-9)\n")
    write_atomic(exit_file, f"{LOST_EXIT_CODE}\n")
    return LOST_EXIT_CODE
