"""The Ray actor that hosts one learner on its node (RayExecutor makes it remote; this module imports no
ray, so it stays importable and testable without a cluster).

The host is the shim's parent on that machine: it starts the shim (spawn.py, as the local executor does),
keeps the learner's files in a scratch directory there, hands their new bytes to the server on each poll,
and relays stop requests and SIGKILL. The shim runs in a session of its own (a stop must reach the learner's
whole tree, not Ray's worker group), but it watches the host and the node's raylet (the host's parent) and
stops the learner within seconds once either is gone: no learner outlives its node's membership of the
cluster, so no GPU is used that the scheduler thinks is free.
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
from loadmaster.platform.executors.procs import is_running, start_token
from loadmaster.platform.executors.sandbox import clean_env
from loadmaster.platform.executors.shim import ShimRequest, lost_marker
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
PORT_STRIDE = 2  # MASTER_PORT and the port after it (torch's store and its workers' own) are one pair


def _bindable(port: int) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", port))
        return True
    except OSError:
        return False


def free_port_pair(low: int, high: int, preferred: int) -> int | None:
    """A port p in [low, high) with p and p + 1 free on this machine, trying `preferred` first (the
    server's booking keeps two gangs of ours apart), then the range in order; None if all are taken."""
    count = max(0, (high - low) // PORT_STRIDE)
    first = (preferred - low) // PORT_STRIDE if low <= preferred < high else 0
    for i in range(count):
        port = low + ((first + i) % count) * PORT_STRIDE
        if _bindable(port) and _bindable(port + 1):
            return port
    return None


def on_path(env: dict[str, str], python_dir: str | None) -> dict[str, str]:
    """Put the submitting environment's Python first on PATH when this node has it (one machine, or the
    same installation path everywhere), so that `python` in a command finds the packages the job was
    written against; the manifest's own PATH wins."""
    if not python_dir or "PATH" in env or not Path(python_dir).is_dir():
        return env
    return {**env, "PATH": os.pathsep.join([python_dir, os.environ.get("PATH", os.defpath)])}


def _me_and_raylet() -> tuple[tuple[int, str], ...]:
    """This host actor's process and its parent (the raylet that started it): what the shim watches."""
    found = ((pid, start_token(pid)) for pid in (os.getpid(), os.getppid()) if pid > 1)
    return tuple((pid, start) for pid, start in found if start is not None)


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

    def node_id(self) -> str:
        import ray  # only ever called inside the actor, where Ray is loaded

        return str(ray.get_runtime_context().get_node_id())

    def pick_port(self, low: int, high: int, preferred: int) -> int | None:
        """Rank 0's host: the rendezvous port, free on this node (where MASTER_ADDR points)."""
        return free_port_pair(low, high, preferred)

    def start(self, argv: list[str], workdir: str, env: dict[str, str], dirs: list[str],
              timeout_s: float, python_dir: str | None = None) -> dict[str, Any]:
        """Start the learner; {"ok": True} once it runs, else {"ok": False, "error": why}."""
        try:
            self.files.make_dirs()
            for directory in dirs:  # checkpoint and results dirs: on shared storage, or this node's own
                Path(directory).mkdir(parents=True, exist_ok=True)
            exit_file = self.files.exit(self.rank)
            for stale in (exit_file, self.files.pid(self.rank), lost_marker(exit_file)):
                stale.unlink(missing_ok=True)
        except OSError as exc:
            return {"ok": False, "error": f"cannot prepare the learner's directories on {socket.gethostname()}: {exc}"}
        # The report and preempt files are this node's copies; the server mirrors them.
        env = {**on_path(env, python_dir), contract.REPORT_FILE: str(self.files.report(self.rank)),
               contract.PREEMPT_FILE: str(self.files.preempt)}
        # Nothing of the Ray worker's environment (its RAY_* settings, the node's credentials) reaches the learner.
        request = ShimRequest(argv=tuple(argv), workdir=workdir, env=clean_env(None) | env,
                              log=str(self.files.log(self.rank)), exit=str(self.files.exit(self.rank)),
                              pid=str(self.files.pid(self.rank)), clean=True, watch=_me_and_raylet())
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
        lost = lost_marker(self.files.exit(self.rank)).exists()  # stopped because this node is going away
        return {"exit_code": exit_code, "log": log, "report": report, "drained": drained, "lost": lost}

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
                     self.files.report(self.rank), lost_marker(self.files.exit(self.rank))):
            path.unlink(missing_ok=True)
        root = self.files.log_dir.parent
        try:
            left = any(self.files.log_dir.glob("rank-*")) or any(self.files.report_dir.glob("rank-*"))
        except FileNotFoundError:  # another learner of the attempt on this node removed it first
            return
        if not left:
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
