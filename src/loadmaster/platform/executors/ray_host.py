"""The Ray actor that hosts one learner on its node (RayExecutor makes it remote; this module imports no
ray, so it stays importable and testable without a cluster).

The host is the shim's parent on that machine: it starts the shim (spawn.py, as the local executor does),
keeps the learner's files in a scratch directory there, hands their new bytes to the server on each poll,
and relays stop requests and SIGKILL. The shim runs in a session of its own, so the learner survives the
host actor too; the exit file still records how it ended.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from loadmaster.platform.executors.files import AttemptFiles, read_from, read_json, size_of, write_atomic
from loadmaster.platform.executors.procs import is_running
from loadmaster.platform.executors.sandbox import clean_env
from loadmaster.platform.executors.shim import ShimRequest
from loadmaster.platform.executors.spawn import (
    ShimRecord,
    abort,
    await_started,
    final_exit_code,
    signal_learners,
    spawn_shim,
)
from loadmaster.runtime import env as contract

SCRATCH_ENV = "LOADMASTER_RAY_SCRATCH"  # where hosts keep learner files on their node (default: the temp dir)


def scratch_dir(root: str | None, job_id: str, attempt: int) -> Path:
    base = Path(root or os.environ.get(SCRATCH_ENV) or tempfile.gettempdir()) / "loadmaster-ray"
    return base / re.sub(r"[^\w.-]", "_", job_id) / str(attempt)


class LearnerHost:
    """One learner on this node: start(), state() on every poll, stop()/kill(), cleanup() at the end."""

    def __init__(self, job_id: str, attempt: int, rank: int, scratch_root: str | None = None) -> None:
        root = scratch_dir(scratch_root, job_id, attempt)
        self.files = AttemptFiles(root / "logs", root / "reports")
        self.rank = rank
        self.popen: subprocess.Popen[bytes] | None = None
        self.record: ShimRecord | None = None

    def start(self, argv: list[str], workdir: str, env: dict[str, str], dirs: list[str],
              timeout_s: float) -> dict[str, Any]:
        """Start the learner; {"ok": True} once it runs, else {"ok": False, "error": why}."""
        try:
            self.files.make_dirs()
            for directory in dirs:  # checkpoint and results dirs: on shared storage, or this node's own
                Path(directory).mkdir(parents=True, exist_ok=True)
            for stale in (self.files.exit(self.rank), self.files.pid(self.rank)):
                stale.unlink(missing_ok=True)
        except OSError as exc:
            return {"ok": False, "error": f"cannot prepare the learner's directories on {socket.gethostname()}: {exc}"}
        # The report and preempt files are this node's copies; the server mirrors them.
        env = {**env, contract.REPORT_FILE: str(self.files.report(self.rank)),
               contract.PREEMPT_FILE: str(self.files.preempt)}
        # Nothing of the Ray worker's environment (its RAY_* settings, the node's credentials) reaches the learner.
        request = ShimRequest(argv=tuple(argv), workdir=workdir, env=clean_env(None) | env,
                              log=str(self.files.log(self.rank)), exit=str(self.files.exit(self.rank)),
                              pid=str(self.files.pid(self.rank)), clean=True)
        try:
            self.popen = spawn_shim(request)
        except OSError as exc:
            return {"ok": False, "error": f"cannot start the shim: {exc}"}
        result = await_started(self.popen, request, time.monotonic() + timeout_s)
        if isinstance(result, str):
            abort(self.popen, request, None)
            return {"ok": False, "error": result}
        self.record = result
        return {"ok": True}

    def state(self, log_offset: int, report_offset: int, max_bytes: int) -> dict[str, Any]:
        """New log and report bytes from the offsets, and the exit code once the learner has ended (then
        `drained` says whether these bytes reach the end of both files)."""
        exit_code = None
        if self.record is not None and self._shim_exited(self.record):
            exit_code = final_exit_code(self.files, self.rank, self.record)
        log = read_from(self.files.log(self.rank), log_offset, max_bytes)
        report = read_from(self.files.report(self.rank), report_offset, max_bytes)
        drained = (exit_code is not None
                   and log_offset + len(log) >= size_of(self.files.log(self.rank))
                   and report_offset + len(report) >= size_of(self.files.report(self.rank)))
        return {"exit_code": exit_code, "log": log, "report": report, "drained": drained}

    def _shim_exited(self, record: ShimRecord) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return not is_running(record.shim_pid, record.shim_start)

    def stop(self, preempt: str, signal_now: bool) -> None:
        """Publish the stop request (the preempt file), then SIGTERM the learner's tree if asked."""
        write_atomic(self.files.preempt, preempt)
        if signal_now and self.record is not None:
            signal_learners([self.record], signal.SIGTERM)

    def kill(self) -> None:
        if self.record is not None:
            signal_learners([self.record], signal.SIGKILL)

    def cleanup(self) -> None:
        """The server has copied everything: remove this learner's scratch files (and the attempt's
        directory once no learner of it is left on this node)."""
        for path in (self.files.log(self.rank), self.files.exit(self.rank), self.files.pid(self.rank),
                     self.files.report(self.rank)):
            path.unlink(missing_ok=True)
        root = self.files.log_dir.parent
        if not any(self.files.log_dir.glob("rank-*")) and not any(self.files.report_dir.glob("rank-*")):
            shutil.rmtree(root, ignore_errors=True)


def kill_orphan(job_id: str, attempt: int, rank: int, scratch_root: str | None = None) -> bool:
    """Run as a Ray task on the learner's node once its host actor is gone: the shim outlives the host by
    design, so its learner would keep its GPUs. SIGKILL it by the shim's pid file; True if it was alive."""
    root = scratch_dir(scratch_root, job_id, attempt)
    files = AttemptFiles(root / "logs", root / "reports")
    record = ShimRecord.from_dict(read_json(files.pid(rank)))
    if record is None or not is_running(record.pid, record.start):
        return False
    signal_learners([record], signal.SIGKILL)
    return True
