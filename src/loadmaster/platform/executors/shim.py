"""The supervisor of one learner: `python -m loadmaster.platform.executors.shim` (request on stdin, JSON).

An executor starts one shim per learner in a session of its own, so the shim outlives a kill -9 of the
server (or of a Ray actor) and still records how its learner ended. The shim:
- runs the learner's command in a process group of its own, stdin from /dev/null, stdout and stderr
  appended to the log;
- writes the pid file (its own and the learner's pid and start token, the boot id) once the command runs;
  the executor waits for that file to know the launch worked; when the command cannot start, the shim
  says why on stderr (which the executor points at the log) and exits with 127 without a pid file;
- is the child subreaper of its learner (tree.py), so whatever the learner starts stays below the shim,
  even processes in sessions of their own (torchrun's workers) and orphans of exited parents, which it
  collects as they exit;
- forwards SIGTERM to the learner's whole tree (the executor signals the tree directly too; this covers
  anyone else who signals the shim);
- when the command exits, kills what is left of its tree (a background process of a shell script or a
  worker of a launcher holding a GPU), then writes the exit file: the code, negative for a signal
  (subprocess' convention);
- with "lock" and "fence" in the request, holds the lock file (flock; the local executor's is the log) for its
  whole life and runs nothing if the fence file exists once it holds it: a restarted server that found no
  trace of this rank fenced the attempt (executors/files.py), and a shim that comes up late must not run it
  beside its retry;
- with "watch" (processes named by pid and start token: a Ray host actor and its raylet), stops its
  learner once any of them is gone: on a Ray node, the node's raylet is what makes the learner reachable
  and accounted for, so a learner must not outlive it (SIGTERM, SIGKILL WATCH_GRACE_S later).
The request: {"argv": [...], "workdir": str, "env": {overlay}, "log": path, "exit": path, "pid": path,
"lock": path or null, "fence": path or null, "watch": [[pid, start], ...]}.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from loadmaster.platform.executors.envvars import child_env
from loadmaster.platform.executors.files import write_atomic
from loadmaster.platform.executors.gang import LOST_EXIT_CODE
from loadmaster.platform.executors.procs import boot_id, is_running, start_token
from loadmaster.platform.executors.tree import ProcessTable, become_subreaper, children, kill_descendants, send

CANNOT_START = 127
FENCED = 126
WATCH_INTERVAL_S = 0.5  # how often a watching shim checks that its host and raylet still run
WATCH_GRACE_S = 2.0  # SIGTERM -> SIGKILL for a learner whose node went away (nobody waits for its checkpoint)


@dataclass(frozen=True, slots=True)
class ShimRequest:
    argv: tuple[str, ...]
    workdir: str
    env: dict[str, str]  # set over the host's environment (envvars.child_env)
    log: str
    exit: str
    pid: str
    lock: str | None = None
    fence: str | None = None
    clean: bool = False  # env is the learner's whole environment (sandbox.clean_env under it), not an overlay
    uid: int | None = None  # run the command as this OS user (the shim runs as root then)
    gid: int | None = None
    sandboxed: bool = False  # argv starts with bwrap: a death by signal N comes back as exit code 128 + N
    watch: tuple[tuple[int, str], ...] = ()  # (pid, start token): the learner stops when one is gone

    def to_json(self) -> str:
        return json.dumps({"argv": list(self.argv), "workdir": self.workdir, "env": self.env,
                           "log": self.log, "exit": self.exit, "pid": self.pid, "lock": self.lock,
                           "fence": self.fence, "clean": self.clean, "uid": self.uid, "gid": self.gid,
                           "sandboxed": self.sandboxed, "watch": [list(w) for w in self.watch]})

    @staticmethod
    def from_json(text: str) -> ShimRequest:
        data: dict[str, Any] = json.loads(text)
        watch = tuple((int(pid), str(start)) for pid, start in data.get("watch") or ())
        return ShimRequest(tuple(data["argv"]), data["workdir"], dict(data["env"]), data["log"],
                           data["exit"], data["pid"], data.get("lock"), data.get("fence"), bool(data.get("clean")),
                           data.get("uid"), data.get("gid"), bool(data.get("sandboxed")), watch)


def _hold_lock(request: ShimRequest) -> bool:
    """Take the rank's lock for the shim's life; False if the attempt is fenced (nothing may run)."""
    if request.lock is None:
        return True
    # Kept open (not inherited) until exit. Write-only, appending: the lock is usually the learner's log.
    fd = os.open(request.lock, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return request.fence is None or not os.path.exists(request.fence)


class _Forwarder:
    """Forwards SIGTERM to the learner's tree; remembers one that arrived before the learner existed."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.pending = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.pgid is None:
            self.pending = True
        else:
            _signal_all(self.pgid, signal.SIGTERM)

    def started(self, pgid: int) -> None:
        self.pgid = pgid
        if self.pending:
            _signal_all(pgid, signal.SIGTERM)


def _signal_all(pgid: int, signum: int) -> None:
    """The learner's group at once, then the rest of our tree (each process once: tree.signal_trees)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)
    send(ProcessTable.scan().outside_group(os.getpid(), pgid), signum)


def _wait_for_leader(leader: int) -> None:
    """Block until the learner's command exits, without reaping it (while the leader is a zombie its group
    id cannot be reused, so the group can be cleaned up safely before the leader is collected); orphans
    re-parented to us meanwhile are collected as they exit."""
    while True:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if info is None or info.si_pid == leader:
            return
        _reap(info.si_pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _clean_up(leader: int, patience_s: float = 10.0) -> None:
    """SIGKILL what is left of the learner's group and tree and collect the orphans among them, until
    nothing is left or `patience_s` passed (a process stuck in the kernel cannot be waited for forever)."""
    deadline = time.monotonic() + patience_s
    while True:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
        kids = children(os.getpid())
        if kids is not None and set(kids) <= {leader}:
            # Every descendant is below one of our children (orphans are re-parented to us, the subreaper,
            # before the leader is a zombie): with the leader our only child, nothing is left; the common
            # case (a learner that leaves nothing) costs no scan of every process on the machine.
            return
        victims = kill_descendants(os.getpid())
        for pid in victims:  # only our own children can be collected; the rest are their parents' to reap
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not victims or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def lost_marker(exit_path: str | Path) -> Path:
    """Written beside the exit file when the learner was stopped because its node went away: however it
    exited (a learner may exit 0 on SIGTERM), the attempt lost it, and the exit code says so."""
    return Path(exit_path).with_suffix(".lost")


def _watch(watched: tuple[tuple[int, str], ...], pgid: int, log_path: str, exit_path: str) -> None:
    """Stop the learner once a watched process is gone (a thread beside the wait for the learner)."""
    while all(is_running(pid, start) for pid, start in watched):
        time.sleep(WATCH_INTERVAL_S)
    write_atomic(lost_marker(exit_path), "lost\n")
    with open(log_path, "ab") as log:
        log.write(b"\nloadmaster: the learner's Ray host or raylet is gone; stopping the learner\n")
    _signal_all(pgid, signal.SIGTERM)
    time.sleep(WATCH_GRACE_S)
    _signal_all(pgid, signal.SIGKILL)


def run(request: ShimRequest, started: Callable[[], None] | None = None) -> int:
    """Supervise the request's learner to its end. `started` is called once the pid file is written (the
    supervisor's forked shim says so on its status pipe, so its executor waits on that, not on the file)."""
    become_subreaper()
    forwarder = _Forwarder()
    signal.signal(signal.SIGTERM, forwarder)
    if not _hold_lock(request):
        print("loadmaster: not started: a restarted server gave this attempt up before it began (fenced)",
              file=sys.stderr)
        return FENCED
    with open(request.log, "ab") as log:
        try:
            child = subprocess.Popen(
                request.argv, cwd=request.workdir,
                env=dict(request.env) if request.clean else child_env(os.environ, request.env),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, process_group=0,
                user=request.uid, group=request.gid, extra_groups=[] if request.uid is not None else None,
            )
        except OSError as exc:
            print(f"loadmaster: cannot start {request.argv[0]!r} in {request.workdir!r}: {exc}", file=sys.stderr)
            return CANNOT_START
    forwarder.started(child.pid)
    if request.watch:
        threading.Thread(target=_watch, args=(request.watch, child.pid, request.log, request.exit),
                         daemon=True).start()
    write_atomic(Path(request.pid), json.dumps({
        "shim_pid": os.getpid(), "shim_start": start_token(os.getpid()),
        "pid": child.pid, "start": start_token(child.pid), "boot_id": boot_id(),
    }) + "\n", durable=False)
    if started is not None:
        started()
    _wait_for_leader(child.pid)
    _clean_up(child.pid)
    code = child.wait()
    if request.sandboxed and 128 < code < 128 + signal.NSIG:
        code = -(code - 128)  # as subprocess reports a death by signal outside a sandbox
    if lost_marker(request.exit).exists():
        code = LOST_EXIT_CODE
    write_atomic(Path(request.exit), f"{code}\n")
    return 0


def main() -> int:
    request = ShimRequest.from_json(sys.stdin.read())
    # Let go of the pipe from the server (sys.stdin.close() leaves fd 0 itself open).
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return run(request)


if __name__ == "__main__":
    sys.exit(main())
